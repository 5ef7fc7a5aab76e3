from oslo_config import cfg

from scheduler.filters.availability_zone import AvailabilityZoneFilter
from tests.unit.scheduler import fakes


def _passes(host, zone):
    return fakes.passes(AvailabilityZoneFilter(cfg.CONF),
        host, fakes.fake_spec(availability_zone=zone), fakes.ctx())


def test_no_zone_requested_passes():
    assert _passes(fakes.fake_host(aggregates=[{"availability_zone": "az1"}]), None) is None


def test_host_in_zone_passes():
    assert _passes(fakes.fake_host(aggregates=[{"availability_zone": "az1"}]), "az1") is None


def test_host_in_other_zone_fails_with_reason():
    host = fakes.fake_host(aggregates=[{"availability_zone": "az1"}])
    assert _passes(host, "az2") == "not in az2"


def test_default_zone_for_hosts_without_zoned_aggregate():
    host = fakes.fake_host(aggregates=[{"ssd": "true"}], default_az="nova")
    assert _passes(host, "nova") is None
    assert _passes(host, "az1") == "not in az1"


def test_any_of_several_zoned_aggregates():
    host = fakes.fake_host(aggregates=[{"availability_zone": "az1"},
                                       {"availability_zone": "az2, az3"}])
    assert _passes(host, "az2") is None
    assert _passes(host, "az3") is None
    assert _passes(host, "nova") == "not in nova"


def test_once_per_request():
    assert AvailabilityZoneFilter.run_filter_once_per_request


def test_vector_form():
    hosts = [fakes.fake_host(aggregates=[{"availability_zone": "az1"}]),
             fakes.fake_host(aggregates=[{"availability_zone": "az1"},
                                         {"availability_zone": "az2, az3"}]),
             fakes.fake_host(aggregates=[{"availability_zone": " az2"}]),
             fakes.fake_host(aggregates=[{"ssd": "true"}], default_az="nova"),
             fakes.fake_host()]
    flt = AvailabilityZoneFilter(cfg.CONF)
    for zone, want in [("az1", [True, True, False, False, False]),
                       ("az2", [False, True, True, False, False]),
                       ("az3", [False, True, False, False, False]),
                       ("nova", [False, False, False, True, True]),
                       ("elsewhere", [False] * 5)]:
        spec = fakes.fake_spec(availability_zone=zone)
        assert not fakes.skips(flt, spec)
        assert fakes.filter_vector(flt, hosts, spec) == want, zone
    assert fakes.skips(flt, fakes.fake_spec())
