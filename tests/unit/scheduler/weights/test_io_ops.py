from oslo_config import cfg

from scheduler.weights.io_ops import IoOpsWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_io_ops():
    host = fakes.fake_host(num_io_ops=3)
    assert IoOpsWeigher(cfg.CONF).weigh(host, fakes.fake_spec(), fakes.ctx()) == 3


def test_multiplier_default_is_negative():
    w = IoOpsWeigher(cfg.CONF)
    assert w.weight_multiplier(fakes.fake_host()) == -1.0
    with fakes.config("filter_scheduler", io_ops_weight_multiplier=2.0):
        assert w.weight_multiplier(fakes.fake_host()) == 2.0
    host = fakes.fake_host(aggregates=[{"io_ops_weight_multiplier": "-10"}])
    assert w.weight_multiplier(host) == -10.0
