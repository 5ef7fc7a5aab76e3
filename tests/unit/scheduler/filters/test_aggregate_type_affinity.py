import pytest
from oslo_config import cfg

from scheduler import testing
from scheduler.filters.aggregate_type_affinity import AggregateTypeAffinityFilter
from tests.unit.scheduler import fakes


def _passes(host, name):
    spec = fakes.fake_spec(name=name) if name else fakes.fake_spec()
    return fakes.passes(AggregateTypeAffinityFilter(cfg.CONF), host, spec)


def _host(*metadata):
    return fakes.fake_host(aggregates=list(metadata))


def test_hosts_without_instance_type_take_every_flavor():
    assert _passes(_host(), "m1.small") is None
    assert _passes(_host({"ssd": "true"}), None) is None


@pytest.mark.parametrize("metadata,name,reason", [
    ({"instance_type": "m1.small"}, "m1.small", None),
    ({"instance_type": "m1.small, m1.large"}, "m1.large", None),
    ({"instance_type": "m1.small"}, "m1.large",
     "host is reserved for other flavors than m1.large"),
    ({"instance_type": "m1.small"}, None,
     "host is reserved for other flavors: the flavor has no name"),
    ({"instance_type": "m1.small,m1.large"}, "m1", "host is reserved for other flavors than m1"),
])
def test_reserved_hosts(metadata, name, reason):
    assert _passes(_host(metadata), name) == reason


def test_any_aggregate_may_name_the_flavor():
    host = _host({"instance_type": "m1.small"}, {"instance_type": "m1.xlarge"})
    assert _passes(host, "m1.xlarge") is None
    assert _passes(host, "m1.tiny") is not None


def test_conformance_on_many_hosts():
    hosts = [_host(), _host({"instance_type": "a"}), _host({"instance_type": "a"}),
             _host({"instance_type": "b, c"})]
    flt = AggregateTypeAffinityFilter(cfg.CONF)
    requests = [testing.request(fakes.fake_spec(name=n)) for n in ("a", "c", "z")]
    requests.append(testing.request(fakes.fake_spec()))
    testing.check_filter(flt, hosts, requests)
    assert [a is None for a in testing.answers(flt, hosts, requests[1])] == \
        [True, False, False, True]
