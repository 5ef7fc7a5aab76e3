from oslo_config import cfg

from db import hosts as db_hosts
from scheduler import exception, testing
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler, load_filters
from scheduler.filters.retry import RetryFilter
from scheduler.host_manager import HostManager
from tests.unit.scheduler import fakes


def test_passes_every_request():
    flt = RetryFilter(cfg.CONF)
    spec = fakes.fake_spec(ignore_hosts=["host1"])
    assert fakes.skips(flt, spec)
    testing.check_filter(flt, [fakes.fake_host("host1"), fakes.fake_host("host2")],
                         [testing.request(spec)])


def test_reschedules_never_return_to_a_failed_host(sqlite_db):
    """Nova's RetryFilter rule, with RetryFilter in the list: every failed host stays out."""
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": [
        {"host": h, "vcpus": 8, "memory_mb": m, "local_gb": 50}
        for h, m in (("a", 16384), ("b", 8192))]}))
    s = FilterScheduler(HostManager(sqlite_db, cfg.CONF), cfg.CONF,
                        filters=load_filters(["RetryFilter", "RamFilter"], cfg.CONF),
                        weighers=[])
    spec = s.parse_request({"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}})
    first = s.select_destinations(spec)[0][0]
    again = s.reschedule(first.instance_uuid, first.host)[0]
    assert again.host != first.host
    try:
        s.reschedule(first.instance_uuid, again.host)
    except exception.NoValidHost as e:
        assert "2 ignore_hosts (host is ignored)" in e.reason
    else:
        raise AssertionError("a third host appeared")
