import pytest
from oslo_config import cfg

from scheduler import testing
from scheduler.filters.aggregate_multitenancy_isolation import AggregateMultiTenancyIsolation
from tests.unit.scheduler import fakes


def _passes(host, project):
    spec = fakes.fake_spec(project_id=project) if project else fakes.fake_spec()
    return fakes.passes(AggregateMultiTenancyIsolation(cfg.CONF), host, spec)


def _host(*metadata):
    return fakes.fake_host(aggregates=list(metadata))


def test_unreserved_hosts_take_every_project():
    assert _passes(_host(), "p1") is None
    assert _passes(_host({"ssd": "true"}), None) is None


@pytest.mark.parametrize("metadata,project,reason", [
    ({"filter_tenant_id": "p1"}, "p1", None),
    ({"filter_tenant_id": "p1, p2"}, "p2", None),
    ({"filter_tenant_id": "p1", "filter_tenant_id_2": "p3"}, "p3", None),
    ({"filter_tenant_id": "p1"}, "p2", "host is reserved for other projects than p2"),
    ({"filter_tenant_id": "p1"}, None,
     "host is reserved for other projects: no project_id given"),
    ({"filter_tenant_id": " , "}, "p2", None),            # empty values are ignored
])
def test_reserved_hosts(metadata, project, reason):
    assert _passes(_host(metadata), project) == reason


def test_several_aggregates_add_their_projects():
    host = _host({"filter_tenant_id": "p1"}, {"filter_tenant_id_x": "p2"})
    assert _passes(host, "p2") is None
    assert _passes(host, "p9") == "host is reserved for other projects than p9"


def test_conformance_on_many_hosts():
    hosts = [_host(), _host({"filter_tenant_id": "p1"}), _host({"filter_tenant_id": "p1"}),
             _host({"filter_tenant_id": "p2,p3"}, {"ssd": "1"})]
    flt = AggregateMultiTenancyIsolation(cfg.CONF)
    requests = [testing.request(fakes.fake_spec(project_id=p)) for p in ("p1", "p2", "p4")]
    requests.append(testing.request(fakes.fake_spec()))
    testing.check_filter(flt, hosts, requests)
    assert testing.answers(flt, hosts, requests[0]) == [
        None, None, None, "host is reserved for other projects than p1"]
