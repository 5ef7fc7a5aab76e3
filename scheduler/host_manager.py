"""HostManager: the cache of HostStates, loaded once and refreshed by changes.

Start-up loads every node, aggregate, heartbeat and allocation (and the PCI
pools, only when PciPassthroughFilter is enabled). Each request then runs one
narrow query for nodes whose ``updated_at`` moved and the claims and releases
journalled since (``db.node_changes``). A node whose ``generation`` is newer
than the cached one takes the journalled claims and releases in between when
every generation between has one, and is re-read in full otherwise. Either
way a refresh never overwrites a newer in-memory consume and never
double-counts one that the database already reflects (a consume bumps the
cached generation to the value its claim wrote). Concurrent requests share
one refresh.

The HostManager is the only writer of its HostStates and of their columns:
every change to a host (a refresh, a claim, a release) goes through it, and it
rewrites that host's column row in the same step.
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import threading
import time
from collections.abc import Iterator

from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_log import log as logging
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from db import host_states as queries
from db.api import Database, close_quietly
from db.models import utcnow
from scheduler import metrics, provider_tree
from scheduler.host_classes import HostClasses
from scheduler.host_columns import HostColumns
from scheduler.host_state import AggregateInfo, Consumed, HostState
from scheduler.preemptible_index import PreemptibleIndex

LOG = logging.getLogger(__name__)

host_manager_opts = [
    cfg.StrOpt("default_availability_zone", default="nova",
               help="Availability zone of hosts that belong to no aggregate with an "
                    "availability_zone key."),
]
cache_opts = [
    cfg.FloatOpt("refresh_overlap_seconds", default=1.0, min=0.0,
                 help="Once per this many seconds the changed-rows refresh looks this far "
                      "back before the newest change it saw (other refreshes read only "
                      "rows at or after it). Covers transactions that commit a little "
                      "after they stamp updated_at, and small clock skew between "
                      "scheduler hosts. Rows seen again are skipped by generation; a "
                      "missed change can only make the cache stale, never a claim "
                      "wrong (claims compare the generation)."),
    cfg.FloatOpt("heartbeat_refresh_interval", default=5.0, min=0.0,
                 help="Seconds between reads of changed service heartbeats. Heartbeats "
                      "only matter against service_down_time, so they need not be read "
                      "on every request."),
]

cfg.CONF.register_opts(host_manager_opts)
cfg.CONF.register_opts(cache_opts, group="scheduler")

LIST_OPTS = [("DEFAULT", host_manager_opts), ("scheduler", cache_opts)]


class HostManager:
    """Owns the HostState cache for one scheduler process."""

    def __init__(self, db: Database, conf: cfg.ConfigOpts = cfg.CONF,
                 load_pci_pools: bool = False, load_instance_images: bool = False) -> None:
        self.db = db
        self.conf = conf
        self.load_pci_pools = load_pci_pools
        #: Keep each host's instances' image properties (HostState.instance_images).
        self.load_instance_images = load_instance_images
        self._hosts: dict[int, HostState] = {}
        self._ordered: list[HostState] = []
        self._by_host: dict[str, list[HostState]] = {}
        self._instance_node: dict[str, int] = {}
        self._groups: dict[str, collections.Counter] = {}
        self._since: datetime.datetime | None = None
        self._agg_version: tuple | None = None
        self._aggregates: list[AggregateInfo] = []
        self._aggs_by_host: dict[str, tuple[AggregateInfo, ...]] = {}
        self._heartbeat_read_at = 0.0
        self._last_sweep = 0.0
        self._heartbeat_since: datetime.datetime | None = None
        self._refresh_lock = threading.Lock()
        self._conn: Connection | None = None         # reads in one transaction
        self._probe_conn: Connection | None = None   # the per-request probe, autocommit
        # Guards the instance -> node and group -> hosts indexes, which request
        # threads (note_placed/note_released) and refreshes both rewrite.
        self._index_lock = threading.Lock()
        self._refresh_gen = 0
        # Serialises writes to the live columns with their replacement.
        self._columns_lock = threading.Lock()
        self.columns = HostColumns([], HostClasses())
        #: The instances requests of higher priority could preempt.
        self.preemptibles = PreemptibleIndex(self._index_everyone())
        #: availability zone -> its node ids (``zone_nodes``), None: to compute.
        self._zones: dict | None = None
        self.loaded = False

    # -- public -----------------------------------------------------------
    def host_states(self) -> list[HostState]:
        """Every live host, refreshed from changed rows first."""
        self.refresh()
        return self._ordered

    def get(self, node_id: int) -> HostState | None:
        return self._hosts.get(node_id)

    def hosts_named(self, host: str) -> list[HostState]:
        return self._by_host.get(host, [])

    def group_hosts(self, group_uuid: str | None) -> dict[str, int]:
        """host name -> number of the group's members placed there."""
        if not group_uuid:
            return {}
        with self._index_lock:
            return dict(self._groups.get(group_uuid, {}))

    def instance_nodes(self, instance_uuids) -> dict[str, int]:
        """instance uuid -> node id, for the given instances this cache knows."""
        index = self._instance_node
        return {u: index[u] for u in instance_uuids if u in index}

    def register_class(self, name: str, key_fn) -> None:
        """Keep a class column ``name`` (``key_fn(host)`` per host) in the columns."""
        with self._columns_lock:
            self.columns.classes.register(name, key_fn)

    # -- changes of a host's state (claims and releases) --------------------
    def apply_claim(self, host: HostState, spec, consumed: Consumed) -> None:
        """Take a persisted claim into the cached host (caller holds its lock)."""
        with self._changing(host):
            host.apply(spec, consumed)

    def apply_preemption(self, host: HostState, what_if: HostState, spec,
                         consumed: Consumed) -> None:
        """Take a persisted preempting claim into the cached host (caller holds
        its lock): the state the claim was checked on (``what_if``: the victims
        gone), then the claim; the victims leave the instance index."""
        with self._changing(host):
            host.usage = what_if.usage
            host.numa_topology = what_if.numa_topology
            host.pci_pools = what_if.pci_pools
            host.num_instances = what_if.num_instances
            host.num_io_ops = what_if.num_io_ops
            host.apply(spec, consumed)
        for victim in consumed.victims:
            self.note_released(victim.uuid)

    def apply_release(self, released, locked: bool = False) -> bool:
        """Give a persisted release back to the cached host; False when the cache
        was not exactly at the state before it (then the host is re-read).
        ``locked``: the caller holds the host's lock."""
        host = self._hosts.get(released.node_id)
        if host is None:
            return False
        with contextlib.nullcontext() if locked else host.lock():
            if host.generation >= released.generation:
                return True     # a refresh took it from the journal already
            with self._changing(host):
                done = host.unapply(released)
            if done:
                # the caller dropped it from the index before this; a refresh
                # since (its claim, journalled or re-read) may have put it back
                self.note_released(released.instance_uuid)
            return done

    @contextlib.contextmanager
    def _changing(self, hs: HostState) -> Iterator[None]:
        """Every change of a cached host goes through here: its ``version`` is odd
        while it changes, then even again, and then its column row is rewritten
        (stamped with that version). A reader that sees the row's stamp equal to
        the host's even version before and after reading the host read one
        consistent state, matching that row (see ``cycle``)."""
        hs.version += 1
        try:
            yield
        finally:
            hs.version += 1
            self._row_changed(hs)

    def _row_changed(self, hs: HostState) -> None:
        """Rewrite ``hs``'s row of the live columns (no row yet: nothing to do)."""
        with self._columns_lock:
            cols = self.columns
            row = cols.row_of_node.get(hs.node_id)
            if row is None or cols.hosts[row] is not hs:
                return
            cols.update(row, hs)
            if cols.needs_recode():
                # Hosts went through many states: start the class codes afresh
                # (cycles already running keep the columns they started with).
                self.columns = cols.recoded()

    def refresh(self) -> None:
        """Bring the cache up to date; concurrent callers share one refresh."""
        seen = self._refresh_gen
        with self._refresh_lock:
            if self._refresh_gen != seen:
                return      # another caller refreshed while we waited
            if not self.loaded:
                self._full_load()
                metrics.count_refresh("full")
            else:
                self._with_retry(self._refresh_changed)
            self._refresh_gen += 1

    def refresh_nodes(self, node_ids) -> None:
        """Bring specific nodes up to date now (after a claim conflict): from
        the journal when only claims and releases changed them since the
        cache's generation, else by re-reading them. Serialised with
        ``refresh``: both rewrite the instance and group indexes."""
        def load():
            with self._reader() as conn:
                todo = list(node_ids)
                cached = {i: self._hosts[i] for i in todo if i in self._hosts}
                if cached and self._since is not None:
                    # changes not seen yet were stamped after the newest the
                    # probe saw, or a little before it (committed late)
                    since = self._since - datetime.timedelta(
                        seconds=self.conf.scheduler.refresh_overlap_seconds)
                    generations, journal = queries.nodes_journal(conn, list(cached), since)
                    todo = [i for i in todo if i not in cached or i not in generations
                            or not self._take_changes(cached[i], generations[i],
                                                      journal.get(i, {}))]
                if todo:
                    self._apply_node_rows(conn, queries.load_nodes(conn, todo), force=False)
        with self._refresh_lock:
            self._with_retry(load)

    def close(self) -> None:
        """Close the refresh connections (the cache stays usable; the next
        refresh opens new ones)."""
        with self._refresh_lock:
            for attr in ("_conn", "_probe_conn"):
                conn = getattr(self, attr)
                setattr(self, attr, None)
                if conn is not None:
                    conn.close()

    @contextlib.contextmanager
    def _reader(self) -> Iterator[Connection]:
        """One transaction on this manager's own long-lived read connection.

        Opening a connection through the transaction factory (pool checkout
        and ping) cost more than the per-request query itself (~0.7 of ~1 ms
        on SQLite, ~0.5 on MariaDB). Callers hold ``_refresh_lock``, so the
        connection is never shared; each block is a new transaction, so each
        read sees a fresh snapshot.
        """
        with self._kept("_conn", autocommit=False) as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def _probe(self) -> Iterator[Connection]:
        """The per-request "what changed" query. On a database server it runs
        on an autocommit connection: one statement, so no COMMIT round trip
        to end it. (SQLite's commit costs no round trip, and oslo.db opens an
        explicit transaction there that autocommit would leave open, pinning
        an old snapshot, so on SQLite the probe is a ``_reader`` transaction.)
        Anything the probe finds is then read in one ``_reader`` transaction,
        whose snapshot is at least as new as the probe's."""
        if self.db.dialect == "sqlite":
            with self._reader() as conn:
                yield conn
            return
        with self._kept("_probe_conn", autocommit=True) as conn:
            yield conn

    @contextlib.contextmanager
    def _kept(self, attr: str, autocommit: bool) -> Iterator[Connection]:
        conn = getattr(self, attr)
        if conn is None or conn.closed or conn.invalidated:
            # the refreshes read what other daemons committed (Galera:
            # wsrep_sync_wait); the autocommit probe is only a hint
            conn = self.db.engine.connect() if autocommit else self.db.causal_connect()
            if autocommit:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            setattr(self, attr, conn)
        try:
            yield conn
        except Exception:
            setattr(self, attr, None)       # reconnect next time
            close_quietly(conn)
            raise

    def _with_retry(self, fn) -> None:
        """Run ``fn`` once more on a new connection when the old one was lost."""
        lost = (db_exc.DBConnectionError, sa_exc.DisconnectionError, sa_exc.OperationalError)
        try:
            fn()
        except lost as e:
            metrics.count_db_error_retried("cache_refresh")
            try:
                fn()
            except lost:
                # the database does not answer: the RPC layer says so, once per
                # outage (ServiceUnavailable), not once per request here
                LOG.debug("Host-state refresh: the database does not answer")
                raise
            LOG.info("Host-state refresh lost its database connection (%s); reconnected",
                     type(e).__name__)

    # -- instance / group index, kept in step with consume and release ----
    def note_placed(self, host: HostState, instance_uuid: str, group: str | None,
                    image_properties, generation: int) -> None:
        """Index an instance just claimed on ``host``. ``generation``: the one
        its claim gave the node; when the cached host has moved past it since
        (a refresh took newer changes: a full read or the journal, which both
        hold the claim already, and maybe its release by another worker), the
        index is already right and is left alone."""
        with host.lock(), self._index_lock:
            if host.generation > generation:
                return
            self._place(host, instance_uuid, group)
            if self.load_instance_images:
                host.instance_images[instance_uuid] = queries.image_pairs(image_properties)

    def note_released(self, instance_uuid: str) -> None:
        self.preemptibles.remove(instance_uuid)
        with self._index_lock:
            node_id = self._instance_node.pop(instance_uuid, None)
            host = self._hosts.get(node_id) if node_id is not None else None
            if host is None:
                return
            group = host.instances.pop(instance_uuid, None)
            host.instance_images.pop(instance_uuid, None)
            if group:
                self._uncount_group(group, host.host)

    def note_claimed(self, host: HostState, instance_uuid: str, group: str | None, *,
                     items, priority: int, preemptible: bool, pending: bool,
                     project_id: str | None, numa_cells=None, pci_pools=(),
                     created_at: datetime.datetime | None = None) -> None:
        """A claim this process wrote, for the preemptible index (``items``:
        (provider id, class, amount) as claimed; ``created_at``: as stored)."""
        from db.preemption import Candidate

        self.preemptibles.add(Candidate(
            uuid=instance_uuid, node_id=host.node_id, priority=priority,
            created_at=created_at or utcnow(), project_id=project_id, instance_group=group,
            numa_cells=numa_cells, amounts=tuple(sorted(items)),
            pci_pools=tuple(pci_pools)), preemptible, pending)

    def note_confirmed(self, instance_uuids) -> None:
        self.preemptibles.confirmed(instance_uuids)

    def zone_nodes(self, zone: str | None) -> frozenset[int]:
        """The node ids of the cached hosts in availability zone ``zone``
        (remembered until hosts or aggregates change)."""
        zones = self._zones
        if zones is None:
            grouped: dict = {}
            for hs in list(self._hosts.values()):
                grouped.setdefault(hs.availability_zone, set()).add(hs.node_id)
            zones = self._zones = {z: frozenset(n) for z, n in grouped.items()}
        return zones.get(zone, frozenset())

    def preemptible_index(self, any_preemptible: bool) -> PreemptibleIndex:
        """The index, holding non-preemptible instances too when
        ``any_preemptible`` (read in full the first time they are asked for)."""
        def missing() -> bool:
            index = self.preemptibles
            return not index.loaded or (any_preemptible and not index.any_preemptible)

        if missing():
            with self._refresh_lock:
                if missing():
                    def load():
                        with self._reader() as conn:
                            self._load_preemptibles(conn, None, any_preemptible
                                                    or self._index_everyone())
                    self._with_retry(load)
        return self.preemptibles

    def reindex_preemptibles(self, node_ids) -> None:
        """Re-read the indexed instances of ``node_ids`` (a victim was gone)."""
        def load():
            with self._reader() as conn:
                self._load_preemptibles(conn, list(node_ids), self.preemptibles.any_preemptible)
        with self._refresh_lock:
            self._with_retry(load)

    def _index_everyone(self) -> bool:
        try:
            return bool(self.conf.preemption.preempt_non_preemptible)
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
            return False

    def _preempting(self) -> bool:
        try:
            return bool(self.conf.preemption.enabled)
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
            return False

    def _load_preemptibles(self, conn, node_ids, any_preemptible: bool) -> None:
        """Read the preemptible index for ``node_ids`` (None: in full); nodes
        are read only once the index was loaded in full."""
        from db import preemption as db_preemption

        if node_ids is not None and not self.preemptibles.loaded:
            return
        rows = db_preemption.indexable(conn, node_ids, any_preemptible)
        if node_ids is None:
            self.preemptibles.load(rows, any_preemptible)
        else:
            self.preemptibles.replace_nodes(node_ids, rows)

    def _place(self, host: HostState, instance_uuid: str, group: str | None) -> None:
        host.instances[instance_uuid] = group
        self._instance_node[instance_uuid] = host.node_id
        if group:
            self._groups.setdefault(group, collections.Counter())[host.host] += 1

    # -- loading ------------------------------------------------------------
    def _full_load(self) -> None:
        t0 = time.monotonic()
        with self._reader() as conn:
            started = utcnow()
            rows = queries.load_nodes(conn)
            trees = queries.load_providers(conn)
            self._hosts.clear()
            self._instance_node.clear()
            self._groups.clear()
            for row in rows:
                hs = HostState(row["id"], row["host"], row["hypervisor_hostname"])
                hs.update_from_row(row)
                hs.set_providers(*provider_tree.from_records(trees.get(hs.node_id)))
                self._hosts[hs.node_id] = hs
            self._load_instances(conn, None)
            if self._preempting():
                self._load_preemptibles(conn, None, self._index_everyone()
                                        or self.preemptibles.any_preemptible)
            else:
                self.preemptibles = PreemptibleIndex(self._index_everyone())
            if self.load_pci_pools:
                self._load_pools(conn, None)
            self._reload_aggregates(conn)
            self._read_heartbeats(conn, full=True)
            self._since = self._newest(rows, started)
        self._reindex()
        self.loaded = True
        LOG.info("Loaded %d hosts in %.1f ms", len(self._hosts),
                 (time.monotonic() - t0) * 1000)

    def _refresh_changed(self) -> None:
        overlap = self.conf.scheduler.refresh_overlap_seconds
        now = time.monotonic()
        since = self._since
        if now - self._last_sweep >= overlap:
            # Once per overlap period, look back that far: a transaction that
            # stamped updated_at before the newest row we saw but committed
            # after our last read shows up here. In between, only rows at or
            # after the newest seen are read (a handful, not a second's worth).
            since -= datetime.timedelta(seconds=overlap)
            self._last_sweep = now
        with self._probe() as conn:
            found = queries.changes_since(conn, since)
        changed, agg_version = found.nodes, found.aggregates
        metrics.count_refresh("changes", len(changed))
        newest = self._since
        stale, gone = [], []
        for node_id, generation, deleted, updated_at in changed:
            if updated_at > newest:
                newest = updated_at
            if deleted:
                if node_id in self._hosts:
                    gone.append(node_id)
                continue
            hs = self._hosts.get(node_id)
            if hs is None or generation > hs.generation:
                journal = found.journal.get(node_id)
                if hs is None or journal is None or not self._take_changes(
                        hs, generation, journal):
                    stale.append(node_id)
        new_aggregates = agg_version != self._agg_version
        if stale or new_aggregates or self._heartbeats_due():
            with self._reader() as conn:
                if stale:
                    self._apply_node_rows(conn, queries.load_nodes(conn, stale), force=False)
                if new_aggregates:
                    self._reload_aggregates(conn)
                elif stale:
                    self._assign_aggregates([self._hosts[i] for i in stale if i in self._hosts])
                self._read_heartbeats(conn, full=False)
        for node_id in gone:
            self._drop(node_id)
        self._since = newest
        if gone:
            self._reindex()

    def _take_changes(self, hs: HostState, generation: int, journal) -> bool:
        """Bring ``hs`` to ``generation`` with the journalled claims and
        releases (``journal``: generation -> (at, change text)); False when
        one between is not journalled or does not apply (re-read it then)."""
        from db import node_changes

        with hs.lock():
            if hs.generation >= generation:
                return True     # this process's own claim got there meanwhile
            wanted = range(hs.generation + 1, generation + 1)
            if any(g not in journal for g in wanted):
                return False
            taken = []
            with self._changing(hs):
                for g in wanted:
                    change = node_changes.decode(hs.node_id, g, *journal[g])
                    if not hs.take_change(change, self.load_pci_pools):
                        break
                    taken.append(change)
            self._index_changes(hs, taken)
        metrics.count_node_changes_applied(len(taken))
        return len(taken) == len(wanted)

    def _index_changes(self, hs: HostState, changes) -> None:
        """Keep the instance, group and preemptible indexes in step with the
        claims and releases ``hs`` took from the journal."""
        from db.preemption import Candidate

        index = self.preemptibles
        for c in changes:
            if not c.taken:
                index.remove(c.consumer_uuid)
            elif index.loaded and c.consumer_type == "instance":
                index.add(Candidate(
                    uuid=c.consumer_uuid, node_id=hs.node_id, priority=c.priority,
                    created_at=c.at, project_id=c.project_id,
                    instance_group=c.instance_group, numa_cells=c.numa_cells,
                    amounts=tuple(sorted(c.items)), pci_pools=c.device_pools),
                    c.preemptible, c.pending)
        with self._index_lock:
            for c in changes:
                uuid = c.consumer_uuid
                if c.taken:
                    self._place(hs, uuid, c.instance_group)
                    if self.load_instance_images:
                        hs.instance_images[uuid] = queries.image_pairs(c.image_properties)
                    continue
                if uuid in hs.instances:
                    group = hs.instances.pop(uuid)
                    if group:
                        self._uncount_group(group, hs.host)
                if self._instance_node.get(uuid) == hs.node_id:
                    del self._instance_node[uuid]
                hs.instance_images.pop(uuid, None)

    def _apply_node_rows(self, conn, rows, force: bool) -> None:
        """Take rows whose generation is newer than the cached one, with their
        instances, PCI pools, aggregates and (new hosts) heartbeats."""
        todo = []
        for row in rows:
            hs = self._hosts.get(row["id"])
            if hs is None or force or row["generation"] > hs.generation:
                todo.append((hs, row))
        if not todo:
            return
        ids = [row["id"] for _, row in todo]
        metrics.count_nodes_reloaded(len(ids))
        trees = queries.load_providers(conn, ids)
        by_node = queries.instances_by_node(conn, ids)
        self._load_preemptibles(conn, ids, self.preemptibles.any_preemptible)
        images = queries.instance_images_by_node(conn, ids) if self.load_instance_images \
            else None
        pools = None
        if self.load_pci_pools:
            from db import pci as db_pci

            pools = db_pci.pools_for_nodes(conn, ids)
        unbeaten = [row["host"] for hs, row in todo if hs is None or hs.last_heartbeat is None]
        beats = queries.heartbeats(conn, hosts=unbeaten) if unbeaten else {}
        default_az = self.conf.default_availability_zone
        updated = []
        added = False
        for hs, row in todo:
            if hs is None:
                hs = HostState(row["id"], row["host"], row["hypervisor_hostname"])
                self._hosts[hs.node_id] = hs
                added = True
            with hs.lock(), self._changing(hs):
                # A claim may have moved the cached generation past this row.
                if not force and row["generation"] <= hs.generation:
                    continue
                hs.update_from_row(row)
                hs.set_providers(*provider_tree.from_records(trees.get(hs.node_id)))
                if hs.last_heartbeat is None:
                    hs.last_heartbeat = beats.get(hs.host)
                if pools is not None:
                    hs.pci_pools = pools.get(hs.node_id, ())
                hs.set_aggregates(self._aggs_by_host.get(hs.host, ()), default_az)
            updated.append(hs)
        self._zones = None
        self._index_instances(updated, by_node, images)
        if added:
            self._reindex()

    def _load_instances(self, conn, node_ids) -> None:
        by_node = queries.instances_by_node(conn, node_ids)
        images = queries.instance_images_by_node(conn, node_ids) \
            if self.load_instance_images else None
        targets = self._hosts.values() if node_ids is None else \
            [self._hosts[i] for i in node_ids if i in self._hosts]
        self._index_instances(targets, by_node, images)

    def _index_instances(self, targets, by_node, images=None) -> None:
        """Make ``targets``' instances (and the indexes) those of ``by_node``
        (and their image properties those of ``images``, when given)."""
        with self._index_lock:
            for hs in targets:
                for inst, group in hs.instances.items():
                    if group:
                        self._uncount_group(group, hs.host)
                    # An instance that moved (reschedule) may already be indexed
                    # on its new node, re-read before this one: keep that.
                    if self._instance_node.get(inst) == hs.node_id:
                        del self._instance_node[inst]
                hs.instances = {}
                for inst, group in by_node.get(hs.node_id, {}).items():
                    self._place(hs, inst, group)
                if images is not None:
                    hs.instance_images = dict(images.get(hs.node_id, {}))

    def _load_pools(self, conn, node_ids) -> None:
        from db import pci as db_pci

        pools = db_pci.pools_for_nodes(conn, node_ids)
        targets = self._hosts.values() if node_ids is None else \
            [self._hosts[i] for i in node_ids if i in self._hosts]
        for hs in targets:
            hs.pci_pools = pools.get(hs.node_id, ())

    def _reload_aggregates(self, conn) -> None:
        self._agg_version = queries.aggregates_version(conn)
        self._aggregates = [
            AggregateInfo(id=a["id"], uuid=a["uuid"], name=a["name"],
                          metadata=dict(a["metadata"]), hosts=frozenset(a["hosts"]))
            for a in queries.load_aggregates(conn)]
        by_host: dict[str, list[AggregateInfo]] = {}
        for agg in self._aggregates:
            for h in agg.hosts:
                by_host.setdefault(h, []).append(agg)
        self._aggs_by_host = {h: tuple(aggs) for h, aggs in by_host.items()}
        self._assign_aggregates(self._hosts.values())

    def _assign_aggregates(self, hosts) -> None:
        by_host = self._aggs_by_host
        default_az = self.conf.default_availability_zone
        for hs in hosts:
            aggs = by_host.get(hs.host, ())
            if aggs != hs.aggregates or hs.availability_zone is None:
                with self._changing(hs):
                    hs.set_aggregates(aggs, default_az)
                self._zones = None

    def _heartbeats_due(self) -> bool:
        return time.monotonic() - self._heartbeat_read_at >= \
            self.conf.scheduler.heartbeat_refresh_interval

    def _read_heartbeats(self, conn, full: bool) -> None:
        now = time.monotonic()
        if not full and not self._heartbeats_due():
            return
        started = utcnow()
        since = None
        if not full and self._heartbeat_since is not None:
            since = self._heartbeat_since - datetime.timedelta(
                seconds=self.conf.scheduler.refresh_overlap_seconds)
        beats = queries.heartbeats(conn, since)
        if full:
            for hs in self._hosts.values():
                with self._changing(hs):
                    hs.last_heartbeat = beats.get(hs.host)
        else:
            for host, seen in beats.items():
                for hs in self._by_host.get(host, ()):
                    with self._changing(hs):
                        hs.last_heartbeat = seen
        self._heartbeat_read_at = now
        self._heartbeat_since = started

    def _drop(self, node_id: int) -> None:
        hs = self._hosts.pop(node_id, None)
        if hs is None:
            return
        self.preemptibles.drop_node(node_id)
        with self._index_lock:
            for inst, group in hs.instances.items():
                if self._instance_node.get(inst) == hs.node_id:
                    del self._instance_node[inst]
                if group:
                    self._uncount_group(group, hs.host)

    def _uncount_group(self, group: str, host: str) -> None:
        counter = self._groups.get(group)
        if counter is None:
            return
        counter[host] -= 1
        if counter[host] <= 0:
            del counter[host]
        if not counter:
            del self._groups[group]

    def _reindex(self) -> None:
        """Rebuild the ordered list, the name index and the columns (only when
        hosts were added or removed). The class codes and the answers remembered
        for them carry over: they name host states, not rows."""
        self._zones = None
        ordered = sorted(self._hosts.values(), key=lambda h: h.node_id)
        by_host: dict[str, list[HostState]] = {}
        for hs in ordered:
            by_host.setdefault(hs.host, []).append(hs)
        with self._columns_lock:
            cols = HostColumns(ordered, self.columns.classes)
            for name in self.columns.classes.names:
                cols.class_codes(name)
            self._ordered = ordered
            self._by_host = by_host
            self.columns = cols
        metrics.set_cache_hosts(len(ordered))

    @staticmethod
    def _newest(rows, fallback: datetime.datetime) -> datetime.datetime:
        newest = None
        for row in rows:
            if newest is None or row["updated_at"] > newest:
                newest = row["updated_at"]
        return newest or fallback
