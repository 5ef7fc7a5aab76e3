from oslo_config import cfg

from scheduler.weights.cpu import CPUWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_free_vcpus_within_limit():
    host = fakes.fake_host(vcpus=8, vcpus_used=10, cpu_allocation_ratio=4.0,
                           reserved_host_cpus=2)
    assert fakes.weigh(CPUWeigher(cfg.CONF), host, fakes.fake_spec(), fakes.ctx()) == 14


def test_multiplier_default_config_and_aggregate():
    w = CPUWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == 1.0
    with fakes.config("filter_scheduler", cpu_weight_multiplier=-1.0):
        assert fakes.multiplier(w, fakes.fake_host()) == -1.0
    host = fakes.fake_host(aggregates=[{"cpu_weight_multiplier": "2"},
                                       {"cpu_weight_multiplier": "0.5"}])
    assert fakes.multiplier(w, host) == 0.5
