"""Typed errors. They cross RPC intact: oslo.messaging rebuilds them on the
client from their ``kwargs`` (this module is in the allowed remote modules)."""
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


class InvalidRequest(BerthError):
    """A payload failed validation; ``field`` names where, ``reason`` says why."""

    msg_fmt = "Invalid request: %(field)s: %(reason)s"

    def __init__(self, message: str | None = None, *, field: str = "request",
                 reason: str = "invalid") -> None:
        super().__init__(message, field=field, reason=reason)
        self.field = field
        self.reason = reason


class NoValidHost(BerthError):
    """No host can take the request. ``summary`` is the structured explanation:
    ``{"hosts": N, "filters": [{"filter": name, "removed": n, "reasons": {text: n}}]}``.
    """

    msg_fmt = "No valid host: %(reason)s"

    def __init__(self, message: str | None = None, *, reason: str = "",
                 summary: dict | None = None) -> None:
        super().__init__(message, reason=reason, summary=summary or {})
        self.reason = reason
        self.summary = summary or {}


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


class PluginError(BerthError):
    """A filter or weigher broke the plugin contract (e.g. a reason that is not a
    non-empty string); the request fails and nothing is claimed."""

    msg_fmt = "Plugin %(plugin)s: %(reason)s"

    def __init__(self, message: str | None = None, *, plugin: str = "",
                 reason: str = "") -> None:
        super().__init__(message, plugin=plugin, reason=reason)
        self.plugin = plugin
        self.reason = reason
