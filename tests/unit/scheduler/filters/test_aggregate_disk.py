from oslo_config import cfg

from scheduler.filters.aggregate_disk import AggregateDiskFilter
from scheduler.filters.disk import DiskFilter
from tests.unit.scheduler import fakes


def test_aggregate_ratio():
    host = fakes.fake_host(local_gb=100, disk_mb_used=102400, disk_allocation_ratio=1.0,
                           aggregates=[{"disk_allocation_ratio": "1.5"}])
    filt = AggregateDiskFilter(cfg.CONF)
    assert fakes.passes(filt, host, fakes.fake_spec(root_gb=50), fakes.ctx()) is None
    assert fakes.passes(filt, host, fakes.fake_spec(root_gb=51), fakes.ctx()) == \
        "insufficient disk: need 51 GB"
    assert fakes.passes(DiskFilter(cfg.CONF), host, fakes.fake_spec(root_gb=50),
                                            fakes.ctx()) is not None


def test_aggregate_still_caps_one_instance_at_physical_disk():
    host = fakes.fake_host(local_gb=100, aggregates=[{"disk_allocation_ratio": "10"}])
    reason = fakes.passes(AggregateDiskFilter(cfg.CONF), host, fakes.fake_spec(root_gb=101),
                                                       fakes.ctx())
    assert reason == "insufficient disk: need 101 GB"


def test_vector_form_per_host_ratio():
    hosts = [fakes.fake_host(local_gb=100, disk_mb_used=102400,
                             aggregates=[{"disk_allocation_ratio": "1.5"}]),
             fakes.fake_host(local_gb=100, aggregates=[{"disk_allocation_ratio": "10"}]),
             fakes.fake_host(local_gb=100, reserved_host_disk_mb=1024)]
    flt = AggregateDiskFilter(cfg.CONF)
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(root_gb=50)) == [True] * 3
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(root_gb=99)) == \
        [False, True, True]
    assert fakes.filter_vector(flt, hosts, fakes.fake_spec(root_gb=100)) == \
        [False, True, False]
