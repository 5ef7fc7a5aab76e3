"""The realistic benchmark end to end on a tiny fleet: trace generator, cold replayer,
validity checker (and that the checker catches what it should), burst, run.py."""
from __future__ import annotations

import collections
import json

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import models
from db.inventory import MEMORY_MB, VCPU
from pci import request as pci_request
from scheduler.filter_scheduler import group_key
from scheduler.request_spec import RequestSpec
from tools.bench import check as bench_check
from tools.bench import fleet as bench_fleet
from tools.bench import replay as bench_replay
from tools.bench import run as bench_run
from tools.bench import trace as bench_trace

_cn = models.ComputeNode.__table__
_rp = models.ResourceProvider.__table__
_inv = models.ProviderInventory.__table__
_cons = models.Consumer.__table__
_alloc = models.Allocation.__table__


@pytest.fixture
def conf():
    c = cfg.CONF
    bench_replay.configure(c, bench_replay.realistic_plugins())
    yield c
    for name in ("enabled_filters", "weight_classes"):
        c.clear_override(name, group="filter_scheduler")
    c.clear_override("alias", group="pci")
    c.clear_override("service_down_time")
    if "transport_url" in c:
        c.clear_override("transport_url")


@pytest.fixture
def tiny(tmp_path):
    fleet = bench_fleet.generate_fleet(50, seed=5)
    ops = bench_trace.generate_trace(fleet, 40, seed=6)
    bdb = bench_fleet.create_database("sqlite", str(tmp_path))
    bench_fleet.load_fleet(bdb.db, fleet)
    yield bdb, fleet, ops
    bdb.drop()


def test_trace_is_seeded_parses_and_has_every_kind():
    fleet = bench_fleet.generate_fleet(50, seed=5)
    ops = bench_trace.generate_trace(fleet, 40, seed=6)
    assert ops == bench_trace.generate_trace(fleet, 40, seed=6)
    assert ops != bench_trace.generate_trace(fleet, 40, seed=7)
    assert {op["kind"] for op in ops} == set(bench_trace.KINDS)
    aliases = pci_request.parse_aliases([json.dumps(a) for a in bench_trace.PCI_ALIASES])
    for op in ops:
        if op["op"] == "select":
            spec = RequestSpec.from_primitive(op["spec"], pci_aliases=aliases)
            assert len(spec.instance_uuids) == spec.num_instances
    specs = [op["spec"] for op in ops if op["op"] == "select"]
    policies = {(s["flavor"].get("extra_specs") or {}).get("hw:cpu_thread_policy")
                for s in specs}
    assert {"prefer", "isolate", "require"} <= policies
    assert any("hw:cpu_dedicated_mask" in s["flavor"]["extra_specs"] for s in specs)
    assert any(s["num_instances"] > 1 for s in specs)


def test_longer_trace_covers_page_sizes_cells_and_keeps_group_rules():
    fleet = bench_fleet.generate_fleet(400, seed=5)
    ops = bench_trace.generate_trace(fleet, 400, seed=8)
    specs = [op["spec"] for op in ops if op["op"] == "select"]
    extra = [s["flavor"]["extra_specs"] for s in specs]
    assert {"small", "large", "2MB", "1GB"} <= {e.get("hw:mem_page_size") for e in extra}
    assert {"1", "2"} <= {e.get("hw:numa_nodes") for e in extra}
    assert {"required", "preferred", "legacy"} <= {
        e.get("hw:pci_numa_affinity_policy") for e in extra}
    rules: dict[str, set] = collections.defaultdict(set)
    for s in specs:
        if s.get("instance_group"):
            g = s["instance_group"]
            rules[g["uuid"]].add((g["policy"], (g.get("rules") or {}).get(
                "max_server_per_host")))
    assert all(len(v) == 1 for v in rules.values())      # one policy and rule per group
    for uuid, g in fleet.groups.items():
        if uuid in rules:
            assert rules[uuid] == {(g["policy"], g["max_server_per_host"])}
    assert any(m == 2 for v in rules.values() for _, m in v)


def test_tiny_fleet_and_trace_replay_cold_and_valid(tiny, tmp_path):
    bdb, fleet, ops = tiny
    path = str(tmp_path / "trace.jsonl")
    bench_trace.dump(ops, path)
    assert bench_trace.load(path) == ops
    data = bench_replay.run_cold(bdb.url, path, str(tmp_path))
    records = data["records"]
    assert [r["i"] for r in records] == [op["i"] for op in ops]   # nothing dropped
    assert all(r["ms"] > 0 for r in records)
    assert not [r for r in records if r["outcome"] == "error"]
    summary = bench_replay.summarize(records)
    assert set(summary) == {"all requests"} | set(bench_trace.KINDS)
    assert summary["all requests"]["n"] == sum(op["op"] == "select" for op in ops)
    placed = [r for r in records if r["outcome"] == "placed"]
    assert len(placed) > len(records) // 2
    exp = bench_check.Expectations.from_replay(bench_trace.group_policies(fleet, ops), ops,
                                               records)
    assert exp.placed
    assert bench_check.check(bdb.db, exp) == []
    # the claims were written: every placed trace instance is a consumer
    with bdb.db.reader_connection() as conn:
        have = {r[0] for r in conn.execute(sa.select(_cons.c.instance_uuid))}
    assert exp.placed <= have


def test_burst_keeps_hard_group_policies(tiny, conf):
    bdb, fleet, _ = tiny
    result = bench_replay.burst(bdb.url, threads=8)
    outcomes = collections.Counter((r["kind"], r["outcome"]) for r in result["records"])
    assert outcomes[("burst-anti-affinity", "placed")] == 8
    assert not [r for r in result["records"] if r["outcome"] == "error"]
    exp = bench_check.Expectations.from_replay(result["groups"], result["ops"],
                                               result["records"])
    assert bench_check.check(bdb.db, exp) == []


def _node(db, **where):
    with db.reader_connection() as conn:
        q = sa.select(_cn)
        for k, v in where.items():
            q = q.where(_cn.c[k] == v)
        return conn.execute(q.limit(1)).mappings().first()


def _root(conn, node_id: int) -> int:
    return conn.execute(sa.select(_rp.c.id).where(_rp.c.compute_node_id == node_id,
                                                  _rp.c.parent_id.is_(None))).scalar_one()


def _insert(db, node_id: int, uuid: str, vcpus: int, memory_mb: int = 512,
            numa_cells: str | None = None, group: str | None = None) -> None:
    """A consumer written behind the claims' back (no capacity check): its
    allocations, the inventories' ``used`` and the node's running count."""
    with db.writer_connection() as conn:
        root = _root(conn, node_id)
        consumer = conn.execute(sa.insert(_cons).values(
            uuid=uuid, instance_uuid=uuid, compute_node_id=node_id, numa_cells=numa_cells,
            instance_group=group_key(None, group), created_at=models.utcnow())
        ).inserted_primary_key[0]
        for rc, amount in ((VCPU, vcpus), (MEMORY_MB, memory_mb)):
            conn.execute(sa.insert(_alloc).values(consumer_id=consumer, provider_id=root,
                                                  resource_class=rc, amount=amount))
            conn.execute(sa.update(_inv).where(
                _inv.c.provider_id == root, _inv.c.resource_class == rc).values(
                used=_inv.c.used + amount))
        conn.execute(sa.update(_cn).where(_cn.c.id == node_id).values(
            running_vms=_cn.c.running_vms + 1))


def test_checker_reports_an_injected_overcommit(tiny):
    bdb, _, _ = tiny
    assert bench_check.check(bdb.db) == []
    node = _node(bdb.db, disabled=False)
    with bdb.db.reader_connection() as conn:
        inv = conn.execute(sa.select(_inv).where(
            _inv.c.provider_id == _root(conn, node["id"]), _inv.c.resource_class == VCPU)
        ).mappings().one()
    limit = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
    _insert(bdb.db, node["id"], "00000000-0000-4000-8000-000000000001",
            int(limit - inv["used"]) + 1)
    found = bench_check.check(bdb.db)
    assert any(f.startswith(f"{node['host']}: VCPU used") and "> limit" in f
               for f in found), found


def test_checker_reports_double_pinning_group_and_zone_violations(tiny):
    bdb, fleet, _ = tiny
    pinned = next(c for c in fleet.consumers if c["numa_cells"])
    host = next(n["host"] for n in fleet.nodes if n["id"] == pinned["compute_node_id"])
    _insert(bdb.db, pinned["compute_node_id"], "00000000-0000-4000-8000-000000000002", 1,
            numa_cells=pinned["numa_cells"])
    group = "00000000-0000-4000-8000-0000000000aa"
    other = next(n for n in fleet.nodes if n["id"] != pinned["compute_node_id"]
                 and not n["disabled"])
    for k in range(2):
        _insert(bdb.db, other["id"], f"00000000-0000-4000-8000-00000000010{k}", 1, group=group)
    zone_of = {m["aggregate_id"]: m["value"] for m in fleet.aggregate_metadata
               if m["key"] == "availability_zone"}
    in_zone = next(zone_of[h["aggregate_id"]] for h in fleet.aggregate_hosts
                   if h["host"] == other["host"] and h["aggregate_id"] in zone_of)
    wrong = next(z for z in bench_fleet.AZS if z != in_zone)
    exp = bench_check.Expectations(
        groups={group: ("anti-affinity", None)},
        specs={"00000000-0000-4000-8000-000000000100": {"availability_zone": wrong}},
        placed={"00000000-0000-4000-8000-000000000100"},
        released={"00000000-0000-4000-8000-000000000101"})
    found = bench_check.check(bdb.db, exp)
    assert any(f.startswith(f"{host}: CPU") and "pinned by" in f for f in found), found
    assert any(f.startswith(f"anti-affinity group {group} has 2 members") for f in found)
    assert any(f"asked for zone {wrong}" in f for f in found)
    assert any("was released but still has an allocation" in f for f in found)


def test_run_quick_prints_realistic_first_and_passes(tmp_path, capsys, conf):
    out = tmp_path / "bench.json"
    rc = bench_run.main(["--quick", "--backends", "sqlite", "--sizes", "60",
                         "--trace-size", "30", "--burst-threads", "4", "--iterations", "2",
                         "--cases", "plain,pinned", "--json", str(out),
                         "--workdir", str(tmp_path / "work")])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert text.index("REALISTIC") < text.index("STEADY STATE")
    doc = json.loads(out.read_text())
    assert doc["realistic"]["violations"] == [] and doc["realistic"]["errors"] == []
    kinds = {r["kind"] for r in doc["realistic"]["rows"] if r["mode"] == "in-process cold"}
    assert "all requests" in kinds and "release" in kinds
    assert any(r["key"] == "inproc.plain.p50_ms" for r in doc["steady"]["rows"])
    assert (tmp_path / "work" / "trace-60-42.jsonl").exists()      # --workdir is kept
