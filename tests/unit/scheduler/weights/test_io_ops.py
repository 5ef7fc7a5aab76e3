from oslo_config import cfg

from scheduler.weights.io_ops import IoOpsWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_io_ops():
    host = fakes.fake_host(num_io_ops=3)
    assert fakes.weigh(IoOpsWeigher(cfg.CONF), host, fakes.fake_spec(), fakes.ctx()) == 3


def test_multiplier_default_is_negative():
    w = IoOpsWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == -1.0
    with fakes.config("filter_scheduler", io_ops_weight_multiplier=2.0):
        assert fakes.multiplier(w, fakes.fake_host()) == 2.0
    host = fakes.fake_host(aggregates=[{"io_ops_weight_multiplier": "-10"}])
    assert fakes.multiplier(w, host) == -10.0
