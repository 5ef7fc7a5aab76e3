"""What filters and weighers share: the per-request context, ``SKIP``, loading.

A request cycle hands every plugin one :class:`RequestContext` per instance of
the request (kube-scheduler's CycleState, but immutable). A plugin turns it
into its own per-request state in ``prepare`` (the PreFilter step) and gets
that state back in its check; nothing per request is kept on the plugin
object, which is shared by every request the process serves.

Plugins are stevedore entry points, instantiated once with the config.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from stevedore import named

from scheduler import exception


class _Skip:
    """``prepare`` returns ``SKIP`` when the plugin has nothing to say about this
    request: a filter passes every host, a weigher weighs every host the same."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SKIP"

    def __reduce__(self):
        return (_Skip, ())


SKIP = _Skip()


@dataclasses.dataclass(frozen=True)
class RequestContext:
    """The request as one instance of it sees it (values computed once).

    ``group_hosts`` counts, per host name, the members of the request's server
    group placed there (earlier instances of this request included);
    ``instance_nodes`` maps the instances named by the request's hints to the
    node ids holding them.
    """

    spec: Any                                   # scheduler.request_spec.RequestSpec
    now: datetime.datetime
    conf: Any
    group_hosts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    instance_nodes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    index: int = 0                              # which instance of the request


def load_plugins(namespace: str, names: Sequence[str], conf, option: str) -> list:
    """Instantiate the named plugins in the given order; unknown names fail with the
    list of known ones."""
    missing: list[str] = []

    def _load_failed(manager, entrypoint, error):
        raise exception.InvalidRequest(
            field=f"filter_scheduler.{option}",
            reason=f"plugin {entrypoint.name} failed to load: {error}")

    mgr = named.NamedExtensionManager(
        namespace, names=list(names), invoke_on_load=False, name_order=True,
        on_missing_entrypoints_callback=missing.extend,
        on_load_failure_callback=_load_failed)
    if missing:
        known = sorted(ep.name for ep in mgr.list_entry_points())
        hint = f"; known: {', '.join(known)}" if known else ""
        raise exception.InvalidRequest(
            field=f"filter_scheduler.{option}",
            reason=f"unknown plugin(s) {', '.join(sorted(missing))}{hint}")
    return [ext.plugin(conf) for ext in mgr]


def overrides(plugin: Any, base: type, method: str) -> bool:
    """Whether ``plugin``'s class defines ``method`` itself (not only ``base``)."""
    return getattr(type(plugin), method, None) is not getattr(base, method, None)
