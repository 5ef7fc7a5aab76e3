import pytest
from oslo_config import cfg

from scheduler.filters.ram import RamFilter
from tests.unit.scheduler import fakes


@pytest.mark.parametrize("used,ratio,reserved,request_mb,ok", [
    (0, 1.0, 0, 16384, True),            # exactly full
    (0, 1.0, 0, 16385, False),
    (8192, 1.0, 0, 8192, True),
    (8192, 1.0, 0, 8193, False),
    (16384, 1.5, 0, 8192, True),          # overcommit: limit 24576
    (16384, 1.5, 0, 8193, False),
    (0, 1.0, 1024, 15360, True),          # reserved comes off the total
    (0, 1.0, 1024, 15361, False),
    (15360, 2.0, 1024, 15360, True),      # (16384 - 1024) * 2
    (15360, 2.0, 1024, 15361, False),
    (0, 2.0, 0, 16385, False),            # one instance: never more than the host has
])
def test_ram_limit(used, ratio, reserved, request_mb, ok):
    host = fakes.fake_host(memory_mb_used=used, ram_allocation_ratio=ratio,
                           reserved_host_memory_mb=reserved)
    reason = fakes.passes(RamFilter(cfg.CONF), host, fakes.fake_spec(memory_mb=request_mb),
                                             fakes.ctx())
    assert (reason is None) is ok
    spec = fakes.fake_spec(memory_mb=request_mb)
    assert fakes.filter_vector(RamFilter(cfg.CONF), [host], spec) == [ok]


def test_reason_text_names_the_request():
    host = fakes.fake_host(memory_mb=4096)
    reason = fakes.passes(RamFilter(cfg.CONF), host, fakes.fake_spec(memory_mb=8192), fakes.ctx())
    assert reason == "insufficient RAM: need 8192 MB"


def test_not_once_per_request():
    assert not RamFilter.run_filter_once_per_request
