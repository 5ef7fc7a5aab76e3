"""The fleet import keeps what the report path keeps: a host below its usage is
written disabled, never enabled with negative free room; ``--dry-run`` runs the
import's own checks; hostile YAML values, impossible NUMA topologies and names
with bidi or line-separator characters are refused by name, on every path."""
from __future__ import annotations

import copy

import pytest
import sqlalchemy as sa

from db import hosts as db_hosts
from db import limits, models
from db.api import Database
from db.inventory import DISK_GB, MEMORY_MB, VCPU
from numa import errors as numa_errors
from numa import topology as numa_topology
from scheduler import exception, fleet
from tests import ledger
from tests.unit.scheduler.cmd.test_manage import Cli

HOST = {"host": "compute-003", "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
        "cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0,
        "disk_allocation_ratio": 1.0}


@pytest.fixture
def cli(tmp_path, capsys):
    c = Cli(tmp_path, capsys)
    assert c("db", "sync")[0] == 0
    return c


def _hold(cli: Cli, vcpus: int, memory_mb: int = 512) -> None:
    """An allocation of ``vcpus`` on compute-003, written as a claim writes it."""
    db = Database(cli.url)
    try:
        ledger.hold(db, "compute-003", "11111111-1111-1111-1111-111111111111",
                    {VCPU: vcpus, MEMORY_MB: memory_mb, DISK_GB: 1})
    finally:
        db.dispose()


def _node(cli: Cli) -> tuple:
    """(VCPU total, disabled, disabled_reason) of compute-003."""
    db = Database(cli.url)
    try:
        node = ledger.node_id(db, "compute-003")
        inv = models.ProviderInventory.__table__
        with db.reader() as s:
            total = s.execute(sa.select(inv.c.total).where(
                inv.c.provider_id == ledger.root_provider(db, node),
                inv.c.resource_class == VCPU)).scalar_one()
            disabled, reason = s.execute(sa.select(
                models.ComputeNode.disabled, models.ComputeNode.disabled_reason)
                .where(models.ComputeNode.id == node)).one()
            return total, disabled, reason
    finally:
        db.dispose()


# -- below usage --------------------------------------------------------------------------

def test_import_below_usage_disables_the_host(cli):
    assert cli("host", "import", cli.write({"hosts": [HOST]}))[0] == 0
    _hold(cli, vcpus=4)
    small = dict(HOST, vcpus=1, memory_mb=512, local_gb=1)
    rc, out, err = cli("host", "import", cli.write({"hosts": [small]}))
    assert rc == 0, err
    assert "1 updated" in out
    assert "compute-003: capacity below usage: VCPU 1 < 4 used" in err
    vcpus, disabled, reason = _node(cli)
    assert vcpus == 1 and disabled
    assert reason.startswith(db_hosts.CAPACITY_REASON_PREFIX + "VCPU 1 < 4 used")
    # Fits again: the import's own state (enabled) is written.
    rc, _out, err = cli("host", "import", cli.write({"hosts": [HOST]}))
    assert rc == 0 and "capacity below usage" not in err
    assert _node(cli)[1] is False


def test_import_below_usage_keeps_an_operators_disabled_reason(cli):
    assert cli("host", "import", cli.write({"hosts": [HOST]}))[0] == 0
    _hold(cli, vcpus=4)
    small = dict(HOST, vcpus=2, disabled=True, disabled_reason="maintenance")
    assert cli("host", "import", cli.write({"hosts": [small]}))[0] == 0
    assert _node(cli) == (2, True, "maintenance")


# -- the dry run is the import --------------------------------------------------------------

def test_dry_run_reports_what_the_import_would_do_and_writes_nothing(cli):
    assert cli("host", "import", cli.write({"hosts": [HOST]}))[0] == 0
    _hold(cli, vcpus=4)
    before = cli.snapshot()
    small = dict(HOST, vcpus=1)
    rc, out, err = cli("host", "import", "--dry-run", cli.write({"hosts": [small]}))
    assert rc == 0, err
    assert "would import: hosts: 0 created, 1 updated" in out and "nothing written" in out
    assert "capacity below usage: VCPU 1 < 4 used" in err
    assert cli.snapshot() == before


def test_dry_run_refuses_what_only_the_database_refuses(cli):
    """A zone conflict with a stored aggregate is found by the import's transaction,
    not by reading the file: the dry run meets it too."""
    assert cli("host", "import", cli.write({"hosts": [HOST], "aggregates": [
        {"name": "a1", "availability_zone": "az1", "hosts": ["compute-003"]}]}))[0] == 0
    before = cli.snapshot()
    clash = {"hosts": [HOST], "aggregates": [
        {"name": "a2", "availability_zone": "az2", "hosts": ["compute-003"]}]}
    rc, _out, err = cli("host", "import", "--dry-run", cli.write(clash))
    assert rc == 1 and "availability zone" in err and "Traceback" not in err
    assert cli.snapshot() == before


@pytest.mark.parametrize("value, words", [
    ("1" + "0" * 5000, "not valid YAML"),
    ("!!binary aGVsbG8=", "cpu_info.a: expected a JSON value"),
    ("!!timestamp 2001-12-14t21:59:43.10-05:00", "cpu_info.a: expected a JSON value"),
    ("!!set {x, y}", "cpu_info.a: expected a JSON value"),
])
@pytest.mark.parametrize("dry", [True, False])
def test_hostile_yaml_values_fail_dry_run_and_import_alike(cli, value, words, dry):
    path = cli.tmp_path / "hostile.yaml"
    path.write_text("hosts:\n  - host: h1\n    vcpus: 4\n    memory_mb: 1024\n"
                    f"    local_gb: 1\n    cpu_info: {{a: {value}}}\n")
    before = cli.snapshot()
    rc, _out, err = cli("host", "import", *(["--dry-run"] if dry else []), str(path))
    assert rc == 2, err
    assert words in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert cli.snapshot() == before


def test_a_huge_integer_is_named_without_printing_it():
    with pytest.raises(exception.InvalidRequest) as caught:
        fleet.load_fleet({"hosts": [dict(HOST, vcpus=10 ** 5000)]})
    assert caught.value.field == "hosts[0].vcpus" and "bits" in str(caught.value)


# -- NUMA plausibility -------------------------------------------------------------------

CELL = {"id": 0, "cpuset": [0, 1], "pcpuset": [2, 3], "siblings": [[2, 3]],
        "memory_mb": 8192, "mempages": [{"size_kb": 4, "total": 2097152},
                                        {"size_kb": 2048, "total": 1024}]}


def _with_cell(**changes) -> dict:
    cell = copy.deepcopy(CELL)
    cell.update(changes)
    return dict(HOST, numa_topology={"cells": [cell]})


@pytest.mark.parametrize("changes, field, words", [
    ({"pcpuset": [2, 2 ** 40]}, "cells.0.pcpuset", "CPU ids <= 65535"),
    ({"siblings": [[2, 9]]}, "cells.0.siblings.0", "CPUs 9 are not CPUs of this cell"),
    ({"memory_mb": 2 ** 40}, "cells", "add up to at most the host's memory_mb"),
    ({"mempages": [{"size_kb": 3, "total": 1}]}, "cells.0.mempages.0.size_kb",
     "power of two >= 4"),
    ({"mempages": [{"size_kb": 6144, "total": 1}]}, "cells.0.mempages.0.size_kb",
     "power of two"),
    ({"mempages": [{"size_kb": 2048, "total": 2 ** 62}]}, "cells.0.mempages.0.total",
     "at most 4096 pages"),
    ({"mempages": [{"size_kb": 2048, "total": 3000},
                   {"size_kb": 1048576, "total": 4}]}, "cells.0.mempages",
     "huge pages of 10096 MB in all exceed"),
])
def test_impossible_topologies_are_refused_on_every_path(changes, field, words):
    host = _with_cell(**changes)
    with pytest.raises(exception.InvalidRequest) as caught:
        fleet.load_fleet({"hosts": [host]})
    assert caught.value.field == f"hosts[0].numa_topology.{field}", caught.value
    assert words in str(caught.value)
    with pytest.raises(exception.InvalidRequest) as caught:     # a host's report
        fleet.parse_host(host, where="node")
    assert caught.value.field == f"node.numa_topology.{field}"


def test_a_real_layout_passes():
    record = fleet.parse_host(_with_cell())
    topo = numa_topology.HostTopology.from_primitive(record.numa_topology)
    numa_topology.check_host_layout(topo, 16384)
    with pytest.raises(numa_errors.NumaError):
        numa_topology.check_host_layout(topo, 1024)


# -- names ----------------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u202e", "\u202a", "\u2066",
                                  "\u200f", "\u061c", "\ud800", "\x1b", "\n", "\x85"])
def test_names_refuse_separators_and_bidi(char):
    with pytest.raises(exception.InvalidRequest) as caught:
        fleet.load_fleet({"hosts": [dict(HOST, host=f"compute{char}003")]})
    assert caught.value.field == "hosts[0].host"
    with pytest.raises(limits.LimitError):
        limits.check_name(f"az{char}1")


def test_escape_controls_leaves_ordinary_text_alone():
    assert limits.escape_controls("héllo wörld ∑") == "héllo wörld ∑"
    assert limits.escape_controls("a\nb\u202ec\x1b[31m") == "a\\x0ab\\u202ec\\x1b[31m"
