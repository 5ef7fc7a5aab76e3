"""Moves through the real daemon (MariaDB, RabbitMQ): every kind, two daemons
racing for one instance, lost replies at every step, and a randomized soak of
boots, moves, confirms, reverts, evacuations and releases from concurrent
clients that ends with the ledger exactly what the clients hold.

``BERTH_TEST_MOVES_SOAK_S`` sets the soak's length (default 45 s)."""
from __future__ import annotations

import collections
import os
import random
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from db import models
from scheduler import exception
from tests.functional.daemon import Daemon

FLEET = {"hosts": [{"host": f"mv{i:02d}", "vcpus": 16, "memory_mb": 32768, "local_gb": 400,
                    "cpu_allocation_ratio": 1.0} for i in range(10)]}
SMALL = {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}
BIG = {"vcpus": 4, "memory_mb": 4096, "root_gb": 20}
CONFIG = """
[filter_scheduler]
enabled_filters = ComputeFilter,RamFilter,CoreFilter,DiskFilter
"""


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    first = Daemon(tmp_path_factory.mktemp("moves"), workers=2, fleet=FLEET, extra=CONFIG)
    second = Daemon(tmp_path_factory.mktemp("moves2"), workers=1, share_with=first,
                    extra=CONFIG)
    try:
        first.start()
        second.start()
        yield first, second
        assert second.stop() == 0, second.log_tail()
        assert first.stop() == 0, first.log_tail()
    finally:
        second.close()
        first.close()


def consumers(daemon) -> dict[str, tuple[str, str, str]]:
    """consumer uuid -> (type, instance, host)."""
    c, n = models.Consumer, models.ComputeNode
    with daemon.db.reader_connection() as conn:
        return {u: (t, i, h) for u, t, i, h in conn.execute(
            sa.select(c.uuid, c.consumer_type, c.instance_uuid, n.host)
            .join(n, n.id == c.compute_node_id))}


def boot(api, flavor=SMALL, **kw):
    return api.select_destinations(None, {"flavor": flavor, **kw})[0][0]


def test_every_kind_of_move(daemons):
    d, _ = daemons
    api = d.api()
    vm = boot(api)
    source = vm["host"]
    resized = api.move_instance(None, {"instance_uuid": vm["instance_uuid"], "kind": "resize",
                                       "flavor": BIG})[0]
    assert resized["host"] != source and resized["resources"]["VCPU"] == 4
    held = consumers(d)
    assert held[resized["migration_uuid"]] == ("migration", vm["instance_uuid"], source)
    assert held[vm["instance_uuid"]] == ("instance", vm["instance_uuid"], resized["host"])
    # lost reply: the same move again answers the same
    again = api.move_instance(None, {"instance_uuid": vm["instance_uuid"], "kind": "resize",
                                     "flavor": BIG,
                                     "migration_uuid": resized["migration_uuid"]})[0]
    assert again["host"] == resized["host"] and consumers(d) == held
    assert api.revert_move(None, vm["instance_uuid"], resized["migration_uuid"]) is True
    assert api.revert_move(None, vm["instance_uuid"], resized["migration_uuid"]) is True
    assert consumers(d)[vm["instance_uuid"]] == ("instance", vm["instance_uuid"], source)

    there = "mv09" if source != "mv09" else "mv08"       # not where it runs
    migrated = api.move_instance(None, {"instance_uuid": vm["instance_uuid"],
                                        "kind": "live-migrate", "destination": there})[0]
    assert migrated["host"] == there
    with pytest.raises(exception.Conflict):
        api.move_instance(None, {"instance_uuid": vm["instance_uuid"], "kind": "migrate"})
    assert api.confirm_move(None, vm["instance_uuid"], migrated["migration_uuid"]) is True
    with pytest.raises(exception.Conflict):
        api.revert_move(None, vm["instance_uuid"], migrated["migration_uuid"])

    rebuilt = api.move_instance(None, {"instance_uuid": vm["instance_uuid"], "kind": "rebuild",
                                       "image": {"properties": {}}})[0]
    assert rebuilt["host"] == there
    with pytest.raises(exception.InvalidRequest):        # its host is up
        api.move_instance(None, {"instance_uuid": vm["instance_uuid"], "kind": "evacuate"})
    there_node = next(h for h in FLEET["hosts"] if h["host"] == there)
    api.report_compute_node(None, dict(there_node, disabled=True))
    evacuated = api.move_instance(None, {"instance_uuid": vm["instance_uuid"],
                                         "kind": "evacuate"})[0]
    assert evacuated["host"] != there
    assert consumers(d)[evacuated["migration_uuid"]][0] == "evacuation"
    api.report_compute_node(None, dict(there_node, disabled=False))
    assert api.confirm_move(None, vm["instance_uuid"], evacuated["migration_uuid"]) is True
    assert api.release(None, vm["instance_uuid"]) is True
    unshelved = api.move_instance(None, {"instance_uuid": vm["instance_uuid"],
                                         "kind": "unshelve",
                                         "request_spec": {"flavor": SMALL}})[0]
    assert consumers(d)[vm["instance_uuid"]][2] == unshelved["host"]
    assert api.release(None, vm["instance_uuid"]) is True
    d.assert_consistent()


def test_two_daemons_move_one_instance_at_once(daemons):
    d1, d2 = daemons
    vm = boot(d1.api())
    results: list = []
    barrier = threading.Barrier(2)

    def move(api):
        barrier.wait()
        try:
            results.append(api.move_instance(None, {"instance_uuid": vm["instance_uuid"],
                                                    "kind": "migrate"})[0])
        except exception.Conflict as e:
            results.append(e)

    threads = [threading.Thread(target=move, args=(d.api(),)) for d in (d1, d2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    made = [r for r in results if isinstance(r, dict)]
    assert len(results) == 2 and len(made) == 1, results
    holders = [u for u, (t, i, _h) in consumers(d1).items() if t == "migration"
               and i == vm["instance_uuid"]]
    assert holders == [made[0]["migration_uuid"]]
    assert d1.api().confirm_move(None, vm["instance_uuid"], made[0]["migration_uuid"])
    assert d1.api().release(None, vm["instance_uuid"])
    d1.assert_consistent()


def test_randomized_soak_ends_with_exactly_what_clients_hold(daemons):
    """Eight clients, each with its own instances, for the soak's length: boots,
    resizes, migrations (cold, live, to a destination), confirms, reverts,
    evacuations (a host disabled a while) and releases; one call in eight has
    its reply "lost" (it is sent again with the same ids, and must answer the
    same). At the end: no over-commit, usage = allocations, every consumer is
    an instance a client holds or the source of a move a client has in
    progress, and no instance holds more than one destination."""
    d1, d2 = daemons
    seconds = float(os.environ.get("BERTH_TEST_MOVES_SOAK_S", "45"))
    rng_seed = int(os.environ.get("BERTH_TEST_SEED", "7"))
    stop = time.monotonic() + seconds
    counts: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    lock = threading.Lock()
    held: dict[str, str | None] = {}        # instance -> its move in progress (or None)
    problems: list[str] = []

    def tally(what: str, error: str | None = None) -> None:
        with lock:
            counts[what] += 1
            if error:
                errors[f"{what}: {error}"] += 1

    def client(index: int) -> None:
        rng = random.Random(rng_seed * 100 + index)
        api = (d1 if index % 2 else d2).api()
        mine: dict[str, str | None] = {}
        while time.monotonic() < stop:
            op = rng.choices(["boot", "move", "end", "release"], [3, 4, 4, 2])[0]
            if op == "boot" and len(mine) >= 12:
                op = "release"          # a steady state: the fleet never just fills up
            if not mine:
                op = "boot"
            try:
                if op == "boot":
                    u = str(uuid.uuid4())
                    spec = {"flavor": rng.choice([SMALL, BIG])}
                    first = api.select_destinations(None, spec, instance_uuids=[u])[0][0]
                    if rng.random() < 0.125:        # lost reply: sent again
                        again = api.select_destinations(None, spec, instance_uuids=[u])
                        counts_lost("boot", first, again[0][0])
                    mine[u] = None
                    tally("boot")
                elif op == "move":
                    idle = [u for u, m in mine.items() if m is None]
                    if not idle:
                        continue
                    u = rng.choice(idle)
                    kind = rng.choice(["resize", "migrate", "live-migrate"])
                    move = {"instance_uuid": u, "kind": kind,
                            "migration_uuid": str(uuid.uuid4())}
                    if kind == "resize":
                        move["flavor"] = rng.choice([SMALL, BIG])
                    sel = api.move_instance(None, move)[0]
                    if rng.random() < 0.125:
                        again = api.move_instance(None, move)[0]
                        counts_lost("move", sel, again)
                    mine[u] = move["migration_uuid"]
                    tally(kind)
                elif op == "end":
                    moving = [u for u, m in mine.items() if m is not None]
                    if not moving:
                        continue
                    u = rng.choice(moving)
                    how = rng.choice(["confirm_move", "revert_move"])
                    assert getattr(api, how)(None, u, mine[u]) is True
                    if rng.random() < 0.125:
                        assert getattr(api, how)(None, u, mine[u]) is True     # lost reply
                    mine[u] = None
                    tally(how)
                else:
                    idle = [u for u, m in mine.items() if m is None]
                    if not idle:
                        continue
                    u = rng.choice(idle)
                    assert api.release(None, u) is True
                    del mine[u]
                    tally("release")
            except (exception.NoValidHost, exception.Conflict) as e:
                # no room; or the evacuator moved the instance first
                tally(op, type(e).__name__)
            except Exception as e:      # noqa: BLE001 - counted and failed below
                tally(op, type(e).__name__)
                with lock:
                    problems.append(f"client {index} {op}: {type(e).__name__}: {e}")
        with lock:
            held.update(mine)

    def counts_lost(what, first, again) -> None:
        if first["host"] != again["host"] or first["instance_uuid"] != again["instance_uuid"]:
            with lock:
                problems.append(f"{what} sent again answered {again['host']}, first "
                                f"{first['host']}")
        tally(f"{what} sent again")

    def evacuator() -> None:
        try:
            evacuate_now_and_then()
        except Exception as e:      # noqa: BLE001 - failed below
            with lock:
                problems.append(f"evacuator: {type(e).__name__}: {e}")

    def evacuate_now_and_then() -> None:
        """Now and then a host goes down: its idle instances are evacuated, then
        it comes back (its evacuations' holds released by the reaper or confirmed)."""
        rng = random.Random(rng_seed)
        api = d1.api()
        while time.monotonic() < stop - 5:
            time.sleep(rng.uniform(3, 6))
            host = rng.choice(FLEET["hosts"])
            api.report_compute_node(None, dict(host, disabled=True))
            on_it = [i for u, (t, i, h) in consumers(d1).items()
                     if t == "instance" and h == host["host"]]
            for instance in on_it[:3]:
                try:
                    sel = api.move_instance(None, {"instance_uuid": instance,
                                                   "kind": "evacuate"})[0]
                    assert api.confirm_move(None, instance, sel["migration_uuid"]) is True
                    tally("evacuate")
                except (exception.NoValidHost, exception.Conflict, exception.NotFound) as e:
                    tally("evacuate", type(e).__name__)     # a client was quicker
                except exception.InvalidRequest as e:
                    # a client moved it off the disabled host meanwhile: its host
                    # is up and enabled, so evacuating it is refused by name
                    if e.field != "move.kind":
                        raise
                    tally("evacuate", "moved meanwhile")
            api.report_compute_node(None, dict(host, disabled=False))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=evacuator))
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 300)
    print(f"\nmoves soak {seconds:g} s: {dict(sorted(counts.items()))}; "
          f"refused: {dict(sorted(errors.items()))}")
    assert not problems, problems[:10]
    d1.assert_consistent()
    rows = consumers(d1)
    instances = {u: h for u, (t, _i, h) in rows.items() if t == "instance"}
    holders = {u: i for u, (t, i, _h) in rows.items() if t != "instance"}
    assert set(instances) == set(held), (
        f"consumers no client holds: {sorted(set(instances) - set(held))}; "
        f"held by a client, not in the ledger: {sorted(set(held) - set(instances))}")
    moving = {m: u for u, m in held.items() if m is not None}
    assert holders == moving, "a source held without a move in progress, or the reverse"
    assert sum(counts.values()) > 100
