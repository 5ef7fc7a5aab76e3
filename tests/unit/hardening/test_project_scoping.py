"""The scheduler's retry path and server groups stay within a project: a request
of another project naming an instance UUID gets neither its placement nor a
confirm or release of its claim, and a server-group UUID of another project
shows none of that group's members (nor where they run)."""
from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler, group_key
from scheduler.host_manager import HostManager

FLEET = {"hosts": [{"host": f"scoped-host-{i}", "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
                    "cpu_allocation_ratio": 1.0} for i in range(2)]}
FLAVOR = {"vcpus": 8, "memory_mb": 2048, "root_gb": 10}


@pytest.fixture
def sched(sqlite_db):
    conf = cfg.CONF
    conf([], project="berth")
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(FLEET))
    return FilterScheduler(HostManager(sqlite_db, conf), conf)


def _spec(sched, project, **kw):
    return sched.parse_request(dict({"flavor": FLAVOR, "project_id": project}, **kw))


def _allocations(db) -> dict[str, tuple]:
    c = models.Consumer.__table__.c
    with db.reader_connection() as conn:
        return {r.instance_uuid: (r.compute_node_id, r.pending, r.project_id)
                for r in conn.execute(sa.select(c.instance_uuid, c.compute_node_id,
                                                c.pending, c.project_id))}


@pytest.mark.parametrize("pending", [True, False])
def test_another_projects_uuid_is_neither_returned_nor_confirmed(sqlite_db, sched, pending):
    mine = str(uuid.uuid4())
    sched.select_destinations(_spec(sched, "p1"), [mine], pending=True)
    before = _allocations(sqlite_db)
    for project in ("p2", None, "None"):
        with pytest.raises(exception.InvalidRequest) as caught:
            sched.select_destinations(_spec(sched, project), [mine], pending=pending)
        assert caught.value.field == "instance_uuids"
        assert caught.value.reason == f"already allocated: {mine}"
        assert "scoped-host" not in str(caught.value)
    assert _allocations(sqlite_db) == before            # still pending, still held


def test_a_failed_retry_of_another_project_releases_nothing(sqlite_db, sched):
    """Both hosts full (p1 holds one instance pending, p3 the other): a request of
    p2 naming p1's instance and a new one finds no room, and p1 keeps its claim."""
    held = str(uuid.uuid4())
    sched.select_destinations(_spec(sched, "p1"), [held], pending=True)
    sched.select_destinations(_spec(sched, "p3"), [str(uuid.uuid4())])
    before = _allocations(sqlite_db)
    with pytest.raises((exception.InvalidRequest, exception.NoValidHost)):
        sched.select_destinations(_spec(sched, "p2", num_instances=2),
                                  [str(uuid.uuid4()), held])
    assert _allocations(sqlite_db) == before


def test_a_group_uuid_of_another_project_shows_none_of_its_members(sqlite_db, sched):
    group = str(uuid.uuid4())
    anti = {"uuid": group, "policy": "anti-affinity"}
    placed = sched.select_destinations(
        _spec(sched, "p1", num_instances=2, flavor=dict(FLAVOR, vcpus=1),
              instance_group=anti))
    assert {p[0].host for p in placed} == {"scoped-host-0", "scoped-host-1"}
    # p1's group is full (one member per host): its own next member has no room.
    with pytest.raises(exception.NoValidHost):
        sched.select_destinations(_spec(sched, "p1", flavor=dict(FLAVOR, vcpus=1),
                                        instance_group=anti), dry_run=True)
    # The same UUID named by p2 is p2's own, empty group: placed, and no reason
    # of p2's ever names where p1's members run.
    other = sched.select_destinations(_spec(sched, "p2", flavor=dict(FLAVOR, vcpus=1),
                                            instance_group=anti))
    assert other[0][0].host in {"scoped-host-0", "scoped-host-1"}
    with sqlite_db.reader_connection() as conn:
        keys = set(conn.execute(sa.select(
            models.Consumer.__table__.c.instance_group).distinct()).scalars())
    assert keys == {group_key("p1", group), group_key("p2", group)}


def test_group_keys_do_not_treat_a_missing_project_as_a_wildcard():
    g = str(uuid.uuid4())
    keys = {group_key(p, g) for p in ("p1", None, "None", "")}
    assert len(keys) == 4
    assert group_key("p1", None) is None
