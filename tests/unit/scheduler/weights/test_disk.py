from oslo_config import cfg

from scheduler.weights.disk import DiskWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_free_disk():
    host = fakes.fake_host(local_gb=100, disk_mb_used=20480, reserved_host_disk_mb=1024)
    assert fakes.weigh(DiskWeigher(cfg.CONF), host, fakes.fake_spec(), fakes.ctx()) == 80896


def test_multiplier_default_config_and_aggregate():
    w = DiskWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == 1.0
    with fakes.config("filter_scheduler", disk_weight_multiplier=5.0):
        assert fakes.multiplier(w, fakes.fake_host()) == 5.0
    host = fakes.fake_host(aggregates=[{"disk_weight_multiplier": "-1"}])
    assert fakes.multiplier(w, host) == -1.0
