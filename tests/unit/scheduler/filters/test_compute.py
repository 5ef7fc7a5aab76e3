import datetime

from oslo_config import cfg

from scheduler.filters.compute import ComputeFilter
from tests.unit.scheduler import fakes


def _passes(host, now=fakes.NOW):
    return ComputeFilter(cfg.CONF).host_passes(host, fakes.fake_spec(), fakes.ctx(now=now))


def test_enabled_host_with_fresh_heartbeat_passes():
    assert _passes(fakes.fake_host()) is None


def test_disabled_host_fails():
    assert _passes(fakes.fake_host(disabled=True, disabled_reason="maintenance")) == "disabled"


def test_heartbeat_at_the_limit_passes():
    host = fakes.fake_host(last_heartbeat=fakes.NOW - datetime.timedelta(seconds=60))
    assert _passes(host) is None


def test_stale_heartbeat_is_service_down():
    host = fakes.fake_host(last_heartbeat=fakes.NOW - datetime.timedelta(seconds=61))
    assert _passes(host) == "service down"


def test_no_heartbeat_counts_as_up():
    # A statically managed host (imported from a fleet file) never heartbeats.
    assert _passes(fakes.fake_host(last_heartbeat=None)) is None


def test_service_down_time_option():
    host = fakes.fake_host(last_heartbeat=fakes.NOW - datetime.timedelta(seconds=100))
    with fakes.config(service_down_time=120):
        assert _passes(host) is None
    assert _passes(host) == "service down"


def test_same_ctx_reads_the_option_once():
    filt = ComputeFilter(cfg.CONF)
    ctx = fakes.ctx()
    host = fakes.fake_host(last_heartbeat=fakes.NOW - datetime.timedelta(seconds=30))
    assert filt.host_passes(host, fakes.fake_spec(), ctx) is None
    with fakes.config(service_down_time=10):
        # Still the same request: the cutoff was fixed when it started.
        assert filt.host_passes(host, fakes.fake_spec(), ctx) is None
        assert filt.host_passes(host, fakes.fake_spec(), fakes.ctx()) == "service down"


def test_vector_heartbeat_cutoff_is_exact():
    cutoff = fakes.NOW - datetime.timedelta(seconds=60)
    hosts = [fakes.fake_host(last_heartbeat=cutoff),
             fakes.fake_host(last_heartbeat=cutoff - datetime.timedelta(microseconds=1)),
             fakes.fake_host(last_heartbeat=cutoff + datetime.timedelta(microseconds=1)),
             fakes.fake_host(last_heartbeat=None),
             fakes.fake_host(last_heartbeat=None, disabled=True),
             fakes.fake_host(disabled=True)]
    assert fakes.filter_vector(ComputeFilter(cfg.CONF), hosts, fakes.fake_spec()) == \
        [True, False, True, True, False, False]
