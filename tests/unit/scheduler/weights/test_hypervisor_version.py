from oslo_config import cfg

from scheduler.weights.hypervisor_version import HypervisorVersionWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_version():
    w = HypervisorVersionWeigher(cfg.CONF)
    assert fakes.weigh(w, fakes.fake_host(hypervisor_version=9001000), fakes.fake_spec(),
                   fakes.ctx()) == 9001000
    assert fakes.weigh(w, fakes.fake_host(hypervisor_version=None), fakes.fake_spec(),
                   fakes.ctx()) == 0


def test_multiplier():
    w = HypervisorVersionWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == 1.0
    with fakes.config("filter_scheduler", hypervisor_version_weight_multiplier=-1.0):
        assert fakes.multiplier(w, fakes.fake_host()) == -1.0
    host = fakes.fake_host(aggregates=[{"hypervisor_version_weight_multiplier": "0"}])
    assert fakes.multiplier(w, host) == 0.0
