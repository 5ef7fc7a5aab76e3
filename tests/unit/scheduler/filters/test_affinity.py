from oslo_config import cfg

from scheduler.filters.affinity import DifferentHostFilter, SameHostFilter
from tests.unit.scheduler import fakes

U1 = "11111111-1111-1111-1111-111111111111"
U2 = "22222222-2222-2222-2222-222222222222"
U3 = "33333333-3333-3333-3333-333333333333"


def _spec(**hints):
    return fakes.fake_spec(scheduler_hints=hints)


def test_same_host_without_hint_passes():
    assert fakes.passes(SameHostFilter(cfg.CONF), fakes.fake_host(), _spec(), fakes.ctx()) is None


def test_same_host_passes_where_any_hinted_instance_runs():
    host = fakes.fake_host(instances={U1: None})
    filt = SameHostFilter(cfg.CONF)
    assert fakes.passes(filt, host, _spec(same_host=[U2, U1]), fakes.ctx()) is None


def test_same_host_fails_elsewhere():
    host = fakes.fake_host(instances={U3: None})
    reason = fakes.passes(SameHostFilter(cfg.CONF), host, _spec(same_host=[U1]), fakes.ctx())
    assert reason == "not on the same host as the same_host instances"


def test_different_host_without_hint_passes():
    host = fakes.fake_host(instances={U1: None})
    assert fakes.passes(DifferentHostFilter(cfg.CONF), host, _spec(), fakes.ctx()) is None


def test_different_host_passes_hosts_without_them():
    host = fakes.fake_host(instances={U3: None})
    filt = DifferentHostFilter(cfg.CONF)
    assert fakes.passes(filt, host, _spec(different_host=[U1, U2]), fakes.ctx()) is None


def test_different_host_fails_where_any_runs():
    host = fakes.fake_host(instances={U2: None, U3: None})
    reason = fakes.passes(DifferentHostFilter(cfg.CONF), host, _spec(different_host=[U1, U2]),
                                                       fakes.ctx())
    assert reason == "runs one of the different_host instances"


def test_once_per_request():
    assert SameHostFilter.run_filter_once_per_request
    assert DifferentHostFilter.run_filter_once_per_request
