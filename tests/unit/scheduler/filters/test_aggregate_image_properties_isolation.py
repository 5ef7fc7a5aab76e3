import pytest
from oslo_config import cfg

from scheduler import testing
from scheduler.filters.aggregate_image_properties_isolation import (
    AggregateImagePropertiesIsolation,
)
from tests.unit.scheduler import fakes


def _flt():
    return AggregateImagePropertiesIsolation(cfg.CONF)


def _spec(**props):
    return fakes.fake_spec(image={"properties": props})


def _host(*metadata):
    return fakes.fake_host(aggregates=list(metadata))


def test_image_without_properties_skips():
    assert fakes.skips(_flt(), fakes.fake_spec())


def test_host_without_aggregates_passes():
    assert fakes.passes(_flt(), _host(), _spec(os_distro="windows")) is None


@pytest.mark.parametrize("metadata,props,reason", [
    ({"os_distro": "ubuntu"}, {"os_distro": "ubuntu"}, None),
    ({"os_distro": "ubuntu, debian"}, {"os_distro": "debian"}, None),          # comma list
    ({"os_distro": "ubuntu"}, {"hw_machine_type": "q35"}, None),               # key not set
    ({"ssd": "true"}, {"os_distro": "windows"}, None),                         # not compared
    ({"os_distro": "ubuntu"}, {"os_distro": "windows"},
     "image property os_distro=windows not allowed by the host's aggregates"),
])
def test_values(metadata, props, reason):
    assert fakes.passes(_flt(), _host(metadata), _spec(**props)) == reason


def test_several_aggregates_add_their_values():
    host = _host({"os_distro": "ubuntu"}, {"os_distro": "debian"})
    assert fakes.passes(_flt(), host, _spec(os_distro="debian")) is None
    assert fakes.passes(_flt(), host, _spec(os_distro="fedora")) is not None


def test_namespace_and_separator():
    host = _host({"iso.os_distro": "ubuntu", "os_type": "linux"})
    with fakes.config("filter_scheduler",
                      aggregate_image_properties_isolation_namespace="iso"):
        # Only keys in the namespace are compared: os_type is not.
        assert fakes.passes(_flt(), host, _spec(os_type="windows")) is None
        assert fakes.passes(_flt(), host, _spec(**{"iso.os_distro": "windows"})) == \
            "image property iso.os_distro=windows not allowed by the host's aggregates"
    with fakes.config("filter_scheduler",
                      aggregate_image_properties_isolation_namespace="iso",
                      aggregate_image_properties_isolation_separator="_"):
        assert fakes.passes(_flt(), host, _spec(**{"iso.os_distro": "windows"})) is None
    # Without a namespace every key is compared.
    assert fakes.passes(_flt(), host, _spec(os_type="windows")) is not None


def test_conformance_on_many_hosts():
    hosts = [_host(), _host({"os_distro": "ubuntu"}), _host({"os_distro": "ubuntu"}),
             _host({"os_distro": "debian,ubuntu"}, {"ssd": "true"}),
             _host({"os_type": "linux"})]
    requests = [testing.request(_spec(**p)) for p in (
        {"os_distro": "ubuntu"}, {"os_distro": "debian"}, {"os_type": "windows"},
        {"os_distro": "debian", "os_type": "linux"}, {})]
    testing.check_filter(_flt(), hosts, requests)
    got = testing.answers(_flt(), hosts, requests[1])
    assert [a is None for a in got] == [True, False, False, True, True]


def test_once_per_request():
    assert AggregateImagePropertiesIsolation.run_filter_once_per_request
