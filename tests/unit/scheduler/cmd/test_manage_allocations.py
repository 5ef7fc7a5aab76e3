"""berth-manage allocations list|release on SQLite: pending claims for operators."""
from __future__ import annotations

import datetime
import json

import sqlalchemy as sa
from oslo_config import cfg

from db import models
from db.api import Database
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from tests.unit.scheduler.cmd.test_manage import GOOD, cli  # noqa: F401  (fixture)

ONE = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 1}, "project_id": "pa"}
_alloc = models.Consumer.__table__


def _place(cli, pending: bool) -> str:  # noqa: F811
    db = Database(cli.url)
    try:
        s = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
        return s.select_destinations(s.parse_request(ONE), pending=pending)[0][0].instance_uuid
    finally:
        db.dispose()


def _age(cli, uuid: str, seconds: int) -> None:  # noqa: F811
    db = Database(cli.url)
    try:
        with db.writer_connection() as conn:
            conn.execute(sa.update(_alloc).where(_alloc.c.instance_uuid == uuid).values(
                created_at=models.utcnow() - datetime.timedelta(seconds=seconds)))
    finally:
        db.dispose()


def test_list_and_release(cli):  # noqa: F811
    assert cli("host", "import", cli.write(GOOD))[0] == 0
    held = _place(cli, pending=False)
    old = _place(cli, pending=True)
    new = _place(cli, pending=True)
    _age(cli, old, 900)
    rc, out, _ = cli("allocations", "list", "--json")
    assert rc == 0 and [r["instance_uuid"] for r in json.loads(out)] == [old, held, new]
    rc, out, _ = cli("allocations", "list", "--pending", "--older-than", "600", "--json")
    rows = json.loads(out)
    assert [r["instance_uuid"] for r in rows] == [old] and rows[0]["pending"] is True
    assert rows[0]["resources"]["VCPU"] == 1 and rows[0]["host"].startswith("compute-")
    assert rows[0]["consumer_type"] == "instance"
    rc, out, _ = cli("allocations", "list", "--pending")
    assert rc == 0 and old in out and new in out and held not in out and "15m" in out
    rc, out, _ = cli("allocations", "release", old, old)
    assert rc == 0 and "released from compute-" in out and "held nothing" in out
    assert cli.scalar(sa.select(sa.func.count()).select_from(_alloc)) == 2
    inv = models.ProviderInventory.__table__
    assert cli.scalar(sa.select(sa.func.sum(inv.c.used)).where(
        inv.c.resource_class == "VCPU")) == 2


def test_bad_arguments_change_nothing(cli):  # noqa: F811
    assert cli("host", "import", cli.write(GOOD))[0] == 0
    _place(cli, pending=True)
    before = cli.snapshot()
    rc, _, err = cli("allocations", "release", "not-a-uuid")
    assert rc == 2 and "instance_uuids[0]" in err
    rc, _, err = cli("allocations", "list", "--older-than", "soon")
    assert rc == 2 and "expected seconds" in err
    assert cli.snapshot() == before


def test_list_prints_no_terminal_escapes(cli):  # noqa: F811
    """A project id is whatever a caller sent: the table shows its escapes as
    text, not to the terminal."""
    assert cli("host", "import", cli.write(GOOD))[0] == 0
    held = _place(cli, pending=False)
    db = Database(cli.url)
    try:
        with db.writer_connection() as conn:
            conn.execute(sa.update(_alloc).where(_alloc.c.instance_uuid == held).values(
                project_id="\x1b[2J\x1b[31mevil\nFORGED\u202e"))
    finally:
        db.dispose()
    rc, out, _ = cli("allocations", "list")
    assert rc == 0 and held in out
    assert "\x1b" not in out and "\u202e" not in out and "\nFORGED" not in out
    assert "\\x1b[2J\\x1b[31mevil\\x0aFORGED\\u202e" in out


def test_list_preempted(cli):  # noqa: F811
    """An instance preempted and not released yet is listed with --preempted (and
    no longer counts); its release gives nothing back."""
    assert cli("host", "import", cli.write(GOOD))[0] == 0
    db = Database(cli.url)
    try:
        s = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
        low = s.parse_request({"flavor": {"vcpus": 8, "memory_mb": 100000, "root_gb": 1,
                                          "extra_specs": {"berth:preemptible": "true"}},
                               "force_hosts": ["compute-002"]})
        s.select_destinations(low)
        high = s.parse_request({"flavor": {"vcpus": 8, "memory_mb": 100000, "root_gb": 1,
                                           "extra_specs": {"berth:priority": "1"}},
                                "force_hosts": ["compute-002"]})
        [[sel]] = s.select_destinations(high, allow_preemption=True)
    finally:
        db.dispose()
    [victim] = sel.preempted
    rc, out, _ = cli("allocations", "list", "--preempted", "--json")
    rows = json.loads(out)
    assert rc == 0 and [r["instance_uuid"] for r in rows] == [victim["instance_uuid"]]
    assert rows[0]["preempted_by"] == sel.instance_uuid and rows[0]["priority"] == 0
    assert rows[0]["resources"]["VCPU"] == 8 and rows[0]["host"] == "compute-002"
    rc, out, _ = cli("allocations", "list", "--preempted")
    assert rc == 0 and "preempted" in out and sel.instance_uuid in out
    inv = models.ProviderInventory.__table__
    used = cli.scalar(sa.select(sa.func.sum(inv.c.used)).where(inv.c.resource_class == "VCPU"))
    assert used == 8
    rc, out, _ = cli("allocations", "release", victim["instance_uuid"])
    assert rc == 0 and "released from compute-002" in out
    assert cli.scalar(sa.select(sa.func.sum(inv.c.used)).where(
        inv.c.resource_class == "VCPU")) == 8
    assert json.loads(cli("allocations", "list", "--preempted", "--json")[1]) == []
