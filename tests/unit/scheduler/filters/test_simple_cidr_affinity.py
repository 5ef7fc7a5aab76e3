import pytest
from oslo_config import cfg

from scheduler import exception, testing
from scheduler.filters.simple_cidr_affinity import SimpleCIDRAffinityFilter
from tests.unit.scheduler import fakes


def _spec(**hints):
    return fakes.fake_spec(scheduler_hints=hints)


def _passes(host_ip, **hints):
    return fakes.passes(SimpleCIDRAffinityFilter(cfg.CONF), fakes.fake_host(host_ip=host_ip),
                        _spec(**hints))


def test_no_hint_skips():
    assert fakes.skips(SimpleCIDRAffinityFilter(cfg.CONF), fakes.fake_spec())
    assert fakes.skips(SimpleCIDRAffinityFilter(cfg.CONF), _spec(cidr="/16"))


@pytest.mark.parametrize("host_ip,hints,reason", [
    ("10.0.0.7", {"build_near_host_ip": "10.0.0.200"}, None),            # default /24
    ("10.0.1.7", {"build_near_host_ip": "10.0.0.200"}, "host IP not in 10.0.0.0/24"),
    ("10.0.1.7", {"build_near_host_ip": "10.0.0.200", "cidr": "/23"}, None),
    ("10.0.0.7", {"build_near_host_ip": "10.0.0.7", "cidr": "/32"}, None),
    ("10.0.0.8", {"build_near_host_ip": "10.0.0.7", "cidr": "/32"}, "host IP not in 10.0.0.7/32"),
    (None, {"build_near_host_ip": "10.0.0.7"}, "host IP not in 10.0.0.0/24"),
    ("fd00::5", {"build_near_host_ip": "10.0.0.7"}, "host IP not in 10.0.0.0/24"),
    ("fd00::5", {"build_near_host_ip": "fd00::1", "cidr": "/64"}, None),
    ("10.0.0.5", {"build_near_host_ip": ["10.0.0.1"], "cidr": ["/24"]}, None),   # Nova's lists
])
def test_network(host_ip, hints, reason):
    assert _passes(host_ip, **hints) == reason


@pytest.mark.parametrize("hints,field", [
    ({"build_near_host_ip": "10.0.0"}, "scheduler_hints.build_near_host_ip"),
    ({"build_near_host_ip": 10}, "scheduler_hints.build_near_host_ip"),
    ({"build_near_host_ip": "10.0.0.1", "cidr": "24"}, "scheduler_hints.cidr"),
    ({"build_near_host_ip": "10.0.0.1", "cidr": "/33"}, "scheduler_hints.cidr"),
    ({"cidr": "/x"}, "scheduler_hints.cidr"),
])
def test_malformed_hints_are_invalid_requests(hints, field):
    with pytest.raises(exception.InvalidRequest) as err:
        _spec(**hints)
    assert err.value.field == field


def test_conformance_on_many_hosts():
    hosts = [fakes.fake_host(host_ip=ip) for ip in
             ("10.0.0.1", "10.0.0.1", "10.0.1.1", None, "bogus", "fd00::1")]
    flt = SimpleCIDRAffinityFilter(cfg.CONF)
    requests = [testing.request(_spec(build_near_host_ip="10.0.0.9", cidr=c))
                for c in ("/24", "/23", "/8", "/32")]
    testing.check_filter(flt, hosts, requests)
    assert [a is None for a in testing.answers(flt, hosts, requests[1])] == \
        [True, True, True, False, False, False]
    assert SimpleCIDRAffinityFilter.run_filter_once_per_request
