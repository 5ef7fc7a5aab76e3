"""The berth CLI: tables, JSON, exit codes and one-line failures (no daemon needed)."""
from __future__ import annotations

import datetime
import json

import oslo_messaging
import pytest
from oslo_config import cfg

from scheduler import exception
from scheduler.cmd import client

SEL = {"instance_uuid": "u1", "host": "compute-001", "node": "compute-001",
       "node_uuid": "n1", "weight": 1.23456,
       "allocation": {"vcpus": 2, "memory_mb": 2048, "disk_mb": 10240},
       "numa_cells": {"cells": [{"id": 0, "host_cell_id": 1, "cpu_pinning": {"0": 9, "1": 8},
                                 "pagesize_kb": 2048}],
                      "emulator_threads_policy": None},
       "pci_devices": ["0000:81:02.1"]}
HOST = {"host": "compute-001", "node": "compute-001", "availability_zone": "az1",
        "vcpus": 32, "vcpus_used": 2, "pcpus": 16, "pcpus_used": 4,
        "memory_mb": 65536, "memory_mb_used": 2048,
        "local_gb": 100, "local_gb_used": 10, "running_vms": 1,
        "pci_devices": {"total": 4, "available": 3}, "disabled": False,
        "last_seen_up": "2024-01-01T11:59:50"}


class FakeAPI:
    """Stands in for SchedulerAPI; ``error`` is raised by every call when set."""

    error: Exception | None = None
    seen: list = []

    def __init__(self, conf, **kw):
        FakeAPI.seen.append(kw)

    def close(self):
        pass

    def _answer(self, value):
        if FakeAPI.error is not None:
            raise FakeAPI.error
        return value

    def select_destinations(self, ctxt, spec, return_alternates=False, dry_run=False,
                            confirm="auto"):
        alts = [SEL, dict(SEL, host="compute-002", alternate=True)]
        return self._answer([alts if return_alternates else alts[:1]])

    def release(self, ctxt, instance_uuid):
        return self._answer(instance_uuid == "u1")

    def reschedule(self, ctxt, instance_uuid, failed_host):
        return self._answer([dict(SEL, host="compute-002")])

    def list_hosts(self, ctxt):
        return self._answer([HOST])

    def show_host(self, ctxt, name):
        return self._answer(dict(HOST, stats={"rack": "r1"}))

    def report_compute_node(self, ctxt, node):
        return self._answer({"host": node["host"], "node": node["host"], "generation": 1})

    def aggregate_list(self, ctxt):
        return self._answer([{"name": "fast", "availability_zone": "az1",
                              "hosts": ["compute-001", "compute-002"],
                              "metadata": {"availability_zone": "az1", "ssd": "true"}}])

    def aggregate_add_host(self, ctxt, name, host=None, hosts=None):
        FakeAPI.seen.append(("add", name, host, hosts))
        return self._answer({"name": name, "hosts": sorted(hosts)})

    def aggregate_remove_host(self, ctxt, name, host=None, hosts=None):
        FakeAPI.seen.append(("remove", name, host, hosts))
        return self._answer({"name": name, "hosts": []})

    def move_instance(self, ctxt, move, return_alternates=False):
        FakeAPI.seen.append(("move", move))
        return self._answer([dict(SEL, host="compute-002",
                                  migration_uuid=move.get("migration_uuid", "m-1"))])

    def confirm_move(self, ctxt, instance_uuid, migration_uuid):
        FakeAPI.seen.append(("confirm_move", instance_uuid, migration_uuid))
        return self._answer(True)

    def revert_move(self, ctxt, instance_uuid, migration_uuid):
        FakeAPI.seen.append(("revert_move", instance_uuid, migration_uuid))
        return self._answer(True)

    def ping(self, ctxt=None):
        return self._answer({"host": "sched1", "pid": 1, "worker": 0,
                             "backend": "eventlet", "version": "1.0"})


@pytest.fixture
def berth(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("scheduler.rpcapi.SchedulerAPI", FakeAPI)
    monkeypatch.setattr(client, "check_broker", lambda url, timeout: None)
    FakeAPI.error = None
    FakeAPI.seen = []
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}}))

    def run(*argv):
        argv = [str(a).replace("REQ", str(request)) for a in argv]
        rc = client.run(argv)
        out, err = capsys.readouterr()
        return rc, out, err
    run.tmp = tmp_path
    return run


def test_select_table_and_json(berth):
    rc, out, _ = berth("select", "REQ", "--alternates")
    assert rc == 0
    assert out.splitlines()[0].split() == ["INSTANCE", "HOST", "NODE", "RESOURCES", "NUMA",
                                           "PCI", "WEIGHT"]
    assert "compute-002" in out and "alternate" in out and "1.235" in out
    # Guest cell on host cell 1, pinned to host CPUs 8 and 9, 2 MiB pages.
    assert "cell1:8,9@2048K" in out and "0000:81:02.1" in out
    rc, out, _ = berth("select", "REQ", "--json", "--dry-run")
    assert rc == 0 and json.loads(out)[0][0]["host"] == "compute-001"
    rc, out, _ = berth("--json", "select", "REQ")
    assert json.loads(out)[0][0]["host"] == "compute-001"


def test_no_valid_host_exits_1_with_the_explanation(berth):
    FakeAPI.error = exception.NoValidHost(
        reason="0/10 hosts available: 8 RamFilter (insufficient RAM)",
        summary={"hosts": 10, "available": 0, "filters": [
            {"filter": "RamFilter", "removed": 8, "reasons": {"insufficient RAM": 8}},
            {"filter": "ComputeFilter", "removed": 2, "reasons": {"disabled": 2}}]})
    rc, out, err = berth("select", "REQ")
    assert rc == 1
    assert err.splitlines() == [
        "No valid host: 0/10 hosts available: 8 RamFilter (insufficient RAM)",
        "  RamFilter: removed 8 - insufficient RAM (8)",
        "  ComputeFilter: removed 2 - disabled (2)"]
    rc, out, _ = berth("select", "REQ", "--json")
    assert rc == 1 and json.loads(out)["error"] == "NoValidHost"


@pytest.mark.parametrize("error, text", [
    (exception.InvalidRequest(field="flavor.vcpus", reason="expected an integer"),
     "berth: Invalid request: flavor.vcpus: expected an integer"),
    (exception.NotFound(kind="Host", name="x"), "berth: Host x not found."),
    (oslo_messaging.MessagingTimeout("t"),
     "berth: no scheduler answered on topic 'scheduler' within 30s - "
     "is berth-scheduler running?"),
])
def test_errors_exit_2_with_one_line(berth, error, text):
    FakeAPI.error = error
    rc, out, err = berth("host", "show", "x")
    assert rc == 2
    assert err.strip() == text


def test_bad_input_files_exit_2(berth):
    bad = berth.tmp / "bad.json"
    bad.write_text("{not json")
    rc, _, err = berth("select", str(bad))
    assert rc == 2 and "not valid JSON" in err
    rc, _, err = berth("select", "/nonexistent.json")
    assert rc == 2 and "cannot read" in err
    two = berth.tmp / "two.yaml"
    two.write_text("hosts: [{host: a}, {host: b}]\n")
    rc, _, err = berth("report", "host", str(two))
    assert rc == 2 and "expected one host, found 2" in err


def test_report_host_accepts_a_host_or_a_one_host_fleet(berth):
    one = berth.tmp / "one.yaml"
    one.write_text("host: compute-9\nvcpus: 4\nmemory_mb: 1024\nlocal_gb: 1\n")
    rc, out, _ = berth("report", "host", str(one))
    assert rc == 0 and out.startswith("Reported compute-9")
    fleet = berth.tmp / "fleet.yaml"
    fleet.write_text("hosts: [{host: compute-8, vcpus: 4, memory_mb: 1024, local_gb: 1}]\n")
    rc, out, _ = berth("report", "host", str(fleet))
    assert rc == 0 and "compute-8" in out


def test_release_reschedule_hosts_ping(berth):
    assert berth("release", "u1")[1] == "Released u1\n"
    assert "already released" in berth("release", "u2")[1]
    assert "compute-002" in berth("reschedule", "u1", "compute-001")[1]
    rc, out, _ = berth("hosts")
    assert rc == 0 and "2/32" in out and "4/16" in out and "3/4" in out
    assert out.splitlines()[0].split()[3:5] == ["VCPUS", "PCPUS"]
    rc, out, _ = berth("host", "show", "compute-001")
    assert "stats:\n  rack: r1" in out
    rc, out, _ = berth("ping")
    assert rc == 0 and out.startswith("berth-scheduler on sched1 answered in")


def test_timeout_reaches_the_client(berth):
    berth("--timeout", "3", "ping")
    assert FakeAPI.seen[-1]["timeout"] == 3.0


def test_unreachable_broker_is_one_line(monkeypatch, capsys):
    try:
        rc = client.run(["--transport-url", "rabbit://guest:guest@127.0.0.1:1/",
                         "--timeout", "2", "ping"])
    finally:
        cfg.CONF.clear_override("transport_url")
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("berth: cannot reach the message broker at 127.0.0.1:1")
    assert len(err.strip().splitlines()) == 1


def test_host_ages():
    now = datetime.datetime(2024, 1, 1, 12, 0, 0)
    assert "10s ago" in client.format_hosts([HOST], now)
    assert client._age("2024-01-01T10:00:00", now) == "2h ago"
    assert client._age(None, now) is None


def test_aggregate_membership_sends_every_host_in_one_call(berth):
    rc, out, _ = berth("aggregate", "add-host", "fast", "compute-002", "compute-001")
    assert rc == 0 and out == "Added 2 host(s); aggregate fast now has 2\n"
    assert FakeAPI.seen[-1] == ("add", "fast", None, ["compute-002", "compute-001"])
    rc, out, _ = berth("aggregate", "remove-host", "fast", "compute-001", "--json")
    assert json.loads(out) == {"name": "fast", "hosts": []}
    assert FakeAPI.seen[-1] == ("remove", "fast", None, ["compute-001"])
    FakeAPI.error = exception.NotFound(kind="Host", name="compute-404")
    rc, _, err = berth("aggregate", "add-host", "fast", "compute-404")
    assert rc == 2 and err.strip() == "berth: Host compute-404 not found."
    FakeAPI.error = None
    rc, out, _ = berth("aggregate", "list")
    assert out.splitlines()[2].split() == ["fast", "az1", "2", "ssd=true"]


def test_host_show_lists_every_providers_inventories():
    from scheduler.cmd.client import format_inventories

    host = {"node": "gpu-1", "resources": {
        "VCPU": {"total": 32, "reserved": 2, "allocation_ratio": 4.0, "used": 6, "free": 114,
                 "max_unit": 32}},
        "providers": [{"name": "gpu-1_pci_0000_3b_00_0", "traits": ["CUSTOM_VGPU_A40_8Q"],
                       "resources": {"VGPU": {"total": 2, "reserved": 0,
                                              "allocation_ratio": 1.0, "used": 1, "free": 1,
                                              "max_unit": 2}}}]}
    lines = format_inventories(host).splitlines()
    assert lines[0].split() == ["PROVIDER", "CLASS", "TOTAL", "RESERVED", "RATIO", "USED",
                                "FREE", "MAX_UNIT", "CHILD", "TRAITS"]
    assert lines[-2].split()[:3] == ["gpu-1", "VCPU", "32"]
    assert lines[-1].split() == ["gpu-1_pci_0000_3b_00_0", "VGPU", "2", "0", "1.0", "1", "1",
                                 "2", "CUSTOM_VGPU_A40_8Q"]


def test_move_commands_send_the_kind_and_its_options(berth):
    flavor = berth.tmp / "flavor.json"
    flavor.write_text(json.dumps({"vcpus": 4, "memory_mb": 8192, "root_gb": 40}))
    rc, out, _ = berth("resize", "u1", str(flavor), "--migration-uuid", "m-9")
    assert rc == 0 and "compute-002" in out and "berth confirm-move u1 m-9" in out
    assert ("move", {"instance_uuid": "u1", "kind": "resize", "migration_uuid": "m-9",
                     "flavor": {"vcpus": 4, "memory_mb": 8192, "root_gb": 40}}) \
        in FakeAPI.seen
    rc, out, _ = berth("live-migrate", "u1", "--destination", "compute-002", "--force",
                       "--json")
    assert rc == 0 and json.loads(out)[0]["host"] == "compute-002"
    assert ("move", {"instance_uuid": "u1", "kind": "live-migrate",
                     "destination": "compute-002", "force": True}) in FakeAPI.seen
    rc, out, _ = berth("unshelve", "u1", "REQ", "--availability-zone", "az2")
    moved = [m for kind, *m in FakeAPI.seen if kind == "move"][-1][0]
    assert rc == 0 and moved["availability_zone"] == "az2" and moved["request_spec"]["flavor"]
    assert berth("confirm-move", "u1", "m-9")[0] == 0
    assert berth("revert-move", "u1", "m-9", "--json")[1].strip().startswith("{")
    assert ("confirm_move", "u1", "m-9") in FakeAPI.seen
    assert ("revert_move", "u1", "m-9") in FakeAPI.seen
    with pytest.raises(SystemExit) as e:      # argparse: the instance is required
        berth("evacuate")
    assert e.value.code == 2


def test_tables_escape_control_characters():
    from scheduler.cmd.client import format_table

    text = format_table(["NAME"], [["evil\x1b[2J\nline\u202e"]])
    assert "\x1b" not in text and "\u202e" not in text and text.count("\n") == 2
    assert "evil\\x1b[2J\\x0aline\\u202e" in text
