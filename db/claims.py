"""Persistent claims: one transaction per claim, guarded by the node's generation.

``claim`` adds the consumer's amounts to the inventories it takes from with one
statement over every (provider, class) it asks, guarded by ``db.inventory``'s
rule (``admits``: within the unit limits and (total - reserved) x ratio);
bumps the node's generation with ``UPDATE ... WHERE id = :id AND generation =
:seen`` (compare-and-swap); then inserts the consumer, its allocations rows and
claims PCI device rows (``WHERE status = 'available'``). Any conflict raises
``ClaimConflict`` and the whole transaction rolls back: many schedulers can
never over-commit a node, nor both take its last device.

A member of a server group with a hard policy (``affinity``, ``anti-affinity``
with ``max_server_per_host``) is checked against the group's members in the
same transaction, after taking the group's row lock (``server_groups``), so
schedulers with stale caches can never break the policy either.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import json
from collections.abc import Callable

import sqlalchemy as sa
from oslo_db import exception as db_exc

from db import inventory, models, node_changes, precompiled, preemption, transitions
from db.api import Database, retry_on_deadlock
from db.precompiled import Precompiled

_cn = models.ComputeNode.__table__
_alloc = models.Consumer.__table__          # one row per consumer (instance) on a node
_items = models.Allocation.__table__        # its amounts, per provider and class
_inv = models.ProviderInventory.__table__
_rp = models.ResourceProvider.__table__
_groups = models.ServerGroup.__table__
_specs = models.RequestSpecRow.__table__

HARD_POLICIES = ("affinity", "anti-affinity")


class ClaimConflict(Exception):
    """The node changed under us (generation moved, capacity, or a device went)."""


class DuplicateAllocation(Exception):
    """The consumer already holds an allocation."""


class SourceMoved(Exception):
    """A move's claim found its instance no longer where the move started from
    (released, or moved by another request meanwhile): the move is not made."""


class PreemptionConflict(ClaimConflict):
    """A victim of the claim is no longer preemptible by it (``budget``: the
    node's preemptions per minute are used up)."""

    def __init__(self, message: str, budget: bool = False, zone: str | None = None) -> None:
        super().__init__(message)
        self.budget = budget
        self.zone = zone                 # the budget used up is the zone's


class GroupPolicyConflict(ClaimConflict):
    """The claim would break its server group's hard policy: another scheduler
    placed members the caller's cache does not show yet."""


#: One amount of a claim or release: (provider id, resource class, amount).
Item = tuple[int, str, int]


@dataclasses.dataclass(frozen=True)
class ClaimRecord:
    instance_uuid: str                    # the consumer's uuid (the instance's)
    node_id: int
    seen_generation: int
    items: tuple[Item, ...] = ()          # what it takes, per provider and class
    numa_topology: str | None = None      # the node's topology JSON after the claim
    numa_cells: str | None = None         # fitted guest topology JSON
    pci_picks: tuple = ()                 # ((request_id, PoolKey, count), ...)
    project_id: str | None = None
    user_id: str | None = None
    instance_group: str | None = None
    request_spec: str | None = None       # the request's spec JSON (stored once) ...
    request_spec_id: int | None = None    # ... or its row, stored by an earlier claim
    share_spec: bool = True               # False: on the consumer's own row (one instance)
    group_policy: str | None = None       # enforced when affinity or anti-affinity
    group_max_per_host: int = 1           # anti-affinity: members per host at most
    host: str = ""                        # the node's host name (group policies)
    pending: bool = False                 # held until confirmed (or reaped after claim_ttl)
    consumer_type: str = "instance"
    owner_uuid: str | None = None         # the instance of a migration consumer
    move_from: MoveFrom | None = None     # a move: the instance's source, handed over
    priority: int = 0                     # berth:priority (or the project's default)
    preemptible: bool = False             # berth:preemptible
    victims: preemption.Victims | None = None   # preempted in the same transaction
    image_properties: dict | None = None  # the request's image's (journalled for caches)


@dataclasses.dataclass(frozen=True)
class MoveFrom:
    """What a move's claim does with the instance's place on its source node: the
    instance consumer there becomes ``holder`` (a migration or evacuation
    consumer, ``hold_type``) in the same transaction, keeping its allocations,
    NUMA cells and devices until the move is confirmed or reverted."""

    source_node_id: int
    holder: str
    hold_type: str = "migration"


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    generation: int
    pci_addresses: tuple[str, ...] = ()
    pci_pools: tuple | None = None
    request_spec_id: int | None = None    # pass it to the request's next claims
    at: datetime.datetime | None = None   # the node's updated_at as the claim stamped it


@dataclasses.dataclass(frozen=True)
class Released:
    instance_uuid: str
    node_id: int
    host: str
    amounts: tuple[Item, ...]             # what it gave back, per provider and class
    numa_cells: str | None
    pci_addresses: tuple[str, ...]
    request_spec: str | None
    instance_group: str | None
    generation: int = 0                   # the node's generation after the release
    numa_topology: str | None = None      # the node's topology JSON after, if it changed
    pci_pools: tuple | None = None        # the node's pools after, if devices were freed
    preempted: bool = False               # a preempted consumer: nothing given back
    at: datetime.datetime | None = None   # the node's updated_at as the release stamped it


def _node_update(with_numa: bool, sign: int):
    """The node's UPDATE of a claim (``sign`` +1, compare-and-swap on the
    generation) or a release (-1), built once (bound parameters)."""
    values = {
        "running_vms": _cn.c.running_vms + sign,
        "current_workload": (_cn.c.current_workload + 1 if sign > 0 else
                             sa.case((_cn.c.current_workload > 0,
                                      _cn.c.current_workload - 1), else_=0)),
        "generation": _cn.c.generation + 1,
        "updated_at": sa.bindparam("b_now"),
    }
    if with_numa:
        values["numa_topology"] = sa.bindparam("b_numa")
    where = [_cn.c.id == sa.bindparam("b_id")]
    if sign > 0:
        where += [_cn.c.generation == sa.bindparam("b_seen"), _cn.c.deleted == 0]
    return sa.update(_cn).where(*where).values(**values)


_CLAIM = Precompiled(_node_update(with_numa=False, sign=+1), ("b_id", "b_seen", "b_now"))
_CLAIM_WITH_NUMA = Precompiled(_node_update(with_numa=True, sign=+1),
                               ("b_id", "b_seen", "b_now", "b_numa"))


def _slot(k: int):
    """Item ``k``'s inventory row (bound parameters ``b_p<k>``, ``b_rc<k>``)."""
    return sa.and_(_inv.c.provider_id == sa.bindparam(f"b_p{k}"),
                   _inv.c.resource_class == sa.bindparam(f"b_rc{k}"))


def _amount(k: int):
    return sa.bindparam(f"b_n{k}", type_=sa.Integer)


@functools.lru_cache(maxsize=32)
def _take_statement(n: int):
    """The UPDATE of ``_take`` for ``n`` items, built once per ``n``. Each
    item's slot and amount are one bound parameter object wherever they
    appear: the work of every execution grows with their number."""
    slots = [_slot(k) for k in range(n)]
    amounts = [_amount(k) for k in range(n)]
    return (sa.update(_inv)
            .where(sa.or_(*[slots[k] & inventory.admits(_inv.c.used, amounts[k], _inv.c)
                            for k in range(n)]))
            .values(used=_inv.c.used + sa.case(*[(slots[k], amounts[k])
                                                  for k in range(n)])))


def _summed(items) -> tuple[Item, ...]:
    """Items with one entry per (provider, class): ``_give_back``'s CASE takes
    the first match only."""
    total: dict[tuple[int, str], int] = {}
    for p, rc, n in items:
        total[(p, rc)] = total.get((p, rc), 0) + n
    return tuple((p, rc, n) for (p, rc), n in total.items())


@functools.lru_cache(maxsize=32)
def _give_back_statement(n: int):
    """The UPDATE of ``_give_back`` for ``n`` items, built once per ``n`` (one
    bound parameter object per item's slot and amount, as ``_take_statement``)."""
    slots = [_slot(k) for k in range(n)]
    amount = sa.case(*[(slots[k], _amount(k)) for k in range(n)])
    return (sa.update(_inv)
            .where(sa.or_(*slots))
            .values(used=sa.case((_inv.c.used > amount, _inv.c.used - amount), else_=0)))


def _item_params(items: tuple[Item, ...]) -> dict:
    params = {}
    for k, (p, rc, n) in enumerate(items):
        params[f"b_p{k}"], params[f"b_rc{k}"], params[f"b_n{k}"] = p, rc, n
    return params


@functools.lru_cache(maxsize=32)
def _take_precompiled(n: int) -> Precompiled:
    """``_take_statement(n)`` with its values as the items' (provider, class,
    amount) one after the other."""
    return Precompiled(_take_statement(n),
                       itertools.chain.from_iterable((f"b_p{k}", f"b_rc{k}", f"b_n{k}")
                                                     for k in range(n)))


def _take(conn, items: tuple[Item, ...]) -> int:
    """One UPDATE adding every item to its inventory, where the rule admits it:
    returns the number of items taken."""
    return _take_precompiled(len(items)).execute(
        conn, tuple(itertools.chain.from_iterable(items))).rowcount


@functools.lru_cache(maxsize=32)
def _give_back_precompiled(n: int) -> Precompiled:
    """``_give_back_statement(n)`` with its values as the items' (provider,
    class, amount) one after the other."""
    return Precompiled(_give_back_statement(n),
                       itertools.chain.from_iterable((f"b_p{k}", f"b_rc{k}", f"b_n{k}")
                                                     for k in range(n)))


def _give_back(conn, items: tuple[Item, ...]) -> None:
    """One UPDATE taking every item off its inventory (never below 0)."""
    _give_back_precompiled(len(items)).execute(
        conn, tuple(itertools.chain.from_iterable(items)))


#: The consumer's row as a claim writes it (every column but the preemption's).
_INSERT_CONSUMER = Precompiled(sa.insert(_alloc), (
    "uuid", "consumer_type", "instance_uuid", "compute_node_id", "numa_cells",
    "pci_devices", "project_id", "user_id", "instance_group", "request_spec_id",
    "request_spec", "pending", "created_at", "move_id", "move_state", "priority",
    "preemptible"))
_INSERT_ITEMS = Precompiled(sa.insert(_items),
                            ("consumer_id", "provider_id", "resource_class", "amount"),
                            many=True)


@functools.lru_cache(maxsize=32)
def _insert_items_of_last_consumer(n: int) -> Precompiled:
    """The INSERT of ``n`` allocation rows (provider, class, amount one after
    the other) of the consumer the connection's previous INSERT made
    (``LAST_INSERT_ID()``, MySQL; the same for every row of the statement)."""
    return Precompiled(
        sa.insert(_items).values([
            {"consumer_id": sa.func.last_insert_id(), "provider_id": sa.bindparam(f"b_p{k}"),
             "resource_class": sa.bindparam(f"b_rc{k}"), "amount": _amount(k)}
            for k in range(n)]),
        itertools.chain.from_iterable((f"b_p{k}", f"b_rc{k}", f"b_n{k}") for k in range(n)))


#: A preempting claim: its victims no longer run on the node (stamped as
#: the claim's UPDATE of the node just before).
_VICTIMS_GONE = Precompiled(
    sa.update(_cn).where(_cn.c.id == sa.bindparam("b_id"))
    .values(running_vms=_cn.c.running_vms - sa.bindparam("b_n", type_=sa.Integer),
            updated_at=sa.bindparam("b_now")),
    ("b_n", "b_now", "b_id"))
_INSERT_SPEC = Precompiled(sa.insert(_specs), ("spec", "created_at"))
#: Share-locked: a release that would delete the spec as orphaned (its last
#: allocation gone) waits until this claim's allocation refers to it.
_SPEC_EXISTS = Precompiled(sa.select(_specs.c.id).where(_specs.c.id == sa.bindparam("b_spec"))
                           .with_for_update(read=True), ("b_spec",))
_DELETE_ORPHAN_SPEC = Precompiled(sa.delete(_specs).where(
    _specs.c.id == sa.bindparam("b_spec"),
    ~sa.exists().where(_alloc.c.request_spec_id == _specs.c.id)), ("b_spec",))


@retry_on_deadlock
def claim(db: Database, rec: ClaimRecord) -> ClaimResult:
    """Persist one claim atomically, or raise ClaimConflict / DuplicateAllocation.

    The node's compare-and-swap UPDATE comes late, followed only by the
    allocation's INSERT and the COMMIT: the node row is the one every
    scheduler writes, and a lock taken first would be held across every other
    statement's round trip (under eventlet, each one also waits for the
    worker's other green threads), stalling the other schedulers' claims and
    releases of that node. A conflict found there rolls back the rest. On
    MySQL the writes from the inventories' UPDATE on are one batch (``_write``):
    the node row is locked for the batch's round trip and the COMMIT's."""
    from db import pci as db_pci
    from pci import errors as pci_errors

    now = models.utcnow()
    try:
        with db.hot_writer() as conn:
            if rec.move_from is not None:
                _hand_over(conn, rec, now)
            if rec.victims is not None:
                # before the group check: a preempted member leaves the group
                try:
                    freed = preemption.preempt_locked(conn, rec.node_id, rec.victims,
                                                      rec.instance_uuid, now)
                except preemption.VictimGone as e:
                    raise PreemptionConflict(str(e)) from None
                except preemption.BudgetExhausted as e:
                    raise PreemptionConflict(str(e), budget=True, zone=e.zone) from None
                if freed:
                    _give_back(conn, _summed(freed))
            if rec.instance_group and rec.group_policy in HARD_POLICIES:
                _check_group(conn, rec)
            addresses: tuple[str, ...] = ()
            pools = None
            if rec.pci_picks:
                try:
                    addresses = tuple(db_pci.claim_devices(conn, rec.node_id, rec.instance_uuid,
                                                           rec.pci_picks))
                except pci_errors.PciClaimConflict as e:
                    raise ClaimConflict(str(e)) from None
                pools = db_pci.pools_for_nodes(conn, [rec.node_id]).get(rec.node_id, ())
            elif rec.victims is not None:
                # the victims' devices (and their PF/VF relatives) are free now
                pools = db_pci.pools_for_nodes(conn, [rec.node_id]).get(rec.node_id, ())
            spec_id = rec.request_spec_id
            own_spec = None
            if spec_id is not None and _SPEC_EXISTS.execute(conn, (spec_id,)).scalar() is None:
                spec_id = None      # its allocations were all released meanwhile
            if spec_id is None and rec.request_spec is not None:
                if rec.share_spec:
                    spec_id = _INSERT_SPEC.execute(conn, (rec.request_spec, now)).lastrowid
                else:
                    # a request of one instance: nothing to share, and a
                    # statement less in its claim and in its release
                    own_spec = rec.request_spec
            _write(conn, rec, now, spec_id, own_spec, addresses, pools)
    except db_exc.DBDuplicateEntry:
        raise DuplicateAllocation(rec.instance_uuid) from None
    return ClaimResult(generation=rec.seen_generation + 1, pci_addresses=addresses,
                       pci_pools=pools, request_spec_id=spec_id, at=now)


def _write(conn, rec: ClaimRecord, now: datetime.datetime, spec_id: int | None,
           own_spec: str | None, addresses: tuple[str, ...], pools) -> None:
    """The claim's writes, in this order: take the items from the inventories
    (a conflict if one no longer fits), journal the claim, bump the node's
    generation (compare-and-swap: a conflict if it moved), then insert the
    consumer and its items. On MySQL they go as one batch, one round trip
    (the kept connections take batches: ``Database.kept_engine``), and the
    row counts are checked once it is read; else one statement after the
    other."""
    journal = None
    if rec.move_from is None and rec.victims is None:
        # Before the node's UPDATE (a conflict there rolls it back): the
        # other schedulers apply it instead of reading the node again.
        journal = _journal_row(rec, now, pools)
    if rec.numa_topology is not None:
        node = (_CLAIM_WITH_NUMA, (rec.node_id, rec.seen_generation, now, rec.numa_topology))
    else:
        node = (_CLAIM, (rec.node_id, rec.seen_generation, now))
    # After the node's UPDATE: the foreign key checks of the INSERTs take
    # shared locks on the node row, and two claims holding it, each waiting to
    # upgrade it for its UPDATE, deadlock.
    consumer = (rec.instance_uuid, rec.consumer_type, rec.owner_uuid or rec.instance_uuid,
                rec.node_id, rec.numa_cells,
                json.dumps(list(addresses)) if addresses else None,
                rec.project_id, rec.user_id, rec.instance_group, spec_id, own_spec,
                rec.pending, now,
                rec.move_from.holder if rec.move_from else None,
                "moving" if rec.move_from else None,
                rec.priority, rec.preemptible)
    if precompiled.takes_batches(conn):
        _write_batch(conn, rec, now, journal, node, consumer)
        return
    if rec.items and _take(conn, rec.items) != len(rec.items):
        raise _no_longer_fit(rec)
    if journal is not None:
        node_changes.INSERT.execute(conn, journal)
    if node[0].execute(conn, node[1]).rowcount != 1:
        raise _node_changed(rec)
    if rec.victims is not None:
        _VICTIMS_GONE.execute(conn, (len(rec.victims.uuids), now, rec.node_id))
    consumer_id = _INSERT_CONSUMER.execute(conn, consumer).lastrowid
    if rec.items:
        _INSERT_ITEMS.executemany(conn, [(consumer_id, p, rc, n) for p, rc, n in rec.items])


def _write_batch(conn, rec: ClaimRecord, now: datetime.datetime, journal: tuple | None,
                 node: tuple, consumer: tuple) -> None:
    """``_write``'s statements as one batch. The batch runs to its end even
    when a count says conflict (rolled back with the rest); the first
    conflict in statement order wins over an error of a later statement, as
    when the statements run one by one (the later one would not have run)."""
    parts: list[tuple[Precompiled, tuple]] = []
    # (part, its row count, the conflict it tells otherwise)
    expected: list[tuple[int, int, Callable[[ClaimRecord], ClaimConflict]]] = []
    if rec.items:
        expected.append((len(parts), len(rec.items), _no_longer_fit))
        parts.append((_take_precompiled(len(rec.items)),
                      tuple(itertools.chain.from_iterable(rec.items))))
    if journal is not None:
        parts.append((node_changes.INSERT, journal))
    expected.append((len(parts), 1, _node_changed))
    parts.append(node)
    if rec.victims is not None:
        parts.append((_VICTIMS_GONE, (len(rec.victims.uuids), now, rec.node_id)))
    parts.append((_INSERT_CONSUMER, consumer))
    if rec.items:
        # the consumer's id: the one its INSERT, just before, generated
        parts.append((_insert_items_of_last_consumer(len(rec.items)),
                      tuple(itertools.chain.from_iterable((p, rc, n)
                                                          for p, rc, n in rec.items))))
    counts: list[int] = []
    try:
        precompiled.execute_batch(conn, parts, counts)
    except Exception as e:
        conflict = _first_conflict(counts, expected)
        if conflict is None or isinstance(e, db_exc.DBConnectionError) \
                or getattr(e, "connection_invalidated", False):
            raise       # a lost connection is dropped (hot_writer), whatever came before
        raise conflict(rec) from e
    conflict = _first_conflict(counts, expected)
    if conflict is not None:
        raise conflict(rec)


def _first_conflict(counts: list[int], expected):
    """The first conflict the row counts read so far tell, if any (its maker)."""
    for part, rows, conflict in expected:
        if part >= len(counts):
            return None
        if counts[part] != rows:
            return conflict
    return None


def _no_longer_fit(rec: ClaimRecord) -> ClaimConflict:
    return ClaimConflict(f"node {rec.node_id}: "
                         f"{', '.join(f'{rc} {n}' for _p, rc, n in rec.items)} "
                         f"no longer fit")


def _node_changed(rec: ClaimRecord) -> ClaimConflict:
    return ClaimConflict(f"node {rec.node_id} changed")


def _journal_row(rec: ClaimRecord, now: datetime.datetime, pools) -> tuple | None:
    """The claim's ``node_changes`` row (the node's next generation), or None."""
    picked: dict = {}
    for _request_id, key, count in rec.pci_picks:
        picked[key] = picked.get(key, 0) + count
    return node_changes.claim_row(
        node_id=rec.node_id, generation=rec.seen_generation + 1, at=now,
        consumer_uuid=rec.instance_uuid, consumer_type=rec.consumer_type,
        instance_group=rec.instance_group, items=rec.items,
        numa_topology=rec.numa_topology, pci_pools=pools, priority=rec.priority,
        preemptible=rec.preemptible, pending=rec.pending, project_id=rec.project_id,
        numa_cells=rec.numa_cells, device_pools=picked.items(),
        image_properties=rec.image_properties)


def _hand_over(conn, rec: ClaimRecord, now: datetime.datetime) -> None:
    """A move's first step: the instance's consumer on its source becomes the
    holder of the source (allocations, NUMA cells and devices stay with it), so
    that the instance's new consumer can be written on the destination."""
    from db import pci as db_pci

    move = rec.move_from
    done = conn.execute(
        sa.update(_alloc).where(_alloc.c.uuid == rec.instance_uuid,
                                _alloc.c.consumer_type == "instance",
                                _alloc.c.compute_node_id == move.source_node_id)
        .values(uuid=move.holder, consumer_type=move.hold_type, pending=False,
                created_at=now))
    if done.rowcount != 1:
        raise SourceMoved(f"instance {rec.instance_uuid} is no longer on node "
                          f"{move.source_node_id}")
    db_pci.hand_over_devices(conn, move.source_node_id, rec.instance_uuid, move.holder)
    if move.source_node_id != rec.node_id:
        # caches re-read the source: its instance is a migration now
        conn.execute(sa.update(_cn).where(_cn.c.id == move.source_node_id)
                     .values(generation=_cn.c.generation + 1, updated_at=now))


_GROUP_TOUCH = (sa.update(_groups).where(_groups.c.uuid == sa.bindparam("b_group"))
                .values(generation=_groups.c.generation + 1))

def _group_upsert(dialect: str):
    """Create the group's row or, when a concurrent claim created it first, bump
    it: one statement, so that a deadlock between two first uses is a plain
    deadlock that retries the whole claim (a savepoint would be gone with the
    transaction InnoDB rolled back, and its ROLLBACK fail)."""
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        return mysql.insert(_groups).on_duplicate_key_update(
            generation=_groups.c.generation + 1)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(_groups).on_conflict_do_update(
        index_elements=[_groups.c.uuid], set_={"generation": _groups.c.generation + 1})


_GROUP_UPSERT = {d: _group_upsert(d) for d in ("mysql", "mariadb", "sqlite")}
_GROUP_ON_HOST = (sa.select(sa.func.count()).select_from(
    _alloc.join(_cn, _cn.c.id == _alloc.c.compute_node_id))
    .where(_alloc.c.instance_group == sa.bindparam("b_group"),
           _alloc.c.consumer_type != preemption.PREEMPTED,
           _cn.c.host == sa.bindparam("b_host")))
_GROUP_ELSEWHERE = (sa.select(_cn.c.host).select_from(
    _alloc.join(_cn, _cn.c.id == _alloc.c.compute_node_id))
    .where(_alloc.c.instance_group == sa.bindparam("b_group"),
           _alloc.c.consumer_type != preemption.PREEMPTED,
           _cn.c.host != sa.bindparam("b_host")).limit(1))


def _lock_group(conn, group: str) -> None:
    """Take the group's row lock for the rest of the transaction (creating the
    row on first use; a concurrent first use waits, then takes it)."""
    if conn.execute(_GROUP_TOUCH, {"b_group": group}).rowcount:
        return
    conn.execute(_GROUP_UPSERT[conn.dialect.name], {"uuid": group, "generation": 0})


def _check_group(conn, rec: ClaimRecord) -> None:
    """Refuse the claim when it would break the group's hard policy. Runs after
    the group lock, so the members read here are every committed member."""
    _lock_group(conn, rec.instance_group)
    params = {"b_group": rec.instance_group, "b_host": rec.host}
    if rec.group_policy == "anti-affinity":
        members = conn.execute(_GROUP_ON_HOST, params).scalar_one()
        if members >= rec.group_max_per_host:
            raise GroupPolicyConflict(
                f"anti-affinity group {rec.instance_group} already has {members} "
                f"member(s) on {rec.host}")
    else:
        elsewhere = conn.execute(_GROUP_ELSEWHERE, params).scalar()
        if elsewhere is not None:
            raise GroupPolicyConflict(
                f"affinity group {rec.instance_group} has members on {elsewhere}")


def group_member_nodes(db: Database, group: str) -> list[int]:
    """The node ids holding members of ``group`` (read after another
    scheduler's claim refused ours: causal)."""
    with db.causal_reader() as conn:
        return [row[0] for row in conn.execute(
            sa.select(_alloc.c.compute_node_id).distinct()
            .where(_alloc.c.instance_group == group,
                   _alloc.c.consumer_type != preemption.PREEMPTED))]


_RELEASE = Precompiled(_node_update(with_numa=False, sign=-1), ("b_id", "b_now"))
_RELEASE_WITH_NUMA = Precompiled(_node_update(with_numa=True, sign=-1),
                                 ("b_id", "b_now", "b_numa"))
# The allocation with its shared request spec (one round trip); FOR UPDATE
# locks both rows (the spec row may be deleted with its last allocation).
_LOCK_ALLOCATION = (sa.select(_alloc, _specs.c.spec.label("shared_spec"))
                    .select_from(_alloc.outerjoin(_specs,
                                                  _specs.c.id == _alloc.c.request_spec_id))
                    .where(_alloc.c.uuid == sa.bindparam("b_uuid"))
                    .with_for_update())
_ITEMS_OF = Precompiled(
    sa.select(_items.c.provider_id, _items.c.resource_class, _items.c.amount)
    .where(_items.c.consumer_id == sa.bindparam("b_id")), ("b_id",))
_DELETE_ITEMS = Precompiled(
    sa.delete(_items).where(_items.c.consumer_id == sa.bindparam("b_id")), ("b_id",))
#: What ``_ITEMS_OF`` then ``_DELETE_ITEMS`` do, in one statement where the
#: database has DELETE ... RETURNING (SQLite 3.35, MariaDB 10.0.5; not MySQL).
_DELETE_ITEMS_RETURNING = Precompiled(_DELETE_ITEMS.statement.returning(
    _items.c.provider_id, _items.c.resource_class, _items.c.amount), ("b_id",))
_LOCK_NODE = Precompiled(sa.select(_cn.c.id, _cn.c.host, _cn.c.numa_topology, _cn.c.generation)
                         .where(_cn.c.id == sa.bindparam("b_id")).with_for_update(), ("b_id",))
_DELETE_ALLOCATION = Precompiled(sa.delete(_alloc).where(_alloc.c.id == sa.bindparam("b_id")),
                                 ("b_id",))


@retry_on_deadlock
def release(db: Database, instance_uuid: str, *,
            pending_before: datetime.datetime | None = None, kind: str = "released",
            remembered: bool = False) -> Released | transitions.Transition | None:
    """Free a consumer's allocations (usage, NUMA, devices); None if it has none.

    ``pending_before``: release it only if it is still pending and was made
    before that time (the reaper: a confirm that wins the race keeps it).
    ``kind``: the transition it is remembered as (``db.transitions``).
    ``remembered``: when it holds nothing, its last transition if that was
    one of this ``kind`` (a release done already: this call is a retry, or
    the caller's re-send, of one whose answer was lost).
    The allocation row is locked first (two releases of one instance queue
    there); the node row last, read and written just before the COMMIT, as in
    ``claim``."""
    with db.hot_writer() as conn:
        alloc = conn.execute(_LOCK_ALLOCATION, {"b_uuid": instance_uuid}).mappings().first()
        if alloc is None:
            if remembered:
                earlier = transitions.last(conn, instance_uuid)
                if earlier is not None and earlier.kind == kind:
                    return earlier
            return None
        if pending_before is not None and not (
                alloc["pending"] and alloc["created_at"] < pending_before):
            return None
        if alloc["consumer_type"] == preemption.PREEMPTED:
            return _release_preempted(conn, alloc, kind)
        return _release_locked(conn, alloc, kind)


def _delete_items(conn, consumer_id: int) -> tuple[Item, ...]:
    """Delete the consumer's allocation rows; what they held."""
    if conn.dialect.delete_returning:
        return tuple((p, rc, n) for p, rc, n in
                     _DELETE_ITEMS_RETURNING.execute(conn, (consumer_id,)))
    amounts = tuple((p, rc, n) for p, rc, n in _ITEMS_OF.execute(conn, (consumer_id,)))
    _DELETE_ITEMS.execute(conn, (consumer_id,))
    return amounts


def _delete_consumer(conn, alloc) -> tuple[str | None, tuple[Item, ...]]:
    """Delete the consumer ``alloc`` and its allocation rows (and its request
    spec when no other consumer shares it); the spec's text and what the
    rows held."""
    amounts = _delete_items(conn, alloc["id"])
    _DELETE_ALLOCATION.execute(conn, (alloc["id"],))
    if alloc["request_spec_id"] is None:
        return alloc["request_spec"], amounts
    _DELETE_ORPHAN_SPEC.execute(conn, (alloc["request_spec_id"],))
    return alloc["shared_spec"], amounts


def _remember(conn, alloc, kind: str | None, host: str, spec_text: str | None,
              now: datetime.datetime) -> None:
    """Record the consumer's release as a transition of ``kind`` (None: not
    remembered); a reschedule keeps the request it places again."""
    if kind is not None:
        transitions.record(conn, consumer_uuid=alloc["uuid"],
                           instance_uuid=alloc["instance_uuid"], kind=kind,
                           node_id=alloc["compute_node_id"], host=host,
                           project_id=alloc["project_id"],
                           request_spec=spec_text if kind == "rescheduled" else None,
                           now=now)


def _release_preempted(conn, alloc, kind: str | None = None) -> Released:
    """Forget a preempted consumer: its room was handed over when it was
    preempted, so nothing is given back and the node does not change;
    remembered as a transition of ``kind`` like any release."""
    spec_text, _held = _delete_consumer(conn, alloc)
    host = conn.execute(sa.select(_cn.c.host).where(
        _cn.c.id == alloc["compute_node_id"])).scalar() or ""
    _remember(conn, alloc, kind, host, spec_text, models.utcnow())
    return Released(instance_uuid=alloc["uuid"], node_id=alloc["compute_node_id"], host=host,
                    amounts=(), numa_cells=None, pci_addresses=(), request_spec=spec_text,
                    instance_group=alloc["instance_group"], preempted=True)


def _release_locked(conn, alloc, kind: str | None = None) -> Released:
    """Give back what the consumer ``alloc`` (a row of ``_LOCK_ALLOCATION``,
    locked) holds and delete it, in the caller's transaction; remembered as a
    transition of ``kind`` (None: not remembered)."""
    from db import pci as db_pci

    uuid = alloc["uuid"]
    node_id = alloc["compute_node_id"]
    addresses: tuple[str, ...] = ()
    if alloc["pci_devices"]:
        addresses = tuple(db_pci.release_devices(conn, uuid))
    spec_text, amounts = _delete_consumer(conn, alloc)
    pools = db_pci.pools_for_nodes(conn, [node_id]).get(node_id, ()) if addresses else None
    if amounts:
        _give_back(conn, amounts)
    node = _LOCK_NODE.execute(conn, (node_id,)).mappings().one()
    now = models.utcnow()
    numa_after = None
    if alloc["numa_cells"] and node["numa_topology"]:
        numa_after = _remove_numa_usage(node["numa_topology"], alloc["numa_cells"])
        writes = [(_RELEASE_WITH_NUMA, (node_id, now, numa_after))]
    else:
        writes = [(_RELEASE, (node_id, now))]
    journal = node_changes.release_row(
        node_id=node_id, generation=node["generation"] + 1, at=now,
        consumer_uuid=uuid, consumer_type=alloc["consumer_type"],
        instance_group=alloc["instance_group"], items=amounts, numa_topology=numa_after,
        pci_pools=pools)
    if journal is not None:
        writes.append((node_changes.INSERT, journal))
    if len(writes) > 1 and precompiled.takes_batches(conn):
        precompiled.execute_batch(conn, writes, [])     # the node's UPDATE and its journal
    else:
        for statement, values in writes:
            statement.execute(conn, values)
    _remember(conn, alloc, kind, node["host"], spec_text, now)
    return Released(instance_uuid=uuid, node_id=node_id, host=node["host"],
                    amounts=amounts, numa_cells=alloc["numa_cells"],
                    pci_addresses=addresses, request_spec=spec_text,
                    instance_group=alloc["instance_group"],
                    generation=node["generation"] + 1,
                    numa_topology=numa_after, pci_pools=pools, at=now)


def _remove_numa_usage(host_json: str, fitted_json: str) -> str:
    from numa import usage
    from numa.topology import FittedTopology, HostTopology

    host = HostTopology.from_primitive(json.loads(host_json))
    fitted = FittedTopology.from_primitive(json.loads(fitted_json))
    return json.dumps(usage.remove_usage(host, fitted).to_primitive(), sort_keys=True)


# The rows the UPDATE matches are locked until the commit: the reaper's
# release locks the same rows, so a confirm and a release of one claim are one
# after the other, never interleaved. Its row count is the rows matched, not
# changed (FOUND_ROWS, SQLAlchemy's default on MySQL; SQLite counts so too), so
# a claim confirmed already counts as held.
_CONFIRM = (sa.update(_alloc)
            .where(_alloc.c.uuid.in_(sa.bindparam("b_uuids", expanding=True)))
            .values(pending=False))
_CONFIRM_OWNED = _CONFIRM.where(_alloc.c.project_id == sa.bindparam("b_project"))
_HELD = sa.select(_alloc.c.uuid, _alloc.c.project_id).where(
    _alloc.c.uuid.in_(sa.bindparam("b_uuids", expanding=True)))

#: ``confirm``'s ``project`` when the caller may confirm any project's claims.
ANY_PROJECT = object()


class _NotAllHeld(Exception):
    """Rolls a confirm back: these instances hold nothing (for the caller)."""

    def __init__(self, unknown: list[str]) -> None:
        super().__init__(unknown)
        self.unknown = unknown


@retry_on_deadlock
def confirm(db: Database, instance_uuids, project=ANY_PROJECT
            ) -> tuple[list[str], list[str]]:
    """Mark the instances' allocations confirmed, all or none (idempotent):
    (the instances confirmed, in the order given; those that hold none, e.g.
    reaped). When one of them holds nothing, none is confirmed: the instances
    of one request stand or fall together, and the others stay pending (the
    caller releases them, or the reaper does after claim_ttl) instead of
    becoming confirmed claims nobody holds.

    ``project``: only the claims of this project count as held (a caller that
    may act on its own project only; None: on no project's claims). The owner
    is part of the statement that confirms, so the caller's scope costs no
    query of its own, and the work is the same whoever holds them. One
    statement when every instance holds its claim; when one does not, that
    transaction is rolled back and the answer is decided by a second one that
    reads the rows first (Galera: a read that waits for the cluster)."""
    uuids = list(dict.fromkeys(instance_uuids))
    if not uuids:
        return [], []
    try:
        with db.hot_writer() as conn:
            if _confirm_rows(conn, uuids, project) != len(uuids):
                raise _NotAllHeld([])       # rolled back; decided below
        return uuids, []
    except _NotAllHeld:
        pass
    # Fewer matched than named: decide on a read that is the first statement
    # of its transaction. On Galera, wsrep_sync_wait makes a transaction's
    # first read wait until this node applied what the cluster committed
    # before it; an UPDATE (with the value 1) and any statement after the
    # first do not wait. A claim committed through another node a moment ago
    # is seen here, and confirmed.
    try:
        with db.hot_writer() as conn:
            held = {u for u, owner in conn.execute(_HELD, {"b_uuids": uuids})
                    if project is ANY_PROJECT
                    or (project is not None and owner == project)}
            unknown = [u for u in uuids if u not in held]
            if unknown:
                raise _NotAllHeld(unknown)
            _confirm_rows(conn, uuids, project)
    except _NotAllHeld as e:
        return [], e.unknown
    return uuids, []


def _confirm_rows(conn, uuids: list[str], project) -> int:
    """The confirming UPDATE; the rows it matched."""
    if project is ANY_PROJECT:
        return conn.execute(_CONFIRM, {"b_uuids": uuids}).rowcount
    return conn.execute(_CONFIRM_OWNED, {"b_uuids": uuids, "b_project": project}).rowcount


_PENDING_BEFORE = (sa.select(_alloc.c.uuid)
                   .where(_alloc.c.pending == sa.true(),
                          _alloc.c.created_at < sa.bindparam("b_before"))
                   .order_by(_alloc.c.created_at).limit(sa.bindparam("b_limit")))
_PENDING_COUNT = sa.select(sa.func.count()).select_from(_alloc).where(
    _alloc.c.pending == sa.true())


def pending_before(db: Database, before: datetime.datetime, limit: int = 500) -> list[str]:
    """Instances whose allocation is still pending and was made before ``before``,
    oldest first (served by consumers_pending_idx)."""
    with db.reader_connection() as conn:
        return [row[0] for row in conn.execute(_PENDING_BEFORE,
                                               {"b_before": before, "b_limit": limit})]


def pending_count(db: Database) -> int:
    with db.reader_connection() as conn:
        return conn.execute(_PENDING_COUNT).scalar_one()


@retry_on_deadlock
def record_build_failure(db: Database, host: str) -> bool:
    """Count a failed build on ``host`` (read by BuildFailureWeigher)."""
    with db.writer_connection() as conn:
        res = conn.execute(sa.update(_cn).where(_cn.c.host == host, _cn.c.deleted == 0)
                           .values(failed_builds=_cn.c.failed_builds + 1,
                                   generation=_cn.c.generation + 1,
                                   updated_at=models.utcnow()))
        return res.rowcount > 0


def _with_amounts(conn, rows) -> dict[str, dict]:
    """Consumer rows (with host and spec) as dicts keyed by consumer uuid, each
    with ``resources`` ({class: amount} over the node's providers) and
    ``allocations`` ({provider uuid: {class: amount}})."""
    out: dict[str, dict] = {}
    by_id: dict[int, dict] = {}
    for row in rows:
        alloc = dict(row)
        shared = alloc.pop("shared_spec", None)
        if shared is not None:
            alloc["request_spec"] = shared
        alloc.setdefault("owner_uuid", alloc.get("instance_uuid") or alloc["uuid"])
        alloc["instance_uuid"] = alloc["uuid"]
        alloc["resources"] = {}
        alloc["allocations"] = {}
        out[alloc["uuid"]] = by_id[alloc["id"]] = alloc
    if by_id:
        ids = list(by_id)
        q = (sa.select(_items.c.consumer_id, _rp.c.uuid, _items.c.resource_class,
                       _items.c.amount)
             .join(_rp, _rp.c.id == _items.c.provider_id)
             .where(_items.c.consumer_id.in_(ids)))
        for cid, provider, rc, amount in conn.execute(q):
            alloc = by_id[cid]
            alloc["resources"][rc] = alloc["resources"].get(rc, 0) + amount
            alloc["allocations"].setdefault(provider, {})[rc] = amount
    return out


def _consumers_query():
    return (sa.select(_alloc, _cn.c.host, _cn.c.hypervisor_hostname,
                      _cn.c.uuid.label("node_uuid"), _specs.c.spec.label("shared_spec"))
            .join(_cn, _cn.c.id == _alloc.c.compute_node_id)
            .outerjoin(_specs, _specs.c.id == _alloc.c.request_spec_id))


def allocations_for(db: Database, instance_uuids) -> dict[str, dict]:
    """consumer uuid -> what it holds, with host, node name and node uuid (only
    those that hold something); two queries, seeing every write committed
    before them (``Database.causal_reader``: they decide answers)."""
    uuids = list(instance_uuids)
    if not uuids:
        return {}
    with db.causal_reader() as conn:
        rows = conn.execute(_consumers_query().where(_alloc.c.uuid.in_(uuids))).mappings()
        return _with_amounts(conn, rows.all())


def projects_of(db: Database, instance_uuids) -> dict[str, str | None]:
    """consumer uuid -> its project, for those that hold an allocation (one
    query on the consumers' uuid index, whether they do or not)."""
    uuids = list(instance_uuids)
    if not uuids:
        return {}
    with db.causal_reader() as conn:
        return dict(conn.execute(sa.select(_alloc.c.uuid, _alloc.c.project_id)
                                 .where(_alloc.c.uuid.in_(uuids))).all())


def get_allocation(db: Database, instance_uuid: str) -> dict | None:
    """What the consumer holds (as ``allocations_for``), or None."""
    return allocations_for(db, [instance_uuid]).get(instance_uuid)


def list_allocations(db: Database, *, pending: bool = False,
                     older_than: float | None = None, host: str | None = None,
                     now: datetime.datetime | None = None,
                     preempted: bool = False) -> list[dict]:
    """Consumers with their host and what they hold, oldest first, for
    operators: only the preempted ones the caller has not released yet
    (``preempted``: what they held is no longer counted), only the pending ones
    (``pending``), only those made more than
    ``older_than`` seconds ago, only on ``host`` (host or node name)."""
    q = (sa.select(_alloc.c.id, _alloc.c.uuid, _alloc.c.consumer_type,
                   _alloc.c.instance_uuid.label("owner_uuid"), _cn.c.host,
                   _cn.c.hypervisor_hostname.label("node"),
                   _alloc.c.pci_devices, _alloc.c.project_id, _alloc.c.user_id,
                   _alloc.c.instance_group, _alloc.c.pending, _alloc.c.created_at,
                   _alloc.c.priority, _alloc.c.preemptible, _alloc.c.preempted_by,
                   _alloc.c.preempted_at)
         .join(_cn, _cn.c.id == _alloc.c.compute_node_id)
         .order_by(_alloc.c.created_at, _alloc.c.id))
    if preempted:
        q = q.where(_alloc.c.consumer_type == preemption.PREEMPTED)
    if pending:
        q = q.where(_alloc.c.pending == sa.true())
    if older_than is not None:
        now = now or models.utcnow()
        q = q.where(_alloc.c.created_at < now - datetime.timedelta(seconds=older_than))
    if host is not None:
        q = q.where(sa.or_(_cn.c.host == host, _cn.c.hypervisor_hostname == host))
    with db.reader_connection() as conn:
        held = _with_amounts(conn, conn.execute(q).mappings().all())
    out = list(held.values())
    for row in out:
        row.pop("id")
        row["pending"] = bool(row["pending"])
        row["preemptible"] = bool(row["preemptible"])
        row["pci_devices"] = json.loads(row["pci_devices"]) if row["pci_devices"] else []
    return out
