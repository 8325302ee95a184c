"""The exceptions the madpipe package raises for bad input, I/O and solver failures."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
import typing


class Error(Exception):
    """A madpipe error, with the message the ``madpipe`` command prints after ``error:``, its
    options named as the keyword arguments of the Python functions (``--remat rotor`` reads
    ``remat="rotor"``, ``--time-limit`` reads ``time_limit``).

    ``str(e)`` reads ``"<file>: <field>: <problem>"`` (empty parts left out), for example
    ``"model.json: /layers/3/forward_ms: must be a finite number >= 0, got -1.5"``.

    Attributes:
        kind: ``"invalid_input"``, ``"io"``, ``"unsupported"``, ``"solver"``, ``"runtime"``
            or ``"internal"``.
        file: the file the problem is in ("" when none).
        field: the JSON pointer or keyword argument at fault ("" when none).
        problem: what is wrong with it.
        smallest_memory_bytes: when no plan fits (``NoPlanFits``), the smallest memory per GPU
            for which the request's algorithm finds a plan, in bytes, as
            ``madpipe.smallest_feasible_memory`` gives it; None otherwise, and when no memory
            would do.
    """

    __module__ = "madpipe"  # tracebacks read madpipe.Error, the name users catch

    def __init__(self, message: str, *, kind: str = "invalid_input", file: str = "",
                 field: str = "", problem: str | None = None,
                 smallest_memory_bytes: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.file = file
        self.field = field
        self.problem = message if problem is None else problem
        self.smallest_memory_bytes = smallest_memory_bytes


class NoPlanFits(Error):
    """``madpipe.plan`` found no plan that fits the GPUs' memory. The message says what would
    fit; ``smallest_memory_bytes`` is the smallest memory per GPU that would, in bytes."""

    __module__ = "madpipe"


# The options of `madpipe plan` that are keywords of madpipe.plan() (--max-k is max_k), and the
# ones whose value is a name, written as a string (--remat rotor is remat="rotor").
_OPTION_KEYWORDS = frozenset({
    "gpus", "memory", "bandwidth", "algorithm", "remat", "offload", "host_bandwidth",
    "weight_copies", "gpus_per_node", "inter_node_bandwidth", "scheduler", "micro_batches",
    "max_k", "milp_backend", "remat_slots", "time_limit", "verbose", "split_backward",
})
_NAMED_VALUE_KEYWORDS = frozenset({"algorithm", "remat", "offload", "scheduler", "milp_backend",
                                   "split_backward"})
_KEYWORD_OF_OPTION = {"solver": "milp_backend"}
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(?: ([A-Za-z0-9][A-Za-z0-9_.-]*))?")


def speak_python(text: str) -> str:
    """The planner's text with the command line's options as keyword arguments:
    ``"with --remat rotor it is 3.9 GiB"`` reads ``'with remat="rotor" it is 3.9 GiB'``, and
    ``"a longer --time-limit"`` reads ``"a longer time_limit"``. Options the Python functions do
    not have are left as they are."""
    def keyword(match: re.Match[str]) -> str:
        option, value = match.group(1), match.group(2)
        name = option.replace("-", "_")
        name = _KEYWORD_OF_OPTION.get(name, name)
        if name not in _OPTION_KEYWORDS:
            return match.group(0)
        if value is not None and name in _NAMED_VALUE_KEYWORDS:
            return f'{name}="{value}"'
        return name if value is None else f"{name} {value}"
    return _OPTION.sub(keyword, text)


def error_from_planner(message: str, *, kind: str, file: str, field: str, problem: str,
                       no_plan_fits: bool = False) -> Error:
    """The exception for an error of the compiled planner (python/src/module.cpp raises it)."""
    error_type = NoPlanFits if no_plan_fits else Error
    return error_type(speak_python(message), kind=kind, file=file, field=speak_python(field),
                      problem=speak_python(problem))


def unknown_keyword(function: str, keyword: str, accepted: typing.Iterable[str]) -> Error:
    """The error for a keyword argument ``function`` does not take: the closest accepted one,
    and all of them."""
    names = sorted(accepted)
    closest = difflib.get_close_matches(keyword, names, n=1)
    problem = (f"{function}() has no keyword argument {keyword!r}"
               + (f" (did you mean {closest[0]!r}?)" if closest else "")
               + "; it takes " + ", ".join(names))
    return Error(f"{keyword}: {problem}", field=keyword, problem=problem)


Function = typing.TypeVar("Function", bound=typing.Callable[..., typing.Any])


def checks_keywords(*also_accepted: str) -> typing.Callable[[Function], Function]:
    """Makes a function raise ``unknown_keyword``'s Error, not a TypeError, for a keyword it does
    not take: those of its signature, and ``also_accepted`` (what its ``**options`` take)."""
    def decorate(function: Function) -> Function:
        parameters = inspect.signature(function).parameters.values()
        accepted = frozenset([p.name for p in parameters
                              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
                             + list(also_accepted))

        @functools.wraps(function)
        def checked(*args: typing.Any, **keywords: typing.Any) -> typing.Any:
            for keyword in keywords:
                if keyword not in accepted:
                    raise unknown_keyword(function.__name__, keyword, accepted)
            return function(*args, **keywords)
        return typing.cast(Function, checked)
    return decorate
