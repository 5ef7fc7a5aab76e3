from oslo_config import cfg

from scheduler.weights.ram import RAMWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_free_ram():
    host = fakes.fake_host(memory_mb=16384, memory_mb_used=4096, reserved_host_memory_mb=512)
    assert fakes.weigh(RAMWeigher(cfg.CONF), host, fakes.fake_spec(), fakes.ctx()) == 11776


def test_more_free_ram_weighs_more():
    w = RAMWeigher(cfg.CONF)
    hosts = [fakes.fake_host("h1", memory_mb_used=8192), fakes.fake_host("h2")]
    raw = fakes.weigh_vector(w, hosts, fakes.fake_spec())
    assert raw[0] < raw[1]


def test_multiplier_default_config_and_aggregate():
    w = RAMWeigher(cfg.CONF)
    host = fakes.fake_host()
    assert fakes.multiplier(w, host) == 1.0
    with fakes.config("filter_scheduler", ram_weight_multiplier=-2.0):
        assert fakes.multiplier(w, host) == -2.0
        agg_host = fakes.fake_host(aggregates=[{"ram_weight_multiplier": "3.5"}])
        assert fakes.multiplier(w, agg_host) == 3.5
