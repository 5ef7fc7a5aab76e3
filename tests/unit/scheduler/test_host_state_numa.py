"""``HostState.fit`` / ``numa_reason`` and the ``[numa] isolate_on_smt_hosts`` option:
the option is part of the fit signature, so answers remembered under one setting are
never given under the other."""
from __future__ import annotations

from oslo_config import cfg

from numa.topology import HostTopology
from scheduler import host_state
from scheduler.filters.numa_topology import NUMATopologyFilter
from tests.unit.numa.factories import host_cell, smt_cell
from tests.unit.scheduler.fakes import config, ctx, fake_host, fake_spec, passes

ISOLATE = {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"}


def smt_host(name="smt"):
    return fake_host(name, numa_topology=HostTopology(cells=(smt_cell(cores=4),)))


def plain_host(name="plain"):
    cell = host_cell(pcpuset=range(4), memory_mb=8192)
    return fake_host(name, numa_topology=HostTopology(cells=(cell,)))


def test_isolate_guest_follows_the_option_on_smt_hosts():
    spec = fake_spec(vcpus=2, extra_specs=ISOLATE)
    host = smt_host()
    assert host.numa_reason(spec) is None        # default: reserve-siblings
    assert host.fit(spec).fits
    with config("numa", isolate_on_smt_hosts="refuse"):
        assert "SMT siblings" in host.numa_reason(spec)
        assert "SMT siblings" in host.fit(spec).reason
        assert plain_host().numa_reason(spec) is None
    assert host.numa_reason(spec) is None        # the default again, not a cached refusal
    fitted = host.fit(spec).numa_fitted
    assert fitted.cells[0].cpuset_isolated == frozenset({1, 3})


def test_the_option_is_in_smt_hosts_signatures_only():
    smt, plain = smt_host(), plain_host()
    before_smt, before_plain = smt.fit_signature(), plain.numa_signature()
    with config("numa", isolate_on_smt_hosts="refuse"):
        assert smt.fit_signature() != before_smt
        assert smt.numa_signature()[3] == "refuse"
        assert plain.numa_signature() == before_plain   # no SMT: fits the same either way
    assert host_state.isolate_on_smt_hosts() == "reserve-siblings"


def test_numa_filter_class_keys_change_with_the_option():
    flt = NUMATopologyFilter(cfg.CONF)
    keys = flt.class_keys()
    smt = smt_host()
    before = {name: fn(smt) for name, fn in keys.items()}
    with config("numa", isolate_on_smt_hosts="refuse"):
        after = {name: fn(smt) for name, fn in keys.items()}
        spec = fake_spec(vcpus=2, extra_specs=ISOLATE)
        assert "SMT siblings" in passes(flt, smt, spec, ctx())
    assert all(before[name] != after[name] for name in keys)
