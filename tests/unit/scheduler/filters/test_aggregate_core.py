from oslo_config import cfg

from scheduler.filters.aggregate_core import AggregateCoreFilter
from tests.unit.scheduler import fakes


def _agg_passes(host, vcpus):
    return fakes.passes(AggregateCoreFilter(cfg.CONF), host, fakes.fake_spec(vcpus=vcpus),
                                                     fakes.ctx())


def test_aggregate_ratio_smallest_wins():
    host = fakes.fake_host(vcpus=8, vcpus_used=12, cpu_allocation_ratio=16.0,
                           aggregates=[{"cpu_allocation_ratio": "2.0"},
                                       {"cpu_allocation_ratio": "4.0"}])
    assert _agg_passes(host, 4) is None
    assert _agg_passes(host, 5) == "insufficient vCPUs: need 5"


def test_aggregate_falls_back_to_host_ratio():
    host = fakes.fake_host(vcpus=8, vcpus_used=12, cpu_allocation_ratio=2.0)
    assert _agg_passes(host, 4) is None
    assert _agg_passes(host, 5) == "insufficient vCPUs: need 5"


def test_vector_form_per_host_ratio():
    hosts = [fakes.fake_host(vcpus=8, vcpus_used=12, cpu_allocation_ratio=16.0,
                             aggregates=[{"cpu_allocation_ratio": "2.0"},
                                         {"cpu_allocation_ratio": "4.0"}]),
             fakes.fake_host(vcpus=8, vcpus_used=12, cpu_allocation_ratio=2.0,
                             aggregates=[{"cpu_allocation_ratio": "bad"}, {"ssd": "1"}]),
             fakes.fake_host(vcpus=8, vcpus_used=12, cpu_allocation_ratio=2.0,
                             reserved_host_cpus=1),
             fakes.fake_host(vcpus=4, cpu_allocation_ratio=16.0,
                             aggregates=[{"cpu_allocation_ratio": "16"}])]
    flt = AggregateCoreFilter(cfg.CONF)
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(vcpus=4)) == \
        [True, True, False, True]
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(vcpus=5)) == [False] * 4
