import datetime

from oslo_config import cfg

from scheduler.filters.compute import ComputeFilter
from scheduler.host_columns import HostColumns
from tests.unit.scheduler import fakes


def _passes(host, now=fakes.NOW):
    return fakes.passes(ComputeFilter(cfg.CONF), host, fakes.fake_spec(), fakes.ctx(now=now))


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


def test_the_cutoff_is_fixed_when_the_request_starts():
    filt = ComputeFilter(cfg.CONF)
    host = fakes.fake_host(last_heartbeat=fakes.NOW - datetime.timedelta(seconds=30))
    cutoff = filt.prepare(fakes.ctx().request(fakes.fake_spec()))
    with fakes.config(service_down_time=10):
        # The request that started before the change keeps its cutoff...
        refused = dict((r, m.tolist()) for r, m in filt.refusals(HostColumns([host]), cutoff))
        assert refused["service down"] == [False]
        # ...a new one reads the option again.
        assert fakes.passes(filt, host, fakes.fake_spec(), fakes.ctx()) == "service down"
    assert vars(filt) == {"conf": cfg.CONF}     # nothing per request on the filter


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
