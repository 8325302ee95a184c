"""The one exception the madpipe package raises for bad input, I/O and solver failures."""


class Error(Exception):
    """A madpipe error, with the message the ``madpipe`` command prints after ``error:``.

    ``str(e)`` reads ``"<file>: <field>: <problem>"`` (empty parts left out), for example
    ``"model.json: /layers/3/forward_ms: must be a finite number >= 0, got -1.5"``.

    Attributes:
        kind: ``"invalid_input"``, ``"io"``, ``"unsupported"``, ``"solver"``, ``"runtime"``
            or ``"internal"``.
        file: the file the problem is in ("" when none).
        field: the JSON pointer or keyword argument at fault ("" when none).
        problem: what is wrong with it.
    """

    def __init__(self, message, *, kind="invalid_input", file="", field="", problem=None):
        super().__init__(message)
        self.kind = kind
        self.file = file
        self.field = field
        self.problem = message if problem is None else problem
