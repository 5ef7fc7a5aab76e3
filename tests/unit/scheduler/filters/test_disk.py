import pytest
from oslo_config import cfg

from scheduler.filters.disk import DiskFilter
from tests.unit.scheduler import fakes


@pytest.mark.parametrize("used_mb,ratio,reserved_mb,root_gb,ok", [
    (0, 1.0, 0, 100, True),
    (1, 1.0, 0, 100, False),
    (102400, 2.0, 0, 100, True),       # overcommit for the second instance
    (102400, 2.0, 0, 101, False),      # never more than the physical disk for one
    (0, 1.0, 10240, 90, True),
    (0, 1.0, 10240, 91, False),
])
def test_disk_limit(used_mb, ratio, reserved_mb, root_gb, ok):
    host = fakes.fake_host(local_gb=100, disk_mb_used=used_mb, disk_allocation_ratio=ratio,
                           reserved_host_disk_mb=reserved_mb)
    reason = fakes.passes(DiskFilter(cfg.CONF), host, fakes.fake_spec(root_gb=root_gb),
                                              fakes.ctx())
    assert (reason is None) is ok
    spec = fakes.fake_spec(root_gb=root_gb)
    assert fakes.filter_vector(DiskFilter(cfg.CONF), [host], spec) == [ok]


def test_counts_ephemeral_and_swap():
    host = fakes.fake_host(local_gb=10)
    spec = fakes.fake_spec(root_gb=5, ephemeral_gb=4, swap=1024)
    assert fakes.passes(DiskFilter(cfg.CONF), host, spec, fakes.ctx()) is None
    # swap is counted in whole GB, rounded up (as Nova asks DISK_GB)
    spec = fakes.fake_spec(root_gb=5, ephemeral_gb=4, swap=1025)
    assert fakes.passes(DiskFilter(cfg.CONF), host, spec, fakes.ctx()) == \
        "insufficient disk: need 11 GB"


def test_reason_text():
    host = fakes.fake_host(local_gb=10)
    reason = fakes.passes(DiskFilter(cfg.CONF), host, fakes.fake_spec(root_gb=20), fakes.ctx())
    assert reason == "insufficient disk: need 20 GB"
