"""Where the planner's status lines go: a callable, a logger, or the ``madpipe`` logger."""

from __future__ import annotations

import logging
import typing

from ._errors import Error

LOGGER = logging.getLogger("madpipe")

# What ``progress=`` takes: a callable receiving each line, a logger (lines at INFO), or None
# (the "madpipe" logger at INFO: silent unless logging is configured to show it).
Progress = typing.Union[typing.Callable[[str], object], logging.Logger, None]


def progress_sink(progress: Progress) -> typing.Callable[[str], object]:
    """The callable that receives the status lines for a ``progress=`` argument."""
    if progress is None:
        progress = LOGGER
    if isinstance(progress, logging.Logger):
        logger = progress
        return lambda line: logger.info("%s", line)
    if callable(progress):
        return progress
    raise Error(f"progress: expected a callable, a logging.Logger or None, got {progress!r}",
                field="progress", problem=f"expected a callable, a logging.Logger or None, got {progress!r}")
