"""Which methods a topic serves (``scheduler.rpc.COMPUTE_METHODS`` and
``ADMIN_METHODS``), and the answer to a method no endpoint has: both refused
with InvalidRequest naming the method, never with oslo.messaging's own
NoSuchMethod reply (which carries its traceback)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import oslo_messaging

from scheduler import exception, validation
from scheduler.endpoints.rpc_method import reply
from scheduler.manager import RPC_API_VERSION

if TYPE_CHECKING:
    from scheduler.manager import SchedulerManager


def _refused(reason: str) -> oslo_messaging.ExpectedException:
    return reply(exception.InvalidRequest(field="method", reason=reason))


class _Target(oslo_messaging.Target):
    """The endpoint's target, which oslo.messaging would also dispatch a call of a
    method named ``target`` to: refused like any unknown method."""

    def __call__(self, *args, **kwargs):
        raise _refused("unknown method 'target'") from None


class UnknownMethods:
    """The last endpoint of the RPC server: answers a method no other endpoint has
    with InvalidRequest naming it."""

    target = _Target(version=RPC_API_VERSION)

    def __getattr__(self, name: str):
        # oslo_*: oslo.messaging's reserved endpoint attributes (it warns at
        # start about an endpoint that seems to have one)
        if name.startswith(("_", "oslo_")):
            raise AttributeError(name)

        def unknown(ctxt, **kwargs):
            raise _refused(f"unknown method {validation.show(name)}") from None
        return unknown


class TopicEndpoint:
    """The manager's methods of one topic; the others are refused with
    InvalidRequest naming the method, so broker permissions on the topics decide
    who may call what. A call of ``target`` is refused like any unknown method."""

    target = _Target(version=RPC_API_VERSION)

    def __init__(self, manager: SchedulerManager, methods: frozenset[str] | None,
                 topic: str) -> None:
        """``methods`` None: every RPC method of the manager (the ``rpc_method``
        ones, and ``ping``), never its other attributes (``db``, ``conf`` ...)."""
        self._manager = manager
        self._methods = methods
        self._topic = topic

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._manager, name, None)
        is_rpc = name == "ping" or getattr(attr, "rpc_method", False)
        if not is_rpc:
            raise AttributeError(name)
        if self._methods is None or name in self._methods:
            return attr
        topic = self._topic

        def refused(ctxt, **kwargs):
            raise _refused(f"{name} is not served on topic {topic}") from None
        return refused
