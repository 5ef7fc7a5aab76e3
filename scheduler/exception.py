"""Typed errors of the scheduler. They cross RPC intact: oslo.messaging rebuilds
them on the client from their ``kwargs`` (this module and ``db.errors``, whose
shared errors it re-exports, are the allowed remote modules)."""
from __future__ import annotations

from db.errors import BerthError, Conflict, InvalidRequest, NotFound, ServiceUnavailable

__all__ = ["BerthError", "ClaimExpired", "Conflict", "Forbidden", "InternalError", "InvalidRequest",
           "NoValidHost", "NotFound", "PluginError", "RequestTimeout", "ServiceUnavailable"]


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


class PluginError(BerthError):
    """A filter or weigher broke the plugin contract (e.g. a reason that is not a
    non-empty string); the request fails and nothing is claimed."""

    msg_fmt = "Plugin %(plugin)s: %(reason)s"

    def __init__(self, message: str | None = None, *, plugin: str = "",
                 reason: str = "") -> None:
        super().__init__(message, plugin=plugin, reason=reason)
        self.plugin = plugin
        self.reason = reason


class RequestTimeout(BerthError):
    """A request ran past ``[scheduler] request_timeout``; it failed as a whole and
    nothing of it stays claimed."""

    msg_fmt = ("Request stopped after %(timeout)s s ([scheduler] request_timeout) while "
               "placing instance %(instance_index)s; nothing was claimed")

    def __init__(self, message: str | None = None, *, timeout: float = 0.0,
                 instance_index: int = 0) -> None:
        super().__init__(message, timeout=timeout, instance_index=instance_index)
        self.timeout = timeout
        self.instance_index = instance_index


class InternalError(BerthError):
    """The scheduler failed on its side; the details (traceback included) are in the
    scheduler's log under ``request_id``, never in the reply."""

    msg_fmt = ("Internal error in %(method)s: see the scheduler's log for request "
               "%(request_id)s")

    def __init__(self, message: str | None = None, *, method: str = "",
                 request_id: str | None = None) -> None:
        super().__init__(message, method=method, request_id=request_id)
        self.method = method
        self.request_id = request_id


class Forbidden(BerthError):
    """The caller's context is not allowed this call (``[scheduler] enforce_policy``);
    it says which rule, and nothing about the target (e.g. where an instance runs)."""

    msg_fmt = "Not allowed by policy rule %(rule)s"

    def __init__(self, message: str | None = None, *, rule: str = "") -> None:
        super().__init__(message, rule=rule)
        self.rule = rule


class ClaimExpired(BerthError):
    """Placements this client received are no longer held (their pending claims
    were released, e.g. by the reaper after ``[scheduler] claim_ttl``): do not
    build them; ask for new placements."""

    msg_fmt = ("The scheduler no longer holds the placement of %(instance_uuids)s "
               "(released before it was confirmed); select again")

    def __init__(self, message: str | None = None, *,
                 instance_uuids: list | None = None) -> None:
        super().__init__(message, instance_uuids=list(instance_uuids or ()))
        self.instance_uuids = list(instance_uuids or ())
