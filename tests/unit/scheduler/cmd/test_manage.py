"""berth-manage end to end on SQLite: exit codes, messages, and what the database holds."""
from __future__ import annotations

import copy
import json
import os

import pytest
import sqlalchemy as sa
import yaml

from db import migration, models
from db.api import Database
from scheduler.cmd import manage
from tests import ledger

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
SAMPLE = os.path.abspath(os.path.join(ROOT, "etc", "berth", "fleet.sample.yaml"))

GOOD = {
    "hosts": [
        {"host": "compute-001", "vcpus": 8, "memory_mb": 65536, "local_gb": 500,
         "numa_topology": {"cells": [{"id": 0, "cpuset": [0, 1], "pcpuset": [2, 3],
                                      "memory_mb": 65536}]},
         "pci_devices": [
             {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
              "dev_type": "type-PF", "numa_node": 0},
             {"address": "0000:81:02.0", "vendor_id": "8086", "product_id": "154c",
              "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0,
              "physical_network": "physnet1"}]},
        {"host": "compute-002", "vcpus": 16, "memory_mb": 131072, "local_gb": 1000},
    ],
    "aggregates": [{"name": "az1", "availability_zone": "az1",
                    "hosts": ["compute-001", "compute-002"]}],
}


class Cli:
    """Runs berth-manage against one SQLite file; returns (rc, stdout, stderr)."""

    def __init__(self, tmp_path, capsys):
        self.url = f"sqlite:///{tmp_path}/berth.sqlite"
        self.conf = tmp_path / "berth.conf"
        self.conf.write_text(f"[database]\nconnection = {self.url}\n")
        self.tmp_path = tmp_path
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        rc = manage.main(["--config-file", str(self.conf), *argv])
        out, err = self.capsys.readouterr()
        return rc, out, err

    def write(self, data: dict, name: str = "fleet.yaml") -> str:
        path = self.tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return str(path)

    def snapshot(self) -> dict:
        db = Database(self.url)
        try:
            with db.reader() as s:
                return {t.name: sorted(tuple(map(str, r)) for r in s.execute(t.select()))
                        for t in models.Base.metadata.sorted_tables}
        finally:
            db.dispose()

    def scalar(self, stmt):
        db = Database(self.url)
        try:
            with db.reader() as s:
                return s.scalar(stmt)
        finally:
            db.dispose()


@pytest.fixture
def cli(tmp_path, capsys):
    c = Cli(tmp_path, capsys)
    rc, _out, err = c("db", "sync")
    assert rc == 0, err
    return c


def test_db_sync_and_version(tmp_path, capsys):
    c = Cli(tmp_path, capsys)
    rc, out, err = c("db", "version")
    assert (rc, out.strip()) == (0, "none") and "db sync" in err
    rc, out, _err = c("db", "sync")
    assert rc == 0 and migration.head_revision() in out
    rc, out, err = c("db", "version")
    assert (rc, out.strip(), err) == (0, migration.head_revision(), "")


def test_commands_need_a_synced_schema(tmp_path, capsys):
    c = Cli(tmp_path, capsys)
    rc, _out, err = c("host", "list")
    assert rc == 1 and "run 'berth-manage db sync'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_defaults_work_without_a_config_file(tmp_path, capsys, monkeypatch):
    # No --config-file: [database] connection defaults to a SQLite file under state_path.
    monkeypatch.setenv("HOME", str(tmp_path))
    from oslo_config import cfg

    cfg.CONF.set_override("state_path", str(tmp_path / "state"))
    try:
        assert manage.main(["db", "sync"]) == 0
        assert manage.main(["host", "list", "--json"]) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1]) == []
    finally:
        cfg.CONF.clear_override("state_path")
    assert (tmp_path / "state" / "berth.sqlite").exists()


def test_usage_errors_exit_2(cli):
    rc, _out, err = cli("host", "frobnicate")
    assert rc == 2 and "invalid choice" in err
    rc, _out, err = cli("--config-file", str(cli.tmp_path / "missing.conf"), "host", "list")
    assert rc == 2 and "configuration" in err


def test_import_list_show_pools(cli):
    rc, out, err = cli("host", "import", SAMPLE)
    assert rc == 0, err
    assert "10 created" in out
    rc, out, _err = cli("host", "list")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["HOST", "NODE", "AZ", "VCPUS"]
    assert len(lines) == 11 and lines[1].startswith("compute-001")
    rc, out, _err = cli("host", "list", "--json")
    hosts = json.loads(out)
    assert {h["availability_zone"] for h in hosts} == {"az1", "az2"}
    rc, out, _err = cli("host", "show", "compute-001")
    assert rc == 0 and "availability_zone" in out and "PCPUSET" in out
    rc, out, _err = cli("host", "show", "compute-001", "--json")
    assert json.loads(out)["numa_topology"]["cells"][0]["id"] == 0
    rc, out, _err = cli("pci", "pools")
    assert rc == 0 and "physnet1" in out and "type-VF" in out
    rc, out, _err = cli("pci", "pools", "--host", "compute-007", "--json")
    pools = json.loads(out)
    assert {p["host"] for p in pools} == {"compute-007"}
    assert sum(p["count"] for p in pools) == 2
    rc, _out, err = cli("pci", "pools", "--host", "compute-404")
    assert rc == 1 and "Host compute-404 not found" in err
    rc, _out, err = cli("host", "show", "compute-404")
    assert rc == 1 and err.strip() == "berth-manage: error: Host compute-404 not found."


def test_reimport_is_idempotent_and_keeps_allocations_and_claims(cli):
    path = cli.write(GOOD)
    assert cli("host", "import", path)[0] == 0
    db = Database(cli.url)
    with db.writer() as s:
        s.execute(sa.update(models.PciDevice).where(
            models.PciDevice.address == "0000:81:02.0").values(
            status="claimed", instance_uuid="inst-1"))
        s.execute(sa.update(models.PciDevice).where(
            models.PciDevice.address == "0000:81:00.0").values(status="unclaimable"))
    ledger.hold(db, "compute-001", "inst-1", {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10})
    db.dispose()
    before = cli.snapshot()
    rc, out, _err = cli("host", "import", path)
    assert rc == 0 and "2 unchanged" in out
    assert cli.snapshot()["allocations"] == before["allocations"]
    assert cli.snapshot()["pci_devices"] == before["pci_devices"]

    data = copy.deepcopy(GOOD)
    data["hosts"][0]["memory_mb"] = 131072
    rc, out, _err = cli("host", "import", cli.write(data))
    assert rc == 0 and "1 updated" in out
    rc, out, _err = cli("host", "show", "compute-001", "--json")
    shown = json.loads(out)
    assert shown["memory_mb"] == 131072 and shown["memory_mb_used"] == 1024
    assert shown["local_gb_used"] == 10 and shown["allocations"] == 1
    assert shown["pci_devices"]["by_status"] == {"claimed": 1, "unclaimable": 1}


def _bad(mutate):
    data = copy.deepcopy(GOOD)
    mutate(data)
    return data


BAD_FLEETS = {
    "missing required field": (
        _bad(lambda d: d["hosts"][1].pop("memory_mb")),
        "hosts[1] (compute-002): memory_mb: required field is missing"),
    "wrong type": (
        _bad(lambda d: d["hosts"][1].update(vcpus="sixteen")),
        "hosts[1] (compute-002): vcpus: expected an integer > 0, got 'sixteen'"),
    "negative capacity": (
        _bad(lambda d: d["hosts"][1].update(local_gb=-10)),
        "hosts[1] (compute-002): local_gb: expected an integer >= 0, got -10"),
    "duplicate host": (
        _bad(lambda d: d["hosts"].append(dict(d["hosts"][1]))),
        "hosts[2] (compute-002): host: expected a unique host name"),
    "VF whose parent PF is absent": (
        _bad(lambda d: d["hosts"][0]["pci_devices"].pop(0)),
        "hosts[0] (compute-001): pci_devices[0].parent_addr: expected the address of a "
        "type-PF device"),
    "unknown aggregate host": (
        _bad(lambda d: d["aggregates"][0]["hosts"].append("compute-099")),
        "aggregates[0] (az1): hosts[2]: expected a host defined under hosts:, "
        "got 'compute-099'"),
    "unknown key": (
        _bad(lambda d: d["hosts"][0].update(memory_gb=64)),
        "hosts[0] (compute-001): memory_gb: unknown key"),
    "bad NUMA": (
        _bad(lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(cpuset=[0, 2])),
        "hosts[0] (compute-001): numa_topology.cells.0.pcpuset:"),
    "bad ratio": (
        _bad(lambda d: d["hosts"][0].update(cpu_allocation_ratio=-1)),
        "hosts[0] (compute-001): cpu_allocation_ratio: expected a number > 0 and <= 1000, got -1"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FLEETS))
def test_bad_fleet_exits_2_names_field_and_writes_nothing(cli, kind):
    # A first, good import: the bad one must not change any of it.
    good = copy.deepcopy(GOOD)
    good["hosts"][1]["vcpus"] = 4
    assert cli("host", "import", cli.write(good, "good.yaml"))[0] == 0
    before = cli.snapshot()
    data, message = BAD_FLEETS[kind]
    # Also change a valid host, so a partial write would show.
    data = copy.deepcopy(data)
    data["hosts"][0]["vcpus"] = 64
    rc, out, err = cli("host", "import", cli.write(data))
    assert rc == 2, (out, err)
    assert err.startswith("berth-manage: error: " + message), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert cli.snapshot() == before


def test_bad_fleet_into_empty_database_writes_nothing(cli):
    before = cli.snapshot()
    data, _message = BAD_FLEETS["unknown aggregate host"]
    assert cli("host", "import", cli.write(data))[0] == 2
    assert cli.snapshot() == before


def test_import_dry_run_and_unreadable_files(cli):
    before = cli.snapshot()
    rc, out, _err = cli("host", "import", "--dry-run", cli.write(GOOD))
    assert rc == 0 and "valid (2 hosts, 1 aggregates)" in out
    assert cli.snapshot() == before
    bad = cli.tmp_path / "broken.yaml"
    bad.write_text("hosts: [\n")
    rc, _out, err = cli("host", "import", str(bad))
    assert rc == 2 and "not valid YAML" in err
    rc, _out, err = cli("host", "import", str(cli.tmp_path / "nope.yaml"))
    assert rc == 2 and "cannot read" in err


def test_host_delete_refuses_with_allocations_unless_forced(cli):
    assert cli("host", "import", cli.write(GOOD))[0] == 0
    db = Database(cli.url)
    with db.writer() as s:
        node_id = s.scalar(sa.select(models.ComputeNode.id).where(
            models.ComputeNode.host == "compute-002"))
    ledger.hold(db, node_id, "inst-1", {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})
    db.dispose()
    rc, _out, err = cli("host", "delete", "compute-002")
    assert rc == 1 and "1 allocation(s)" in err
    assert cli.scalar(sa.select(models.ComputeNode.deleted).where(
        models.ComputeNode.id == node_id)) == 0
    rc, out, _err = cli("host", "delete", "compute-002", "--force")
    assert rc == 0 and "1 allocation(s)" in out
    assert cli.scalar(sa.select(models.ComputeNode.deleted).where(
        models.ComputeNode.id == node_id)) == node_id
    rc, out, _err = cli("host", "list", "--json")
    assert [h["host"] for h in json.loads(out)] == ["compute-001"]
    rc, _out, err = cli("host", "delete", "compute-002")
    assert rc == 1 and "not found" in err


def test_aggregate_commands(cli):
    assert cli("host", "import", cli.write(GOOD))[0] == 0
    rc, out, err = cli("aggregate", "create", "fast", "--property", "ssd=true",
                       "--host", "compute-001")
    assert rc == 0, err
    rc, out, _err = cli("aggregate", "set-metadata", "fast", "cpu_allocation_ratio=2.0",
                        "ssd", "--json")
    assert json.loads(out)["metadata"] == {"cpu_allocation_ratio": "2.0"}
    assert cli("aggregate", "add-host", "fast", "compute-002")[0] == 0
    rc, _out, err = cli("aggregate", "create", "az2", "--zone", "az2", "--host",
                        "compute-001")
    assert rc == 1 and "more than one availability zone" in err
    rc, out, _err = cli("aggregate", "list")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "AZ", "HOSTS", "METADATA"]
    assert lines[1].split()[:2] == ["az1", "az1"]
    assert lines[2].split() == ["fast", "-", "compute-001,compute-002",
                                "cpu_allocation_ratio=2.0"]
    rc, _out, err = cli("aggregate", "delete", "fast")
    assert rc == 1 and "still has hosts" in err
    rc, _out, err = cli("aggregate", "remove-host", "fast", "compute-001", "compute-404")
    assert rc == 1 and "compute-404 is not in aggregate fast" in err
    rc, out, _err = cli("aggregate", "remove-host", "fast", "compute-001", "compute-002",
                        "--json")
    assert rc == 0 and json.loads(out)["hosts"] == []
    rc, _out, err = cli("aggregate", "add-host", "fast", "compute-002", "compute-404")
    assert rc == 1 and "Host compute-404 not found" in err
    rc, _out, err = cli("aggregate", "add-host", "fast", "compute-002", "compute-002")
    assert rc == 2 and "hosts[1]" in err
    rc, out, _err = cli("aggregate", "show", "fast", "--json")
    assert json.loads(out)["hosts"] == []
    assert cli("aggregate", "delete", "fast")[0] == 0
    rc, out, _err = cli("aggregate", "update", "az1", "--name", "zone-one", "--json")
    assert json.loads(out)["name"] == "zone-one"
    rc, out, _err = cli("aggregate", "list", "--json")
    assert [a["name"] for a in json.loads(out)] == ["zone-one"]
    rc, _out, err = cli("aggregate", "create", "x", "--property", "novalue")
    assert rc == 2 and "KEY=VALUE" in err
    rc, _out, err = cli("aggregate", "show", "nope")
    assert rc == 1 and "Aggregate nope not found" in err


def test_pools_and_host_show_show_tags(cli):
    data = copy.deepcopy(GOOD)
    vf = data["hosts"][0]["pci_devices"][1]
    data["hosts"][0]["pci_devices"].append(dict(vf, address="0000:81:02.1",
                                                tags={"trusted": "true"}))
    rc, _out, err = cli("host", "import", cli.write(data))
    assert rc == 0, err
    rc, out, _err = cli("pci", "pools", "--host", "compute-001")
    lines = out.splitlines()
    assert lines[0].split() == ["HOST", "NODE", "VENDOR", "PRODUCT", "TYPE", "NUMA",
                                "PHYSNET", "TAGS", "FREE"]
    assert [line.split()[-2:] for line in lines[1:]] == [["-", "1"], ["trusted=true", "1"],
                                                        ["-", "1"]]
    rc, out, _err = cli("pci", "pools", "--host", "compute-001", "--json")
    assert [p["tags"] for p in json.loads(out)] == [{}, {"trusted": "true"}, {}]
    rc, out, _err = cli("host", "show", "compute-001", "--json")
    assert json.loads(out)["pci_devices"]["by_tag"] == {"trusted=true": 1}
