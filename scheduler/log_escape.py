"""Log lines that say what they hold: control characters escaped.

A request's values reach log messages (a zone, a capabilities value, an
argument's name in an error), and a newline among them would start a line of
its own that looks like the daemon's. :class:`EscapeControls`, on every handler
of the root logger, writes each control, line-separator and bidi character of a
message (and of a logged exception's message) as an escape
(``db.limits.escape_controls``); the request context's ids are escaped where
contexts are read (``scheduler.rpc.ContextSerializer``).
"""
from __future__ import annotations

import logging

from db.limits import escape_controls


class EscapeControls(logging.Filter):
    """Escapes control characters in a record's message and exception."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:       # a broken format: the handler reports it as usual
            return True
        safe = escape_controls(message)
        if safe != message:
            record.msg, record.args = safe, None
        if record.exc_info and record.exc_info[1] is not None:
            _escape_exception(record.exc_info[1])
        return True


def _escape_exception(error: BaseException) -> None:
    """Escape the string arguments of ``error`` and of the exceptions it chains
    (what a formatted traceback prints as their messages)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        try:
            args = tuple(escape_controls(a) if isinstance(a, str) else a for a in error.args)
            if args != error.args:
                error.args = args
        except Exception:  # noqa: S110 (an exception type that refuses new args)
            pass
        error = error.__cause__ or error.__context__


def install(logger: logging.Logger | None = None) -> None:
    """Put :class:`EscapeControls` on every handler of ``logger`` (the root)."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
