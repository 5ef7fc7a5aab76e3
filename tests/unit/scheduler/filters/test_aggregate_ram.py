from oslo_config import cfg

from scheduler.cycle import plan, vector_verdicts
from scheduler.filters.aggregate_ram import AggregateRamFilter
from scheduler.filters.ram import RamFilter
from scheduler.host_columns import HostColumns
from tests.unit.scheduler import fakes


def _agg_passes(host, memory_mb):
    return fakes.passes(AggregateRamFilter(cfg.CONF), host, fakes.fake_spec(memory_mb=memory_mb),
                        fakes.ctx())


def _used(used, **kw):
    """A 16 GiB host with ``used`` MB already allocated."""
    return fakes.fake_host(memory_mb=16384, memory_mb_used=used, **kw)


def test_aggregate_ratio_overrides_host_ratio():
    host = _used(16384, ram_allocation_ratio=1.0, aggregates=[{"ram_allocation_ratio": "2.0"}])
    assert _agg_passes(host, 16384) is None
    assert _agg_passes(host, 16385) == "insufficient RAM: need 16385 MB"
    # The plain RamFilter ignores the aggregate.
    assert fakes.passes(RamFilter(cfg.CONF), host, fakes.fake_spec(memory_mb=1),
                        fakes.ctx()) is not None


def test_aggregate_ratio_smallest_wins():
    host = _used(16384, ram_allocation_ratio=3.0,
                 aggregates=[{"ram_allocation_ratio": "2.0"}, {"ram_allocation_ratio": "1.5"}])
    assert _agg_passes(host, 8192) is None
    assert _agg_passes(host, 8193) == "insufficient RAM: need 8193 MB"


def test_aggregate_falls_back_to_host_ratio():
    host = _used(16384, ram_allocation_ratio=1.5, aggregates=[{"other": "x"}])
    assert _agg_passes(host, 8192) is None
    assert _agg_passes(host, 8193) is not None
    bad = _used(16384, ram_allocation_ratio=1.5, aggregates=[{"ram_allocation_ratio": "lots"}])
    assert _agg_passes(bad, 8192) is None
    assert _agg_passes(bad, 8193) is not None


def test_one_instance_never_overcommits_against_itself():
    """Over-commit is for the sum of instances: one never gets more than the
    host's physical RAM (MEMORY_MB's max_unit), whatever the ratio."""
    host = _used(0, ram_allocation_ratio=1.0, aggregates=[{"ram_allocation_ratio": "4.0"}])
    assert _agg_passes(host, 16384) is None
    assert _agg_passes(host, 16385) == "insufficient RAM: need 16385 MB"


def test_not_once_per_request():
    assert not AggregateRamFilter.run_filter_once_per_request


def test_vector_form_per_host_ratio():
    hosts = [_used(16384, ram_allocation_ratio=1.0, aggregates=[{"ram_allocation_ratio": "2.0"}]),
             _used(16384, ram_allocation_ratio=1.5, aggregates=[{"ssd": "true"}]),
             _used(16384, ram_allocation_ratio=1.0, reserved_host_memory_mb=1)]
    flt = AggregateRamFilter(cfg.CONF)
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(memory_mb=8192)) == \
        [True, True, False]
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(memory_mb=8193)) == \
        [True, False, False]


def _passes_on(cols, flt, spec):
    req = fakes.ctx().request(spec)
    v = vector_verdicts(plan([flt])[-1], flt.prepare(req), cols)
    return (v.codes == 0).tolist()


def test_columns_follow_aggregate_changes():
    """The owner rewrites a host's row after changing its aggregates; the
    aggregate ratio column follows."""
    host = _used(16384, aggregates=[{"ram_allocation_ratio": "2.0"}])
    cols = HostColumns([host])
    flt = AggregateRamFilter(cfg.CONF)
    spec = fakes.fake_spec(memory_mb=16384)
    assert _passes_on(cols, flt, spec) == [True]
    host.set_aggregates((fakes.aggregate({"ram_allocation_ratio": "1.5"}),), "nova")
    cols.update(0, host)
    assert _passes_on(cols, flt, spec) == [False]
    assert _passes_on(cols, flt, fakes.fake_spec(memory_mb=8192)) == [True]
    host.set_aggregates((), "nova")
    cols.update(0, host)
    assert _passes_on(cols, flt, fakes.fake_spec(memory_mb=1)) == [False]
