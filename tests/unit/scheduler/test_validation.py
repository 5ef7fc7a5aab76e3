"""One set of field checks for every way a value comes in: the same mistake gets
the same reason from a request spec, a fleet file and a host report."""
from __future__ import annotations

import pytest

from scheduler import exception, fleet, validation
from scheduler.request_spec import RequestSpec
from tests.unit.hardening import inproc

HOST = {"host": "c1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10}
FLAVOR = {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}


def _request(**flavor) -> exception.InvalidRequest:
    with pytest.raises(exception.InvalidRequest) as caught:
        RequestSpec.from_primitive({"flavor": dict(FLAVOR, **flavor)})
    return caught.value


def _fleet_host(**fields) -> exception.InvalidRequest:
    with pytest.raises(fleet.InvalidFleet) as caught:
        fleet.load_fleet({"hosts": [dict(HOST, **fields)]}, defaults={
            "cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0,
            "disk_allocation_ratio": 1.0})
    return caught.value


@pytest.mark.parametrize("value, reason", [
    ("x", "expected an integer > 0, got 'x'"),
    (True, "expected an integer > 0, got true"),
    (None, "expected an integer > 0, got null"),
    (0, "expected an integer > 0, got 0"),
    (1.5, "expected an integer > 0, got 1.5"),
])
def test_a_bad_vcpus_reads_the_same_in_a_request_and_a_fleet_file(value, reason):
    request, fleet_file = _request(vcpus=value), _fleet_host(vcpus=value)
    assert (request.field, request.reason) == ("flavor.vcpus", reason)
    assert (fleet_file.field, fleet_file.reason) == ("hosts[0].vcpus", reason)


def test_a_bad_value_reads_the_same_in_a_host_report(sqlite_db):
    manager = inproc.manager(sqlite_db)
    with pytest.raises(exception.InvalidRequest) as caught:
        manager.report_compute_node(dict(HOST, vcpus="x"))
    assert caught.value.field == "node.vcpus"
    assert caught.value.reason == _fleet_host(vcpus="x").reason


def test_an_unknown_key_names_the_closest_known_one_everywhere():
    with pytest.raises(exception.InvalidRequest) as caught:
        RequestSpec.from_primitive({"flavour": FLAVOR, "flavor": FLAVOR})
    assert caught.value.field == "flavour"
    assert caught.value.reason == "unknown key (did you mean flavor?)"
    assert _request(vcpu=1).reason == "unknown key (did you mean vcpus?)"
    assert _fleet_host(vcpu=1).reason == "unknown key (did you mean vcpus?)"


def test_an_empty_key_is_named_by_its_repr_everywhere():
    """A field never reads ``hosts[0].`` (nothing after the dot)."""
    assert _fleet_host(**{"": 1}).field == "hosts[0].''"
    assert _request(**{"": 1}).field == "flavor.''"


@pytest.mark.parametrize("value, shown", [
    (None, "null"), (False, "false"), ("a", "'a'"), (3, "3"), ([1], "[1]"),
    ("x" * 100, "'" + "x" * 56 + "..."),
])
def test_values_are_quoted_as_json_would_write_them_and_cut(value, shown):
    assert validation.show(value) == shown


def test_uuids_come_back_canonical_and_distinct():
    upper = "11111111-1111-1111-1111-11111111111A"
    assert validation.uuids([upper], "u") == [upper.lower()]
    with pytest.raises(exception.InvalidRequest) as caught:
        validation.uuids([upper, upper.lower()], "u")
    assert (caught.value.field, caught.value.reason) == ("u", "duplicate UUIDs")
    assert validation.uuids([upper, upper], "u", distinct=False) == [upper.lower()] * 2


def test_aggregate_metadata_takes_numbers_as_text_and_none_only_as_a_deletion():
    assert validation.metadata({"ssd": True, "n": 2, "gone": None}, "metadata",
                               deletions=True) == {"ssd": "true", "n": "2", "gone": None}
    with pytest.raises(exception.InvalidRequest) as caught:
        validation.metadata({"gone": None}, "metadata")
    assert caught.value.field == "metadata.gone"
    with pytest.raises(exception.InvalidRequest) as caught:
        validation.metadata({"cpu_allocation_ratio": "fast"}, "metadata")
    assert caught.value.field == "metadata.cpu_allocation_ratio"
