"""Aggregates and availability zones: one zone per host, every change bumps updated_at."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from db import aggregates as db_aggregates
from db import hosts as db_hosts
from db import models
from scheduler import exception, fleet

DEFAULTS = {"cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
            "disk_allocation_ratio": 1.0}


@pytest.fixture
def db(sqlite_db):
    hosts = [{"host": f"compute-00{i}", "vcpus": 8, "memory_mb": 8192, "local_gb": 100}
             for i in (1, 2, 3)]
    db_hosts.import_fleet(sqlite_db, fleet.load_fleet({"hosts": hosts}, DEFAULTS))
    return sqlite_db


def updated_at(db, name: str):
    with db.reader() as s:
        return s.scalar(sa.select(models.Aggregate.updated_at).where(
            models.Aggregate.name == name, models.Aggregate.deleted == 0))


def test_create_get_list(db):
    agg = db_aggregates.create_aggregate(db, "fast", availability_zone="az1",
                                         metadata={"ssd": True}, hosts=["compute-001"])
    assert agg["availability_zone"] == "az1"
    assert agg["metadata"] == {"availability_zone": "az1", "ssd": "true"}
    assert agg["hosts"] == ["compute-001"]
    db_aggregates.create_aggregate(db, "empty")
    assert [a["name"] for a in db_aggregates.list_aggregates(db)] == ["empty", "fast"]
    assert db_aggregates.get_aggregate(db, "fast") == agg


def test_create_duplicate_and_bad_names(db):
    db_aggregates.create_aggregate(db, "fast")
    with pytest.raises(exception.Conflict, match="already exists"):
        db_aggregates.create_aggregate(db, "fast")
    with pytest.raises(exception.InvalidRequest, match="name"):
        db_aggregates.create_aggregate(db, "")
    with pytest.raises(exception.NotFound, match="Host compute-404 not found"):
        db_aggregates.create_aggregate(db, "other", hosts=["compute-404"])
    assert [a["name"] for a in db_aggregates.list_aggregates(db)] == ["fast"]


def test_every_change_bumps_updated_at(db):
    db_aggregates.create_aggregate(db, "agg")
    steps = [
        lambda: db_aggregates.add_host(db, "agg", "compute-001"),
        lambda: db_aggregates.set_metadata(db, "agg", {"k": "v"}),
        lambda: db_aggregates.set_metadata(db, "agg", {"k": None}),
        lambda: db_aggregates.update_aggregate(db, "agg", availability_zone="az1"),
        lambda: db_aggregates.remove_host(db, "agg", "compute-001"),
    ]
    last = updated_at(db, "agg")
    for step in steps:
        step()
        now = updated_at(db, "agg")
        assert now > last
        last = now


def test_set_metadata_merges_and_none_deletes(db):
    db_aggregates.create_aggregate(db, "agg", metadata={"a": "1", "b": "2"})
    agg = db_aggregates.set_metadata(db, "agg", {"a": None, "c": 3})
    assert agg["metadata"] == {"b": "2", "c": "3"}


def test_host_in_one_zone_only(db):
    db_aggregates.create_aggregate(db, "az1", availability_zone="az1", hosts=["compute-001"])
    db_aggregates.create_aggregate(db, "az2", availability_zone="az2")
    with pytest.raises(exception.Conflict, match="compute-001 would be in more than one"):
        db_aggregates.add_host(db, "az2", "compute-001")
    # A second aggregate of the same zone, or one without a zone, is fine.
    db_aggregates.create_aggregate(db, "az1-ssd", availability_zone="az1",
                                   hosts=["compute-001"])
    db_aggregates.create_aggregate(db, "ssd", hosts=["compute-001"])
    with pytest.raises(exception.Conflict):
        db_aggregates.set_metadata(db, "ssd", {"availability_zone": "az2"})
    with pytest.raises(exception.Conflict):
        db_aggregates.update_aggregate(db, "az1-ssd", availability_zone="az3")
    assert db_aggregates.get_aggregate(db, "ssd")["availability_zone"] is None
    assert db_aggregates.get_aggregate(db, "az2")["hosts"] == []


def test_add_remove_host_errors(db):
    db_aggregates.create_aggregate(db, "agg", hosts=["compute-001"])
    with pytest.raises(exception.Conflict, match="already in aggregate"):
        db_aggregates.add_host(db, "agg", "compute-001")
    with pytest.raises(exception.NotFound):
        db_aggregates.add_host(db, "agg", "compute-404")
    with pytest.raises(exception.NotFound):
        db_aggregates.remove_host(db, "agg", "compute-002")
    with pytest.raises(exception.NotFound, match="Aggregate nope not found"):
        db_aggregates.add_host(db, "nope", "compute-001")


def test_rename_and_clear_zone(db):
    db_aggregates.create_aggregate(db, "old", availability_zone="az1")
    db_aggregates.create_aggregate(db, "taken")
    with pytest.raises(exception.Conflict):
        db_aggregates.update_aggregate(db, "old", new_name="taken")
    agg = db_aggregates.update_aggregate(db, "old", new_name="new", availability_zone=None)
    assert agg["name"] == "new" and agg["availability_zone"] is None
    with pytest.raises(exception.NotFound):
        db_aggregates.get_aggregate(db, "old")


def test_delete_refused_while_hosts_then_soft_deleted(db):
    db_aggregates.create_aggregate(db, "agg", metadata={"k": "v"}, hosts=["compute-001"])
    with pytest.raises(exception.Conflict, match="still has hosts"):
        db_aggregates.delete_aggregate(db, "agg")
    db_aggregates.remove_host(db, "agg", "compute-001")
    before = updated_at(db, "agg")
    db_aggregates.delete_aggregate(db, "agg")
    with db.reader() as s:
        row = s.scalars(sa.select(models.Aggregate).where(models.Aggregate.name == "agg")).one()
        assert row.deleted == row.id and row.updated_at > before
    assert db_aggregates.list_aggregates(db) == []
    # The name is free again.
    db_aggregates.create_aggregate(db, "agg")


# -- membership in one call ---------------------------------------------------------------

def members(db, name: str) -> list[str]:
    return db_aggregates.get_aggregate(db, name)["hosts"]


def test_several_hosts_added_and_removed_in_one_call(db):
    db_aggregates.create_aggregate(db, "agg")
    stamp = updated_at(db, "agg")
    agg = db_aggregates.add_hosts(db, "agg", ["compute-003", "compute-001"])
    assert agg["hosts"] == ["compute-001", "compute-003"] and updated_at(db, "agg") > stamp
    agg = db_aggregates.remove_hosts(db, "agg", ["compute-001", "compute-003"])
    assert agg["hosts"] == []


@pytest.mark.parametrize("hosts, error, field_or_name", [
    (["compute-001", "compute-404", "compute-405"], exception.NotFound, "compute-404"),
    (["compute-002", "compute-001"], exception.Conflict, "compute-001"),
    (["compute-002", "compute-002"], exception.InvalidRequest, "hosts[1]"),
    (["compute-002", "bad\nname"], exception.InvalidRequest, "hosts[1]"),
    ([], exception.InvalidRequest, "hosts"),
])
def test_one_bad_host_adds_none(db, hosts, error, field_or_name):
    """The error names the host (or the list position); nothing is written."""
    db_aggregates.create_aggregate(db, "agg", hosts=["compute-001"])
    stamp = updated_at(db, "agg")
    with pytest.raises(error) as caught:
        db_aggregates.add_hosts(db, "agg", hosts)
    if error is exception.InvalidRequest:
        assert caught.value.field == field_or_name
    elif error is exception.NotFound:
        assert caught.value.name == field_or_name
        assert caught.value.message == ("Host compute-404 not found (2 unknown hosts: "
                                        "compute-404, compute-405).")
    else:
        assert field_or_name in caught.value.message
    assert members(db, "agg") == ["compute-001"] and updated_at(db, "agg") == stamp


def test_one_host_that_is_no_member_removes_none(db):
    db_aggregates.create_aggregate(db, "agg", hosts=["compute-001", "compute-002"])
    with pytest.raises(exception.NotFound) as caught:
        db_aggregates.remove_hosts(db, "agg", ["compute-001", "compute-003"])
    assert caught.value.name == "compute-003"
    assert "compute-003 is not in aggregate agg" in caught.value.message
    assert members(db, "agg") == ["compute-001", "compute-002"]


def test_a_second_zone_for_one_host_adds_none(db):
    db_aggregates.create_aggregate(db, "az1", availability_zone="az1", hosts=["compute-002"])
    db_aggregates.create_aggregate(db, "az2", availability_zone="az2")
    with pytest.raises(exception.Conflict, match="compute-002 would be in more than one"):
        db_aggregates.add_hosts(db, "az2", ["compute-001", "compute-002", "compute-003"])
    assert members(db, "az2") == []
