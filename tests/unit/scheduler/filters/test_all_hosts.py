from oslo_config import cfg

from scheduler.filters.all_hosts import AllHostsFilter
from tests.unit.scheduler import fakes


def test_every_host_passes():
    filt = AllHostsFilter(cfg.CONF)
    hosts = [fakes.fake_host("h1", disabled=True), fakes.fake_host("h2", vcpus=0)]
    spec = fakes.fake_spec(vcpus=64)
    assert all(fakes.passes(filt, h, spec, fakes.ctx()) is None for h in hosts)
    assert fakes.skips(filt, spec)
    assert AllHostsFilter.run_filter_once_per_request
