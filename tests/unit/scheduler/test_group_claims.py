"""Hard server-group policies hold across schedulers with stale caches.

Two schedulers share one database; the second never refreshes on its own
(its cache is stale). Anti-affinity counts members per *host*, so a host with
two nodes lets a stale scheduler pick the other node without any generation
conflict: only the claim transaction's group check can refuse it. Affinity
likewise: a stale scheduler that has not seen the first member would start
the group elsewhere.
"""
from __future__ import annotations

import collections
import threading

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import claims, models
from db import hosts as db_hosts
from scheduler import exception, simulate
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler, group_key
from scheduler.host_manager import HostManager

GROUP = "6a1e0a10-0000-4000-8000-000000000001"
#: What the members of GROUP (requests without a project) are stored under.
STORED = group_key(None, GROUP)


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    c.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                       "ServerGroupAntiAffinityFilter",
                                       "ServerGroupAffinityFilter"], group="filter_scheduler")
    c.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    yield c
    c.clear_override("enabled_filters", group="filter_scheduler")
    c.clear_override("weight_classes", group="filter_scheduler")


def _fleet(db, nodes_per_host: dict[str, int], memory_mb: int = 65536) -> None:
    """Hosts with several nodes each (imported one per host, then renamed)."""
    hosts = [{"host": f"{h}--{i}", "node": f"{h}-node{i}", "vcpus": 64,
              "memory_mb": memory_mb - 1024 * i, "local_gb": 1000}
             for h, n in nodes_per_host.items() for i in range(n)]
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": hosts}))
    cn = models.ComputeNode.__table__
    with db.writer_connection() as conn:
        for h, n in nodes_per_host.items():
            for i in range(n):
                conn.execute(sa.update(cn).where(cn.c.host == f"{h}--{i}").values(host=h))


def _stale(db, conf) -> FilterScheduler:
    """A scheduler whose cache is loaded once and then never refreshed by itself."""
    s = FilterScheduler(HostManager(db, conf), conf)
    s.host_manager.refresh()
    s.host_manager.refresh = lambda: None
    return s


def _req(sched, policy: str, force_nodes=(), **rules):
    group = {"uuid": GROUP, "policy": policy}
    if rules:
        group["rules"] = rules
    return sched.parse_request({"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 0},
                                "instance_group": group, "force_nodes": list(force_nodes)})


def _members_per_host(db) -> collections.Counter:
    alloc, cn = models.Consumer.__table__, models.ComputeNode.__table__
    with db.reader_connection() as conn:
        rows = conn.execute(sa.select(cn.c.host).select_from(
            alloc.join(cn, cn.c.id == alloc.c.compute_node_id))
            .where(alloc.c.instance_group == STORED)).all()
    return collections.Counter(r[0] for r in rows)


def test_anti_affinity_holds_across_stale_schedulers(any_db, conf):
    _fleet(any_db, {"x": 2, "y": 1})
    s1, s2 = _stale(any_db, conf), _stale(any_db, conf)
    first = s1.select_destinations(_req(s1, "anti-affinity", ["x-node1"]))[0][0]
    assert first.host == "x" and first.node == "x-node1"
    # s2 has not seen it: its best candidate is x's other node (most free RAM),
    # with no generation conflict there. Only the claim's group check can
    # refuse it; then s2 re-reads the group and places on y.
    second = s2.select_destinations(_req(s2, "anti-affinity"))[0][0]
    assert second.host == "y"
    assert _members_per_host(any_db) == {"x": 1, "y": 1}
    with pytest.raises(exception.NoValidHost):
        _stale(any_db, conf).select_destinations(_req(s1, "anti-affinity"))
    assert simulate.check_invariants(any_db) == []


def test_max_server_per_host_holds_across_stale_schedulers(any_db, conf):
    _fleet(any_db, {"x": 3, "y": 1})
    schedulers = [_stale(any_db, conf) for _ in range(3)]
    for s, nodes in zip(schedulers, (["x-node2"], ["x-node1"], []), strict=True):
        s.select_destinations(_req(s, "anti-affinity", nodes, max_server_per_host=2))
    # The third saw no member and took x-node0 first: refused by the claim.
    assert _members_per_host(any_db) == {"x": 2, "y": 1}


def test_affinity_holds_across_stale_schedulers(any_db, conf):
    _fleet(any_db, {"x": 1, "y": 1})
    s1, s2 = _stale(any_db, conf), _stale(any_db, conf)
    s1.select_destinations(s1.parse_request({
        "flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 0},
        "instance_group": {"uuid": GROUP, "policy": "affinity"},
        "force_hosts": ["y"]}))
    # s2 never saw that member: its cache says the group is empty and x has
    # the most free RAM. The claim on x finds the member on y, s2 re-reads the
    # group and follows it to y.
    second = s2.select_destinations(_req(s2, "affinity"))[0][0]
    assert second.host == "y"
    assert _members_per_host(any_db) == {"y": 2}


def test_group_conflict_refusal_is_typed_and_names_the_group(any_db, conf):
    _fleet(any_db, {"x": 2})
    s = FilterScheduler(HostManager(any_db, conf), conf)
    s.select_destinations(_req(s, "anti-affinity"))
    spec = _req(s, "anti-affinity")
    node = next(h for h in s.host_manager.host_states() if not h.instances)
    with pytest.raises(claims.GroupPolicyConflict, match=STORED):
        claims.claim(any_db, claims.ClaimRecord(
            instance_uuid="6a1e0a10-0000-4000-8000-0000000000ff", node_id=node.node_id,
            seen_generation=node.generation, items=((node.providers[0][0], "VCPU", 1),),
            instance_group=STORED, group_policy="anti-affinity", host="x"))
    assert spec.instance_group.uuid == GROUP
    assert sum(_members_per_host(any_db).values()) == 1     # nothing was written


@pytest.mark.parametrize("policy", ["anti-affinity", "affinity"])
def test_concurrent_stale_schedulers_never_break_the_policy(any_db, conf, policy):
    """Four schedulers in threads, caches loaded before any member existed."""
    if any_db.dialect == "sqlite" and policy == "affinity":
        pytest.skip("one SQLite writer at a time: covered on MariaDB")
    _fleet(any_db, {f"h{i}": 2 for i in range(6)})
    schedulers = [_stale(any_db, conf) for _ in range(4)]
    errors: list[BaseException] = []
    placed: list[str] = []
    lock = threading.Lock()

    def run(s: FilterScheduler) -> None:
        for _ in range(2):
            try:
                sel = s.select_destinations(_req(s, policy))
                with lock:
                    placed.append(sel[0][0].host)
            except exception.NoValidHost:
                pass
            except BaseException as e:      # pragma: no cover - reported below
                errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    members = _members_per_host(any_db)
    assert sum(members.values()) == len(placed) > 0
    if policy == "anti-affinity":
        assert max(members.values()) == 1
    else:
        assert len(members) == 1
    assert simulate.check_invariants(any_db) == []
