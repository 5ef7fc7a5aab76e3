"""Fleet import in bulk: statements do not grow with hosts, aggregates are diffed
exactly, a failure anywhere writes nothing, progress is reported by phase."""
from __future__ import annotations

import contextlib
import io

import pytest
import sqlalchemy as sa

from db import aggregates as db_aggregates
from db import hosts as db_hosts
from db import models
from scheduler import exception, fleet
from scheduler.cmd import manage_host
from tests.unit.db.test_hosts import DEFAULTS, NUMA, PF, node_row, snapshot, vf


def big_fleet(n: int, pci_every: int = 3) -> dict:
    hosts = []
    for i in range(n):
        h = {"host": f"c{i:04d}", "vcpus": 8 + i % 4, "memory_mb": 65536, "local_gb": 500}
        if i % 2 == 0:
            h["numa_topology"] = {"cells": [dict(c) for c in NUMA["cells"]]}
        if i % pci_every == 0:
            h["pci_devices"] = [dict(PF), vf(0), vf(1)]
        hosts.append(h)
    names = [h["host"] for h in hosts]
    return {"hosts": hosts, "aggregates": [
        {"name": "az1", "availability_zone": "az1", "hosts": names[: n // 2]},
        {"name": "az2", "availability_zone": "az2", "hosts": names[n // 2:]},
        {"name": "all", "hosts": names, "metadata": {"pool": "general", "tier": "1"}}]}


def do_import(db, data, **kw) -> db_hosts.ImportResult:
    return db_hosts.import_fleet(db, fleet.load_fleet(data, DEFAULTS), **kw)


@contextlib.contextmanager
def counted_statements(db):
    """How many statements reach the driver (an executemany counts once)."""
    count = [0]

    def before(conn, cursor, statement, parameters, context, executemany):
        count[0] += 1
    engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", before)
    try:
        yield count
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)


def test_statement_count_does_not_grow_with_hosts(any_db, tmp_path):
    """The issue's fleet import made several round trips per host and per
    aggregate member; in bulk, 8 and 80 hosts take the same statements."""
    from db import migration
    from db.api import Database

    counts = []
    for n, db in ((8, any_db), (80, None)):
        if db is None:
            db = Database(f"sqlite:///{tmp_path}/other.sqlite") \
                if any_db.engine.dialect.name == "sqlite" else any_db
            if db is not any_db:
                migration.db_sync(db)
            else:       # the same MariaDB database: start from no hosts again
                data = big_fleet(8)
                for h in data["hosts"]:
                    db_hosts.delete_host(db, h["host"])
                for a in data["aggregates"]:
                    db_aggregates.update_aggregate(db, a["name"], new_name=f"old-{a['name']}")
        with counted_statements(db) as count:
            do_import(db, big_fleet(n))
        counts.append(count[0])
    assert counts[0] == counts[1], counts
    assert counts[0] < 40


def test_reimport_of_many_hosts_changes_only_what_changed(sqlite_db):
    data = big_fleet(30)
    do_import(sqlite_db, data)
    before = {h["host"]: node_row(sqlite_db, h["host"]) for h in data["hosts"]}
    data["hosts"][3]["vcpus"] = 64
    data["hosts"][6]["pci_devices"] = [dict(PF), vf(0)]       # one VF gone
    result = do_import(sqlite_db, data)
    assert sorted(result.updated) == ["c0003", "c0006"]
    assert len(result.unchanged) == 28 and not result.created
    assert set(result.pci) == {"c0006"} and result.pci["c0006"].remove == ("0000:81:02.1",)
    for name, old in before.items():
        new = node_row(sqlite_db, name)
        bumped = name in ("c0003", "c0006")
        assert (new.generation == old.generation + 1) is bumped, name
        assert (new.updated_at > old.updated_at) is bumped, name
    assert db_hosts.get_host(sqlite_db, "c0003")["resources"]["VCPU"]["total"] == 64


def test_aggregate_membership_and_metadata_diffed_in_bulk(sqlite_db):
    data = big_fleet(20)
    do_import(sqlite_db, data)
    stamp = db_aggregates.get_aggregate(sqlite_db, "az1")["updated_at"]
    names = [h["host"] for h in data["hosts"]]
    # Move two hosts from az2 to az1; drop one metadata key, change another, add one.
    data["aggregates"][0]["hosts"] = names[:12]
    data["aggregates"][1]["hosts"] = names[12:]
    data["aggregates"][2]["metadata"] = {"pool": "gpu", "new": "x"}
    result = do_import(sqlite_db, data)
    assert result.aggregates_updated == ["az1", "az2", "all"]
    az1 = db_aggregates.get_aggregate(sqlite_db, "az1")
    assert az1["hosts"] == names[:12] and az1["updated_at"] > stamp
    assert db_aggregates.get_aggregate(sqlite_db, "az2")["hosts"] == names[12:]
    assert db_aggregates.get_aggregate(sqlite_db, "all")["metadata"] == {
        "pool": "gpu", "new": "x"}
    assert db_hosts.get_host(sqlite_db, "c0011")["availability_zone"] == "az1"
    again = do_import(sqlite_db, data)
    assert again.aggregates_unchanged == ["az1", "az2", "all"]
    assert db_aggregates.get_aggregate(sqlite_db, "az1")["updated_at"] == az1["updated_at"]


def test_aggregate_zone_set_on_existing_aggregate_is_checked(sqlite_db):
    """A zone added to an existing aggregate conflicts with another zone of its hosts."""
    data = big_fleet(10)
    do_import(sqlite_db, data)
    before = snapshot(sqlite_db)
    data["aggregates"][2]["availability_zone"] = "az3"     # "all" overlaps az1 and az2
    data["aggregates"] = data["aggregates"][2:]
    data["hosts"][1]["vcpus"] = 99
    with pytest.raises(exception.Conflict, match="c0000 would be in more than one"):
        do_import(sqlite_db, data)
    assert snapshot(sqlite_db) == before


def test_failure_after_new_hosts_were_written_rolls_everything_back(sqlite_db):
    """New hosts, devices and aggregates are all undone when a later check fails."""
    do_import(sqlite_db, {"hosts": big_fleet(4)["hosts"]})
    db_aggregates.create_aggregate(sqlite_db, "other", availability_zone="elsewhere",
                                   hosts=["c0000"])
    before = snapshot(sqlite_db)
    data = big_fleet(12)                                   # 8 new hosts with devices
    with pytest.raises(exception.Conflict, match="c0000"):
        do_import(sqlite_db, data)
    assert snapshot(sqlite_db) == before
    with sqlite_db.reader() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(models.ComputeNode)) == 4


def test_progress_reports_each_phase_and_ends_committing(sqlite_db):
    calls = []
    do_import(sqlite_db, big_fleet(2500, pci_every=50),
              progress=lambda phase, done, total: calls.append((phase, done, total)))
    phases = [c[0] for c in calls]
    assert phases[0] == "reading stored hosts" and phases[-1] == "committing"
    writes = [c for c in calls if c[0] == "writing new hosts"]
    assert [c[1] for c in writes] == [0, 1000, 2000, 2500]
    assert all(c[2] == 2500 for c in writes)


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_terminal_progress_only_on_a_terminal():
    assert manage_host.terminal_progress(_Stream(tty=False)) is None
    stream = _Stream(tty=True)
    show = manage_host.terminal_progress(stream)
    show("writing new hosts", 1000, 10000)
    show("committing", 10000, 10000)
    text = stream.getvalue()
    assert "writing new hosts 1000/10000" in text and text.endswith("committing 10000/10000\n")
    assert text.count("\r") == 2


@pytest.mark.parametrize("in_chunk", [2, 500])
def test_zone_check_by_name_or_over_every_zone_finds_the_same_conflict(sqlite_db,
                                                                       monkeypatch,
                                                                       in_chunk):
    """Many hosts are checked with one query over all zones, a few by name."""
    monkeypatch.setattr(db_aggregates, "IN_CHUNK", in_chunk)
    do_import(sqlite_db, {"hosts": big_fleet(6)["hosts"]})
    db_aggregates.create_aggregate(sqlite_db, "other", availability_zone="elsewhere",
                                   hosts=["c0004"])
    with pytest.raises(exception.Conflict, match="c0004 would be in more than one"):
        do_import(sqlite_db, big_fleet(6))
    data = big_fleet(6)
    data["aggregates"][1]["hosts"] = ["c0003", "c0005"]        # c0004 left out of az2
    do_import(sqlite_db, data)
    assert db_hosts.get_host(sqlite_db, "c0004")["availability_zone"] == "elsewhere"


def test_bulk_import_stores_tags_and_a_retag_updates_only_that_host(sqlite_db):
    from db import pci as db_pci

    data = big_fleet(6)
    data["hosts"][0]["pci_devices"][2]["tags"] = {"trusted": "true"}
    do_import(sqlite_db, data)
    node_id = node_row(sqlite_db, "c0000").id
    with sqlite_db.reader() as s:
        assert {d.address: d.tags for d in db_pci.devices_for_node(s, node_id)} == {
            PF["address"]: (), vf(0)["address"]: (),
            vf(1)["address"]: (("trusted", "true"),)}
        pools = db_pci.pools_for_nodes(s, [node_id])[node_id]
    assert [p.key.tags for p in pools if p.key.dev_type == "type-VF"] == [
        (), (("trusted", "true"),)]
    data["hosts"][0]["pci_devices"][2]["tags"] = {"trusted": "false"}
    result = do_import(sqlite_db, data)
    assert result.updated == ["c0000"] and set(result.pci) == {"c0000"}
    assert [d.tags for d in result.pci["c0000"].update] == [(("trusted", "false"),)]
    with sqlite_db.reader() as s:
        stored = s.execute(sa.select(models.PciDevice.tags).where(
            models.PciDevice.address == vf(1)["address"],
            models.PciDevice.compute_node_id == node_id)).scalar_one()
    assert stored == '{"trusted":"false"}'


@pytest.mark.parametrize("in_chunk", [500, 2])
def test_aggregate_membership_statements_do_not_grow_with_hosts(any_db, monkeypatch,
                                                                in_chunk):
    """1,000 hosts added in one call take as many statements as 10 (also when
    the IN-list bound is below the number of hosts: one query then reads every
    name); removing them all at once stays one transaction."""
    monkeypatch.setattr(db_aggregates, "IN_CHUNK", in_chunk)
    do_import(any_db, {"hosts": [{"host": f"c{i:04d}", "vcpus": 8, "memory_mb": 8192,
                                  "local_gb": 10} for i in range(1010)]})
    names = [f"c{i:04d}" for i in range(1010)]
    db_aggregates.create_aggregate(any_db, "few", availability_zone="az1")
    db_aggregates.create_aggregate(any_db, "many", availability_zone="az2")
    with counted_statements(any_db) as few:
        db_aggregates.add_hosts(any_db, "few", names[:10])
    with counted_statements(any_db) as many:
        agg = db_aggregates.add_hosts(any_db, "many", names[10:])
    assert len(agg["hosts"]) == 1000
    assert many[0] == few[0] <= 10, (few, many)
    # a 1,000-host call with one unknown host at the end writes nothing
    db_aggregates.create_aggregate(any_db, "none")
    with pytest.raises(exception.NotFound) as caught:
        db_aggregates.add_hosts(any_db, "none", names[:999] + ["c9999"])
    assert caught.value.name == "c9999"
    assert db_aggregates.get_aggregate(any_db, "none")["hosts"] == []
    agg = db_aggregates.remove_hosts(any_db, "many", names[10:])
    assert agg["hosts"] == []
    assert db_hosts.get_host(any_db, "c0500")["availability_zone"] is None
