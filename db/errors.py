"""Errors shared by every layer (the database layer, the scheduler, the tools).

They cross RPC intact: oslo.messaging rebuilds them on the client from their
``kwargs`` (this module and ``scheduler.exception`` are the allowed remote modules).
The scheduler's own errors live in ``scheduler.exception``, which re-exports these.
"""
from __future__ import annotations


class BerthError(Exception):
    """Base of Berth's errors; ``kwargs`` holds the JSON-able constructor arguments."""

    msg_fmt = "An unknown error occurred."

    def __init__(self, message: str | None = None, **kwargs) -> None:
        self.kwargs = dict(kwargs)
        if message is None:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError, ValueError):
                message = self.msg_fmt
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


#: Longest ``field`` and ``reason`` an InvalidRequest carries: an error about a
#: huge value says where and why in a few lines, never echoes the value whole.
MAX_FIELD = 300
MAX_REASON = 1000


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class InvalidRequest(BerthError):
    """A payload failed validation; ``field`` names where, ``reason`` says why
    (both cut to MAX_FIELD / MAX_REASON characters)."""

    msg_fmt = "Invalid request: %(field)s: %(reason)s"

    def __init__(self, message: str | None = None, *, field: str = "request",
                 reason: str = "invalid") -> None:
        field = clip(str(field), MAX_FIELD)
        reason = clip(str(reason), MAX_REASON)
        if message is not None:
            message = clip(str(message), MAX_FIELD + MAX_REASON + 40)
        super().__init__(message, field=field, reason=reason)
        self.field = field
        self.reason = reason


class NotFound(BerthError):
    msg_fmt = "%(kind)s %(name)s not found."

    def __init__(self, message: str | None = None, *, kind: str = "Resource",
                 name: str = "") -> None:
        super().__init__(message, kind=kind, name=name)
        self.kind = kind
        self.name = name


class Conflict(BerthError):
    """An operation refused because of the current state (e.g. allocations exist)."""

    msg_fmt = "Conflict: %(reason)s"

    def __init__(self, message: str | None = None, *, reason: str = "") -> None:
        super().__init__(message, reason=reason)
        self.reason = reason


class ServiceUnavailable(BerthError):
    """A service Berth needs (the database) does not answer. Nothing is held for
    the caller by this call (claims a failed request could not give back stay
    pending, for the reaper or a retry with the same UUIDs); the same call may
    be sent again later (``retryable``)."""

    msg_fmt = "Service unavailable: %(reason)s"
    retryable = True

    def __init__(self, message: str | None = None, *, reason: str = "") -> None:
        super().__init__(message, reason=reason)
        self.reason = reason
