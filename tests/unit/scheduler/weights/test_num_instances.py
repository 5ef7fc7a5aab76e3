from oslo_config import cfg

from scheduler.weights.num_instances import NumInstancesWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_instance_count():
    host = fakes.fake_host(num_instances=7)
    assert fakes.weigh(NumInstancesWeigher(cfg.CONF), host, fakes.fake_spec(), fakes.ctx()) == 7


def test_multiplier_default_is_off():
    w = NumInstancesWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == 0.0
    with fakes.config("filter_scheduler", num_instances_weight_multiplier=-1.0):
        assert fakes.multiplier(w, fakes.fake_host()) == -1.0
    host = fakes.fake_host(aggregates=[{"num_instances_weight_multiplier": "1.5"}])
    assert fakes.multiplier(w, host) == 1.5
