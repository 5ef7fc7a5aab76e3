"""Small builders for filter and weigher tests: hosts, request specs, contexts.

``fake_host(**attrs)`` sets any HostState attribute; ``aggregates`` may be given
as metadata dicts. ``fake_spec(**overrides)`` takes flavor fields (vcpus,
memory_mb, root_gb, ephemeral_gb, swap, extra_specs) and top-level payload keys.
``config(group, **values)`` overrides options for a ``with`` block.
``filter_vector`` / ``weigh_vector`` run a vector form over columns of the given
hosts and check it against the per-host answer.
"""
from __future__ import annotations

import contextlib
import datetime
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from oslo_config import cfg

from scheduler.filters import FilterContext
from scheduler.host_columns import HostColumns
from scheduler.host_state import AggregateInfo, HostState
from scheduler.request_spec import RequestSpec

NOW = datetime.datetime(2024, 1, 1, 12, 0, 0)

_ids = itertools.count(1)

_FLAVOR_KEYS = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap", "extra_specs", "name")


def aggregate(metadata: Mapping[str, str] | None = None, *, name: str | None = None,
              hosts: tuple[str, ...] = ()) -> AggregateInfo:
    """An AggregateInfo with the given metadata."""
    agg_id = next(_ids)
    return AggregateInfo(id=agg_id, uuid=f"agg-{agg_id}", name=name or f"agg{agg_id}",
                         metadata=dict(metadata or {}), hosts=frozenset(hosts))


def fake_host(host: str = "host1", nodename: str | None = None, *,
              aggregates: list | tuple = (), default_az: str | None = "nova",
              **attrs: Any) -> HostState:
    """A HostState with roomy defaults (8 vCPUs, 16 GiB, 100 GB, up, enabled)."""
    state = HostState(next(_ids), host, nodename or host)
    state.vcpus = 8
    state.memory_mb = 16384
    state.local_gb = 100
    state.hypervisor_type = "QEMU"
    state.hypervisor_version = 8002000
    state.supported_instances = [("x86_64", "kvm", "hvm")]
    state.last_heartbeat = NOW
    for key, value in attrs.items():
        if not hasattr(state, key) and key not in HostState.__slots__:
            raise AttributeError(f"HostState has no attribute {key}")
        setattr(state, key, value)
    aggs = tuple(a if isinstance(a, AggregateInfo) else aggregate(a) for a in aggregates)
    state.set_aggregates(aggs, default_az)
    return state


def fake_spec(**overrides: Any) -> RequestSpec:
    """A validated RequestSpec: a 1 vCPU / 512 MB / 1 GB flavor unless overridden."""
    flavor: dict[str, Any] = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    for key in _FLAVOR_KEYS:
        if key in overrides:
            flavor[key] = overrides.pop(key)
    data = {"flavor": flavor, **overrides}
    return RequestSpec.from_primitive(data)


def ctx(now: datetime.datetime = NOW, conf: Any = None,
        group_hosts: Mapping[str, int] | None = None) -> FilterContext:
    """A FilterContext on the global config."""
    return FilterContext(now=now, conf=conf if conf is not None else cfg.CONF,
                         group_hosts=dict(group_hosts or {}))


@contextlib.contextmanager
def config(group: str | None = None, **values: Any) -> Iterator[cfg.ConfigOpts]:
    """Override options of ``group`` on ``cfg.CONF`` for the ``with`` block."""
    for name, value in values.items():
        cfg.CONF.set_override(name, value, group=group)
    try:
        yield cfg.CONF
    finally:
        for name in values:
            cfg.CONF.clear_override(name, group=group)


def filter_vector(flt, hosts: list[HostState], spec: RequestSpec,
                  context: FilterContext | None = None) -> list[bool] | None:
    """``flt.filter_vector`` over columns of ``hosts`` as a list (None when it has no
    vector form for this request), checked against ``host_passes`` host by host."""
    context = context or ctx()
    cols = HostColumns(hosts)
    vec = flt.filter_vector(cols, spec, context)
    if vec is None:
        return None
    assert list(vec) == [flt.host_passes(h, spec, context) is None for h in hosts]
    return list(vec)


def weigh_vector(weigher, hosts: list[HostState], spec: RequestSpec,
                 context: FilterContext | None = None) -> list[float] | None:
    """``weigher.weigh_vector`` over columns of ``hosts`` as a list, checked
    against ``weigh`` host by host."""
    context = context or ctx()
    vec = weigher.weigh_vector(HostColumns(hosts), spec, context)
    if vec is None:
        return None
    if isinstance(vec, float):          # "the same for every host"
        vec = [vec] * len(hosts)
    assert list(vec) == [float(weigher.weigh(h, spec, context)) for h in hosts]
    return list(vec)
