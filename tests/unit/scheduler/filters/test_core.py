import pytest
from oslo_config import cfg

from scheduler.filters.core import CoreFilter
from tests.unit.scheduler import fakes


@pytest.mark.parametrize("used,ratio,reserved,vcpus,ok", [
    (0, 1.0, 0, 8, True),
    (1, 1.0, 0, 8, False),
    (28, 4.0, 0, 4, True),       # limit 32
    (29, 4.0, 0, 4, False),
    (0, 1.0, 2, 6, True),        # reserved CPUs come off the total
    (1, 1.0, 2, 6, False),
    (0, 16.0, 0, 9, False),      # never more vCPUs than the host has for one guest
])
def test_vcpu_limit(used, ratio, reserved, vcpus, ok):
    host = fakes.fake_host(vcpus=8, vcpus_used=used, cpu_allocation_ratio=ratio,
                           reserved_host_cpus=reserved)
    reason = fakes.passes(CoreFilter(cfg.CONF), host, fakes.fake_spec(vcpus=vcpus), fakes.ctx())
    assert (reason is None) is ok
    assert fakes.filter_vector(CoreFilter(cfg.CONF), [host], fakes.fake_spec(vcpus=vcpus)) \
        == [ok]


def test_reason_text():
    host = fakes.fake_host(vcpus=2)
    reason = fakes.passes(CoreFilter(cfg.CONF), host, fakes.fake_spec(vcpus=4), fakes.ctx())
    assert reason == "insufficient vCPUs: need 4"
