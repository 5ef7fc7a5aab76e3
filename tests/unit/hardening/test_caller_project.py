"""The RPC endpoint checks the caller's project, from its request context, before
anything else: a request is placed for a project the caller may act for, an
instance of another project is answered as one that does not exist (the same
reply, by the same queries), server groups are their project's, and a context
without a project is no project's, never every project's."""
from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from db import models
from scheduler import exception
from tests.unit.hardening import inproc
from tests.unit.hardening.test_policy import Caller

HOSTS = [{"host": f"cp-{i}", "vcpus": 4, "memory_mb": 8192, "local_gb": 100,
          "cpu_allocation_ratio": 1.0} for i in range(2)]
FLAVOR = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}


@pytest.fixture
def world(sqlite_db):
    conf = inproc.configure()
    endpoint = inproc.manager(sqlite_db, conf).endpoint
    service = Caller(endpoint, roles=["service"])
    for host in HOSTS:
        service.report_compute_node(host)
    yield endpoint, sqlite_db
    inproc.unconfigure(conf)


def member(endpoint, project):
    return Caller(endpoint, project_id=project, roles=["member"])


def consumers(db) -> dict[str, tuple]:
    c = models.Consumer.__table__.c
    with db.reader_connection() as conn:
        return {r.uuid: (r.compute_node_id, r.pending, r.project_id, r.instance_group)
                for r in conn.execute(sa.select(c.uuid, c.compute_node_id, c.pending,
                                                c.project_id, c.instance_group))}


@pytest.mark.parametrize("pending", [False, True])
def test_another_projects_exact_request_gets_nothing_of_it(world, pending):
    """P2 sends P1's request (project p1) with P1's instance UUID: refused by the
    rule, not answered with P1's host; P1's pending claim is neither confirmed
    nor released."""
    endpoint, db = world
    spec = {"flavor": FLAVOR, "project_id": "p1"}
    mine = str(uuid.uuid4())
    placed = member(endpoint, "p1").select_destinations(spec, [mine], pending=True)
    before = consumers(db)
    assert before[mine][1] is True
    p2 = member(endpoint, "p2")
    with pytest.raises(exception.Forbidden) as caught:
        p2.select_destinations(spec, [mine], pending=pending)
    assert caught.value.rule == "berth:select_destinations"
    assert placed[0][0]["host"] not in str(caught.value) and mine not in str(caught.value)
    with pytest.raises(exception.Forbidden):
        p2.select_destinations(spec, [mine, str(uuid.uuid4())])
    assert consumers(db) == before


def test_a_uuid_held_in_another_project_reads_as_one_held_in_ones_own(world):
    """With its own project's request, P2 naming P1's instance gets the words it
    gets for a UUID of its own held by another of its requests."""
    endpoint, db = world
    theirs = str(uuid.uuid4())
    member(endpoint, "p1").select_destinations({"flavor": FLAVOR}, [theirs])
    p2 = member(endpoint, "p2")
    own = str(uuid.uuid4())
    p2.select_destinations({"flavor": FLAVOR}, [own])
    before = consumers(db)
    answers = []
    for held in (theirs, own):
        with pytest.raises(exception.InvalidRequest) as caught:
            p2.select_destinations({"flavor": dict(FLAVOR, memory_mb=1024)}, [held])
        answers.append((caught.value.field, caught.value.reason.replace(held, "UUID")))
    assert answers[0] == answers[1] == ("instance_uuids", "already allocated: UUID")
    assert consumers(db) == before


def test_a_request_without_a_project_is_the_callers(world):
    endpoint, db = world
    p2 = member(endpoint, "p2")
    instance = p2.select_destinations({"flavor": FLAVOR})[0][0]["instance_uuid"]
    assert consumers(db)[instance][2] == "p2"
    assert member(endpoint, "p1").release(instance) is False
    assert p2.release(instance) is True


def test_an_operator_places_for_any_project(world):
    endpoint, db = world
    admin = Caller(endpoint, project_id="ops", roles=["admin"])
    instance = admin.select_destinations({"flavor": FLAVOR, "project_id": "p1"})[0][0]
    assert consumers(db)[instance["instance_uuid"]][2] == "p1"
    assert member(endpoint, "p1").release(instance["instance_uuid"]) is True


def test_another_projects_group_uuid_shows_nothing_of_where_it_runs(world):
    """P1's anti-affinity group fills both hosts. P2 naming the group's UUID
    under P1's project is refused; under its own, the group is P2's own,
    empty one: placed, and no reason names a host of P1's members."""
    endpoint, db = world
    group = {"uuid": str(uuid.uuid4()), "policy": "anti-affinity"}
    p1 = member(endpoint, "p1")
    p1.select_destinations({"flavor": FLAVOR, "num_instances": 2, "instance_group": group})
    with pytest.raises(exception.NoValidHost):
        p1.select_destinations({"flavor": FLAVOR, "instance_group": group}, dry_run=True)
    p2 = member(endpoint, "p2")
    with pytest.raises(exception.Forbidden) as caught:
        p2.select_destinations({"flavor": FLAVOR, "project_id": "p1",
                                "instance_group": group}, dry_run=True)
    assert "cp-" not in str(caught.value)
    assert p2.select_destinations({"flavor": FLAVOR, "instance_group": group},
                                  dry_run=True)[0][0]["host"].startswith("cp-")


@pytest.mark.parametrize("context", [
    {"project_id": None, "roles": ["member"]},
    {"project_id": "None", "roles": ["member"]},
    {"project_id": "", "roles": ["member"]},
])
def test_a_context_without_a_project_owns_nothing(world, context):
    """An instance stored without a project (placed by a service context that
    has none) is no project's: a member context with no project, "None" or ""
    can neither release, reschedule nor confirm it, and places nothing."""
    endpoint, db = world
    service = Caller(endpoint, roles=["service"])
    orphan = service.select_destinations({"flavor": FLAVOR})[0][0]
    assert consumers(db)[orphan["instance_uuid"]][2] is None
    before = consumers(db)
    caller = Caller(endpoint, **context)
    for call in (lambda: caller.release(orphan["instance_uuid"]),
                 lambda: caller.reschedule(orphan["instance_uuid"], orphan["host"]),
                 lambda: caller.confirm([orphan["instance_uuid"]])):
        try:
            answer = call()
        except (exception.Forbidden, exception.NotFound):
            continue
        assert answer in (False, {"confirmed": [], "unknown": [orphan["instance_uuid"]]})
    if context["project_id"] != "None":
        with pytest.raises(exception.Forbidden):
            caller.select_destinations({"flavor": FLAVOR}, dry_run=True)
    assert consumers(db) == before


def test_confirm_answers_another_projects_instance_as_an_unknown_one(world):
    endpoint, db = world
    theirs = member(endpoint, "p1").select_destinations(
        {"flavor": FLAVOR}, pending=True)[0][0]["instance_uuid"]
    nobody = str(uuid.uuid4())
    p2 = member(endpoint, "p2")
    before = consumers(db)
    assert p2.confirm([theirs, nobody]) == {"confirmed": [], "unknown": [theirs, nobody]}
    assert p2.confirm([nobody, theirs]) == {"confirmed": [], "unknown": [nobody, theirs]}
    assert consumers(db) == before


class Statements:
    """The SQL statements a block runs (parameters left out)."""

    def __init__(self, db) -> None:
        self.engine = db.engine
        self.seen: list[str] = []

    def _record(self, conn, cursor, statement, *args):
        self.seen.append(statement)

    def __enter__(self):
        self.seen = []
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc):
        sa.event.remove(self.engine, "before_cursor_execute", self._record)


def _answer(call, instance):
    try:
        return ("returned", repr(call(instance)).replace(instance, "UUID"))
    except exception.BerthError as e:
        return (type(e).__name__, str(e).replace(instance, "UUID"))


@pytest.mark.parametrize("method, args", [
    ("release", ()), ("reschedule", ("cp-0",)), ("confirm", ()),
    ("confirm_move", (str(uuid.uuid4()),)), ("revert_move", (str(uuid.uuid4()),)),
    ("move_instance", ()),
])
def test_another_projects_instance_costs_what_an_unknown_one_does(world, monkeypatch,
                                                                   method, args):
    """The same reply, by the same SQL statements and as many policy rule
    evaluations (each costs about half a millisecond): another project's live
    instance and a UUID nobody holds take the same time within noise."""
    endpoint, db = world
    rules = []
    enforce = type(endpoint.policy).allows
    monkeypatch.setattr(type(endpoint.policy), "allows",
                        lambda self, *a, **kw: rules.append(a[1]) or enforce(self, *a, **kw))
    theirs = member(endpoint, "p1").select_destinations(
        {"flavor": FLAVOR}, pending=True)[0][0]["instance_uuid"]
    p2 = member(endpoint, "p2")
    calls = {
        "release": lambda u: p2.release(u),
        "reschedule": lambda u: p2.reschedule(u, *args),
        "confirm": lambda u: p2.confirm([u]),
        "confirm_move": lambda u: p2.confirm_move(u, *args),
        "revert_move": lambda u: p2.revert_move(u, *args),
        "move_instance": lambda u: p2.move_instance(
            {"instance_uuid": u, "kind": "migrate", "migration_uuid": str(uuid.uuid4())}),
    }
    before = consumers(db)
    seen = []
    for instance in (theirs, str(uuid.uuid4())):
        rules.clear()
        with Statements(db) as statements:
            answer = _answer(calls[method], instance)
        seen.append((answer, statements.seen, list(rules)))
    assert seen[0] == seen[1]
    assert consumers(db) == before
