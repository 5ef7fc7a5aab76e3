"""HostColumns: the cached hosts' numbers as numpy columns, for vector filters
and weighers.

Row ``i`` is ``hosts[i]``. The live columns belong to the HostManager, which
rewrites a row (``update``) whenever it changes that row's HostState, so
nothing is rebuilt per request; it builds new columns only when hosts are
added or removed, or when the class codes need compacting (``recoded``).
A request cycle keeps the columns object it started with: its rows always
name the same hosts, whatever the cache does meanwhile.

The ledger: per resource class present in the fleet, a
:class:`ResourceColumns` (``resources(rc)``) with the inventory fields and the
usage of every provider of a node's tree that has the class, one column per
provider (the root's first: column 0 is the root provider's inventory, absent
where the root has none). ``trait_rows(name)``: where the root provider has a
trait (built on first use, then kept up to date); ``nested``: nodes with child
providers. The classic columns are views of the root's VCPU, MEMORY_MB and
DISK_GB (disk in MB): ``memory_used``, ``memory_limit`` ((total - reserved) *
ratio), ``memory_usable`` (total - reserved), ``vcpus``, ``vcpus_used``,
``vcpus_limit``, ``vcpus_usable``, ``disk_used``, ``disk_limit``,
``disk_usable``, ``disk_total``, ``free_ram``, ``free_disk`` and the three
allocation ratios ``cpu_ratio``, ``ram_ratio``, ``disk_ratio``.

Other columns, named for the HostState value they hold: ``heartbeat``
(epoch seconds, +inf for a host that never sent one), ``num_io_ops``,
``num_instances``, ``failed_builds``, ``hypervisor_version``, ``pci_free``,
``disabled``, ``has_numa``, ``has_aggregates``, ``nested`` (the node has child
providers), and a summary of the NUMA cells (the best cell of the host for each;
0 without NUMA): ``numa_cells``, ``numa_free_pcpus`` (unpinned dedicated CPUs;
also ``numa_free_pcpus_total`` over all cells), ``numa_free_cores`` (cores with no
thread pinned), ``numa_free_pair_cpus`` (CPUs of such cores with siblings),
``numa_shared_room`` (shared CPUs a guest may still take: capacity, or capacity
× CPU ratio − usage, whichever is less), ``numa_free_kb_2m`` /
``numa_free_kb_1g`` / ``numa_free_kb_large`` (free memory in 2 MiB, 1 GiB, any
but the smallest page size). Per NUMA cell (2-D, one column per cell, the
first ``MAX_CELLS`` cells; -1 where a host has no such cell): ``cell_free_pcpus``,
``cell_free_cores``, ``cell_free_pair_cpus``, ``cell_shared_room``,
``cell_memory_mb``, ``cell_memory_usage``, ``cell_small_kb`` (the smallest page
size, 0 when the cell lists no pages), ``cell_small_free_kb``,
``cell_small_total_kb``, ``cell_free_2m_pages`` / ``cell_free_1g_pages`` (free
pages of that size; -1 when the cell lists none).
Besides these, one integer column per registered class key
(``class_codes(name)``) and, on demand, aggregate metadata values
(``aggregate_min(key)``).
"""
from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from db import inventory
from db.inventory import DISK_GB, MEMORY_MB, VCPU
from scheduler.host_classes import HostClasses

_EPOCH = datetime.datetime(1970, 1, 1)

FLOAT_FIELDS = ("heartbeat", "num_io_ops", "num_instances", "failed_builds",
                "hypervisor_version", "pci_free", "numa_cells", "numa_free_pcpus",
                "numa_free_pcpus_total", "numa_free_cores", "numa_free_pair_cpus",
                "numa_shared_room", "numa_free_kb_2m", "numa_free_kb_1g",
                "numa_free_kb_large")
BOOL_FIELDS = ("disabled", "has_numa", "has_aggregates", "nested")
CELL_FIELDS = ("cell_free_pcpus", "cell_free_cores", "cell_free_pair_cpus", "cell_shared_room",
               "cell_memory_mb", "cell_memory_usage", "cell_small_kb", "cell_small_free_kb",
               "cell_small_total_kb", "cell_free_2m_pages", "cell_free_1g_pages")
MAX_CELLS = 8


def _row_values(hs) -> tuple:
    """The FLOAT_FIELDS then BOOL_FIELDS values of one HostState, in order."""
    hb = hs.last_heartbeat
    free_pci = 0
    for pool in hs.pci_pools:
        free_pci += pool.count
    return (np.inf if hb is None else seconds(hb), hs.num_io_ops, hs.num_instances,
            hs.failed_builds, hs.hypervisor_version or 0, free_pci,
            *_numa_summary(hs.numa_topology, hs.cpu_allocation_ratio),
            hs.disabled, hs.numa_topology is not None, bool(hs.aggregates), hs.tree.nested)


_NO_NUMA = (0,) * 9
_NO_CELL = (-1.0,) * len(CELL_FIELDS)


#: Remembered per topology (equal topologies share one object): enough for every
#: distinct state a fleet shows at once, bounded because each entry keeps its
#: topology alive after the hosts moved on.
TOPOLOGY_MEMO = 4096


@functools.lru_cache(maxsize=TOPOLOGY_MEMO)
def _cell_values(topology, cpu_ratio: float) -> np.ndarray:
    """The ``cell_*`` columns of a host topology: a (fields, MAX_CELLS) array
    (read-only), as one row of the cell block takes it in one assignment."""
    rows = []
    for cell in (topology.cells[:MAX_CELLS] if topology is not None else ()):
        pinned = cell.pinned_cpus
        whole = [core for core in cell.cores() if pinned.isdisjoint(core)]
        capacity = len(cell.cpuset)
        small = min(cell.mempages, key=lambda page: page.size_kb) if cell.mempages else None
        page_2m, page_1g = cell.mempage(2048), cell.mempage(1048576)
        rows.append((len(cell.pcpuset) - len(pinned), len(whole),
                     sum(len(core) for core in whole if len(core) > 1),
                     min(capacity, capacity * cpu_ratio - cell.cpu_usage),
                     cell.memory_mb, cell.memory_usage,
                     0 if small is None else small.size_kb,
                     0 if small is None else small.free * small.size_kb,
                     0 if small is None else small.total * small.size_kb,
                     -1 if page_2m is None else page_2m.free,
                     -1 if page_1g is None else page_1g.free))
    rows.extend([_NO_CELL] * (MAX_CELLS - len(rows)))
    values = np.array(rows, dtype=np.float64).T
    values.flags.writeable = False
    return values


@functools.lru_cache(maxsize=TOPOLOGY_MEMO)
def _numa_summary(topology, cpu_ratio: float) -> tuple:
    """The ``numa_*`` columns of a host topology (a value: remembered by content)."""
    if topology is None:
        return _NO_NUMA
    pcpus = total = cores = pairs = kb_2m = kb_1g = kb_large = 0
    room = -math.inf
    for cell in topology.cells:
        pinned = cell.pinned_cpus
        free = len(cell.pcpuset) - len(pinned)
        total += free
        pcpus = max(pcpus, free)
        whole = [core for core in cell.cores() if pinned.isdisjoint(core)]
        cores = max(cores, len(whole))
        pairs = max(pairs, sum(len(core) for core in whole if len(core) > 1))
        capacity = len(cell.cpuset)
        room = max(room, min(capacity, capacity * cpu_ratio - cell.cpu_usage))
        sizes = sorted(page.size_kb for page in cell.mempages)
        for page in cell.mempages:
            kb = page.free * page.size_kb
            if page.size_kb == 2048:
                kb_2m = max(kb_2m, kb)
            elif page.size_kb == 1048576:
                kb_1g = max(kb_1g, kb)
            if page.size_kb != sizes[0]:
                kb_large = max(kb_large, kb)
    return (len(topology.cells), pcpus, total, cores, pairs, room, kb_2m, kb_1g, kb_large)


# The fields of ResourceColumns, in the order of their stacked array; an absent
# provider slot holds these values, which no amount >= 1 passes.
RESOURCE_FIELDS = ("total", "reserved", "allocation_ratio", "used", "min_unit", "max_unit",
                   "step_size")
_ABSENT = (0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0)
#: ``_ABSENT`` as a (fields, 1) column, to write a row's slots in one assignment.
_ABSENT_COLUMN = np.array(_ABSENT, dtype=np.float64)[:, None]
_ABSENT_COLUMN.flags.writeable = False


class ResourceColumns:
    """One resource class over every row: per field an (n, k) array, column j
    the j-th provider of the node's tree that has the class (column 0 the root
    provider; absent slots pass nothing). Read through ``db.inventory``'s
    rule, so the vector check is the rule itself.

    What depends on the inventories alone (``usable``, ``unit_ok`` per amount)
    is remembered until the owner rewrites a row with another provider tree
    (``forget``): claims and releases change ``used`` only."""

    __slots__ = ("data", "_memo", "_stamp")

    #: Derived columns remembered at most (one per distinct amount asked).
    MEMO_SIZE = 64

    def __init__(self, data: np.ndarray) -> None:
        self.data = data                    # (len(RESOURCE_FIELDS), n, k)
        self._memo: dict = {}
        self._stamp = 0

    @classmethod
    def absent(cls, n: int, k: int = 1) -> ResourceColumns:
        data = np.empty((len(RESOURCE_FIELDS), n, k), dtype=np.float64)
        data[...] = _ABSENT_COLUMN[:, :, None]
        return cls(data)

    @property
    def k(self) -> int:
        return self.data.shape[2]

    total = property(lambda self: self.data[0])
    reserved = property(lambda self: self.data[1])
    allocation_ratio = property(lambda self: self.data[2])
    used = property(lambda self: self.data[3])
    min_unit = property(lambda self: self.data[4])
    max_unit = property(lambda self: self.data[5])
    step_size = property(lambda self: self.data[6])

    @property
    def present(self) -> np.ndarray:
        """(n, k): the slots holding an inventory."""
        return self.max_unit > 0

    def forget(self) -> None:
        """Drop what was derived from the inventories (after rows were rewritten
        with other inventories; a computation running meanwhile keeps its
        result to itself)."""
        self._stamp += 1
        if self._memo:
            self._memo = {}

    def _derived(self, key: Hashable, make) -> Any:
        stamp, memo = self._stamp, self._memo
        hit = memo.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        value = make()
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        if self._stamp == stamp:
            if len(memo) >= self.MEMO_SIZE:
                memo.clear()
            memo[key] = (stamp, value)
        return value

    def usable(self) -> np.ndarray:
        """(n, k): what allocations may add up to, per slot."""
        return self._derived("usable", lambda: inventory.usable(
            self.total, self.reserved, self.allocation_ratio))

    def unit_ok(self, amount: int) -> np.ndarray:
        """(n, k): where one allocation of ``amount`` is within the unit limits."""
        return self._derived(("unit_ok", amount), lambda: inventory.unit_ok(
            amount, self.min_unit, self.max_unit, self.step_size))

    def lacking(self) -> np.ndarray:
        """(n,): rows whose tree has no inventory of the class."""
        return self._derived("lacking", lambda: ~self.present.any(axis=1))

    def unit_breaks(self, amount: int, root_only: bool = False
                    ) -> tuple[tuple[str, np.ndarray], ...]:
        """Per unit limit one allocation of ``amount`` breaks on some row
        (``below min_unit``, ...): the rows where every present slot (the
        root's only, with ``root_only``) breaks it. Limits no row breaks are
        left out, so the usual request costs a lookup."""
        return self._derived(("unit_breaks", amount, root_only),
                             lambda: self._unit_breaks(amount, root_only))

    def _unit_breaks(self, amount: int, root_only: bool):
        cols = slice(0, 1) if root_only else slice(None)
        present = self.present[:, cols]
        ok = self.unit_ok(amount)[:, cols]
        if not (present & ~ok).any():
            return ()
        out = []
        for text, broken in (("below min_unit", amount < self.min_unit[:, cols]),
                             ("above max_unit", amount > self.max_unit[:, cols]),
                             ("not a multiple of step_size",
                              amount % self.step_size[:, cols] != 0)):
            rows = (present & broken).any(axis=1) & ~(present & ~broken).any(axis=1)
            if rows.any():
                rows.flags.writeable = False
                out.append((text, rows))
        return tuple(out)

    def admits(self, amount: int, ratio: np.ndarray | None = None) -> np.ndarray:
        """(n, k): where one provider's inventory takes ``amount`` more
        (``ratio``: an (n,) or (n, 1) allocation ratio to use instead):
        ``inventory.admits`` with its inventory-only parts remembered."""
        if ratio is None:
            fits = inventory.within(self.used, amount, self.usable())
        else:
            fits = inventory.fits(self.used, amount, self.total, self.reserved, ratio)
        return self.unit_ok(amount) & fits

    def refused(self, amount: int, ratio: np.ndarray | None = None) -> np.ndarray:
        """(n,): rows where no provider's inventory takes ``amount`` more
        (``ratio``: an (n,) allocation ratio to use instead), i.e.
        ``~admits(amount, ratio).any(axis=1)``. With one provider of the
        class per row (the usual node) it is read on the root's column alone,
        and the unit limits only where some row breaks them: two or three
        passes over the rows instead of six."""
        if self.k != 1:
            if ratio is not None:
                ratio = np.asarray(ratio).reshape(-1, 1)
            return ~self.admits(amount, ratio).any(axis=1)
        if self.data.shape[1] == 1:
            # one row (a host rechecked before its claim): the rule on numbers,
            # a dozen array operations fewer
            total, reserved, own_ratio, used, min_unit, max_unit, step = \
                self.data[:, 0, 0].tolist()
            if ratio is not None:
                own_ratio = float(np.asarray(ratio).reshape(-1)[0])
            admitted = inventory.unit_ok(amount, min_unit, max_unit, step) and \
                inventory.fits(used, amount, total, reserved, own_ratio)
            return np.array([not admitted])
        used = self.data[3, :, 0]
        if ratio is None:
            fits = inventory.within(used, amount, self.usable()[:, 0])
        else:
            fits = inventory.fits(used, amount, self.data[0, :, 0], self.data[1, :, 0],
                                  np.asarray(ratio).reshape(-1))
        # where the slot is absent nothing fits an amount above 0 (its usable
        # is 0): the unit limits change no answer when the present slots all
        # allow the amount
        if amount > 0 and self._derived(
                ("unit_ok_where_present", amount),
                lambda: bool((self.unit_ok(amount) | ~self.present).all())):
            return ~fits
        return ~(self.unit_ok(amount)[:, 0] & fits)

    def root(self, field: str) -> np.ndarray:
        """The root provider's ``field`` per row."""
        return self.data[RESOURCE_FIELDS.index(field), :, 0]

    def copy(self) -> ResourceColumns:
        out = ResourceColumns(self.data.copy())
        out._memo = dict(self._memo)
        out._stamp = self._stamp
        return out

    def grown(self, k: int) -> ResourceColumns:
        """The same columns with room for ``k`` providers per row."""
        out = ResourceColumns.absent(self.data.shape[1], k)
        out.data[:, :, :self.k] = self.data
        return out


class HostColumns:
    """Per-host numeric columns over a fixed list of HostStates."""

    FLOAT_FIELDS = FLOAT_FIELDS
    BOOL_FIELDS = BOOL_FIELDS

    def __init__(self, hosts: Sequence, classes: HostClasses | None = None) -> None:
        n = len(hosts)
        self.n = n
        self.hosts = list(hosts)
        self.classes = classes if classes is not None else HostClasses()
        # Each field is a view of one block per kind (a row is written in one
        # assignment per block). The cell fields are stored cell by cell (each
        # the transpose of a (MAX_CELLS, n) array): the first k cells of every
        # row, as NUMATopologyFilter reads them, are one contiguous block, not
        # a strided slice of every row.
        self._bind_fields(np.zeros((len(FLOAT_FIELDS), n), dtype=np.float64),
                          np.zeros((len(BOOL_FIELDS), n), dtype=bool),
                          np.full((len(CELL_FIELDS), MAX_CELLS, n), -1.0))
        #: How many ``cell_*`` columns any row has used (they only grow).
        self.cell_columns = 0
        #: Per row, the HostState.version the row was written from.
        self.versions = np.zeros(n, dtype=np.int64)
        self.index_by_host: dict[str, list[int]] = {}
        self.row_of_node: dict[int, int] = {}
        #: aggregate metadata key -> (values, present), see ``aggregate_min``.
        self._agg_min: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        #: Per row, the aggregates tuple the aggregate columns were computed from.
        self._agg_source: list[Any] = [None] * n
        #: id(aggregate) -> (aggregate, its rows); rebuilt after aggregates change.
        self._agg_rows: dict[int, tuple[Any, list[int]]] | None = None
        #: class name -> (codes per row, key per row).
        self._classes: dict[str, tuple[np.ndarray, list]] = {}
        #: resource class -> its columns (every class some row's tree has).
        self._res: dict[str, ResourceColumns] = {}
        #: trait -> rows whose root provider has it (traits asked so far).
        self._traits: dict[str, np.ndarray] = {}
        #: Per row, the provider tree its resource columns were written from.
        self._trees: list[Any] = [None] * n
        for i, hs in enumerate(self.hosts):
            self.index_by_host.setdefault(hs.host, []).append(i)
            self.row_of_node[hs.node_id] = i
        #: Per row its node id, and node id -> row as a dense array (-1: none).
        self._node_ids: np.ndarray | None = None
        self._node_rows: np.ndarray | None = None
        self._write_rows(range(n))

    # -- writing (the owner only) ---------------------------------------------
    def update(self, i: int, hs) -> None:
        """Rewrite row ``i`` from ``hs`` (the same host, or a dry-run copy of it)."""
        self.hosts[i] = hs
        self._write_rows((i,))

    def _bind_fields(self, floats: np.ndarray, bools: np.ndarray, cells: np.ndarray) -> None:
        """Take these blocks as the fields' storage: (FLOAT_FIELDS, n),
        (BOOL_FIELDS, n) and (CELL_FIELDS, MAX_CELLS, n)."""
        self._floats, self._bools, self._cells = floats, bools, cells
        for j, name in enumerate(FLOAT_FIELDS):
            setattr(self, name, floats[j])
        for j, name in enumerate(BOOL_FIELDS):
            setattr(self, name, bools[j])
        for j, name in enumerate(CELL_FIELDS):
            setattr(self, name, cells[j].T)

    def _write_rows(self, rows: Iterable[int]) -> None:
        floats, bools, cells = self._floats, self._bools, self._cells
        nf = len(FLOAT_FIELDS)
        hosts = self.hosts
        classes = self.classes
        class_cols = [(name, codes, keys) for name, (codes, keys) in self._classes.items()]
        versions = self.versions
        for i in rows:
            hs = hosts[i]
            version = hs.version
            values = _row_values(hs)
            floats[:, i] = np.array(values[:nf], dtype=np.float64)
            bools[:, i] = np.array(values[nf:], dtype=bool)
            cells[:, :, i] = _cell_values(hs.numa_topology, hs.cpu_allocation_ratio)
            if hs.numa_topology is not None:
                self.cell_columns = max(self.cell_columns,
                                        min(len(hs.numa_topology.cells), MAX_CELLS))
            self._write_resources(i, hs)
            for trait, rows_with in self._traits.items():
                rows_with[i] = trait in hs.tree.root.traits
            aggs = hs.aggregates
            if self._agg_source[i] is not aggs:
                # Only when the aggregates changed, not on every consume.
                self._agg_source[i] = aggs
                self._agg_rows = None
                for key, (vals, present) in self._agg_min.items():
                    _aggregate_min_row(hs, key, i, vals, present)
            for name, codes, keys in class_cols:
                key = classes.key(name, hs)
                keys[i] = key
                codes[i] = classes.code(name, key)
            # Stamped last: a reader that finds the stamp equal to the host's
            # version reads a row written whole (with its class codes).
            versions[i] = version

    def _write_resources(self, i: int, hs) -> None:
        """Row ``i`` of every resource class from ``hs``'s tree and usage: only
        the usage when the row's tree is the one it was written from (trees are
        interned: the same object while the inventories stay the same)."""
        tree, usage = hs.tree, hs.usage
        by_class = tree.by_class
        if self._trees[i] is tree:
            for rc, slots in by_class.items():
                used = self._res[rc].data[3]
                j = 0 if tree.slots[slots[0]][0] == 0 else 1
                for slot in slots:
                    used[i, j] = usage[slot] if slot < len(usage) else 0
                    j += 1
            return
        for rc, slots in by_class.items():
            # column 0 is the root's, even where the root has none of the class
            needed = len(slots) + (tree.slots[slots[0]][0] != 0)
            res = self._res.get(rc)
            if res is None:
                self._res[rc] = ResourceColumns.absent(self.n, needed)
            elif res.k < needed:
                self._res[rc] = res.grown(needed)
        for rc, res in self._res.items():
            data = res.data
            data[:, i, :] = _ABSENT_COLUMN
            slots = by_class.get(rc)
            if not slots:
                continue
            # the root's inventory in column 0, the children's after it
            j = 0 if tree.slots[slots[0]][0] == 0 else 1
            for slot in slots:
                inv = tree.slot_inventory(slot)
                data[:, i, j] = (inv.total, inv.reserved, inv.allocation_ratio,
                                 usage[slot] if slot < len(usage) else 0, inv.min_unit,
                                 inv.max_unit, inv.step_size)
                j += 1
        # after the row is written: what was derived from the old one is stale
        self._trees[i] = tree
        for res in self._res.values():
            res.forget()

    # -- reading ----------------------------------------------------------------
    def node_ids(self) -> np.ndarray:
        """Per row, its node id (built on first use; rows never change)."""
        if self._node_ids is None:
            self._node_ids = np.fromiter((hs.node_id for hs in self.hosts), dtype=np.int64,
                                         count=self.n)
        return self._node_ids

    def rows_of_nodes(self, node_ids: np.ndarray) -> np.ndarray:
        """The row of each of ``node_ids`` (-1: not one of these rows), a new array."""
        if self._node_rows is None:
            ids = self.node_ids()
            lookup = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int64)
            lookup[ids] = np.arange(self.n)
            self._node_rows = lookup
        lookup = self._node_rows
        node_ids = np.asarray(node_ids, dtype=np.int64)
        inside = (node_ids >= 0) & (node_ids < len(lookup))
        return np.where(inside, lookup[np.where(inside, node_ids, 0)], -1)

    def resources(self, rc: str) -> ResourceColumns:
        """The columns of resource class ``rc`` (all absent when no row has it)."""
        res = self._res.get(rc)
        return ResourceColumns.absent(self.n) if res is None else res

    def resource_classes(self) -> list[str]:
        return list(self._res)

    def trait_rows(self, trait: str) -> np.ndarray:
        """Rows whose root provider has ``trait`` (built on first use, then kept
        up to date)."""
        rows = self._traits.get(trait)
        if rows is None:
            rows = np.fromiter((trait in hs.tree.root.traits for hs in self.hosts),
                               dtype=bool, count=self.n)
            self._traits[trait] = rows
        return rows

    # The classic columns: views of the root provider's VCPU, MEMORY_MB, DISK_GB.
    def _root_limit(self, rc: str) -> np.ndarray:
        return self.resources(rc).usable()[:, 0]

    def _root_usable(self, rc: str) -> np.ndarray:
        res = self.resources(rc)
        return res._derived("root_usable", lambda: res.root("total") - res.root("reserved"))

    vcpus = property(lambda self: self.resources(VCPU).root("total"))
    vcpus_used = property(lambda self: self.resources(VCPU).root("used"))
    vcpus_limit = property(lambda self: self._root_limit(VCPU))
    vcpus_usable = property(lambda self: self._root_usable(VCPU))
    cpu_ratio = property(lambda self: self.resources(VCPU).root("allocation_ratio"))
    memory_used = property(lambda self: self.resources(MEMORY_MB).root("used"))
    memory_limit = property(lambda self: self._root_limit(MEMORY_MB))
    memory_usable = property(lambda self: self._root_usable(MEMORY_MB))
    ram_ratio = property(lambda self: self.resources(MEMORY_MB).root("allocation_ratio"))
    free_ram = property(lambda self: self._root_usable(MEMORY_MB) - self.memory_used)
    disk_used = property(lambda self: self.resources(DISK_GB).root("used") * 1024)
    disk_limit = property(lambda self: self._root_limit(DISK_GB) * 1024)
    disk_usable = property(lambda self: self._root_usable(DISK_GB) * 1024)
    disk_total = property(lambda self: self.resources(DISK_GB).root("total") * 1024)
    disk_ratio = property(lambda self: self.resources(DISK_GB).root("allocation_ratio"))
    free_disk = property(lambda self: self.disk_usable - self.disk_used)

    def class_codes(self, name: str) -> np.ndarray:
        """The class code of every row for the registered class ``name`` (built on
        first use, then kept up to date by ``update``)."""
        entry = self._classes.get(name)
        if entry is None:
            classes = self.classes
            keys: list[Hashable] = [classes.key(name, hs) for hs in self.hosts]
            codes = np.fromiter((classes.code(name, k) for k in keys), dtype=np.int64,
                                count=self.n)
            entry = self._classes[name] = (codes, keys)
        return entry[0]

    def aggregate_min(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, present) per row: ``present`` where the host's aggregates give
        ``key`` a valid float value, ``values`` the smallest of them (0 elsewhere).
        Built on first use for a key, then kept up to date."""
        cached = self._agg_min.get(key)
        if cached is None:
            values = np.zeros(self.n, dtype=np.float64)
            present = np.zeros(self.n, dtype=bool)
            # Only rows in an aggregate that mentions the key can have a value
            # (usually none: a walk over every host costs 1.6 s at 100,000).
            rows: set[int] = set()
            for agg, agg_rows in self._aggregate_rows().values():
                if key in agg.metadata:
                    rows.update(agg_rows)
            for i in sorted(rows):
                _aggregate_min_row(self.hosts[i], key, i, values, present)
            cached = self._agg_min[key] = (values, present)
        return cached

    def _aggregate_rows(self) -> dict[int, tuple[Any, list[int]]]:
        """Each distinct aggregate of the rows, with the rows that have it."""
        if self._agg_rows is None:
            by_agg: dict[int, tuple[Any, list[int]]] = {}
            for i, aggs in enumerate(self._agg_source):
                for agg in aggs or ():
                    entry = by_agg.get(id(agg))
                    if entry is None:
                        entry = by_agg[id(agg)] = (agg, [])
                    entry[1].append(i)
            self._agg_rows = by_agg
        return self._agg_rows

    def host_indexes(self, names: Iterable[str]) -> list[int]:
        """Rows of the hosts with these host names."""
        out: list[int] = []
        for name in names:
            out.extend(self.index_by_host.get(name, ()))
        return out

    def node_indexes(self, node_ids: Iterable[int]) -> list[int]:
        """Rows of these node ids (unknown ids are left out)."""
        rows = self.row_of_node
        return [rows[n] for n in node_ids if n in rows]

    def nodename_mask(self, nodenames: Iterable[str]) -> np.ndarray:
        wanted = set(nodenames)
        return np.fromiter((h.nodename in wanted for h in self.hosts), dtype=bool,
                           count=self.n)

    # -- derived columns objects ----------------------------------------------
    def copy(self) -> HostColumns:
        """Columns with the same rows that later ``update`` calls leave apart from
        these (a dry run's overlay); class codes are shared with these."""
        other = object.__new__(HostColumns)
        other.n = self.n
        other.hosts = list(self.hosts)
        other.classes = self.classes
        other._bind_fields(self._floats.copy(), self._bools.copy(), self._cells.copy())
        other.versions = self.versions.copy()
        other.cell_columns = self.cell_columns
        other.index_by_host = self.index_by_host
        other.row_of_node = self.row_of_node
        other._node_ids = self._node_ids
        other._node_rows = self._node_rows
        other._agg_min = {k: (v.copy(), p.copy()) for k, (v, p) in self._agg_min.items()}
        other._agg_source = list(self._agg_source)
        other._agg_rows = None
        other._classes = {k: (c.copy(), list(keys)) for k, (c, keys) in self._classes.items()}
        other._res = {rc: res.copy() for rc, res in self._res.items()}
        other._traits = {t: rows.copy() for t, rows in self._traits.items()}
        other._trees = list(self._trees)
        return other

    def one_row(self, i: int) -> HostColumns:
        """Row ``i`` alone, as columns of one row that read these (views, not
        copies: nothing is written through them, and they show row ``i`` as it
        is whenever they are read); class codes are shared with these. The
        views are taken when first read: a recheck reads a few of them."""
        hs = self.hosts[i]
        other = object.__new__(_RowView)
        other._parent = self
        other._rows = slice(i, i + 1)
        other.n = 1
        other.hosts = [hs]
        other.classes = self.classes
        other.cell_columns = self.cell_columns
        other.index_by_host = {hs.host: [0]}
        other.row_of_node = {hs.node_id: 0}
        other._node_ids = None
        other._node_rows = None
        other._agg_source = [self._agg_source[i]]
        other._agg_rows = None
        other._trees = [self._trees[i]]
        return other

    def needs_recode(self) -> bool:
        """Whether some class has handed out many more codes than there are rows."""
        limit = 4 * self.n + 4096
        return any(self.classes.size(name) > limit for name in self._classes)

    def recoded(self) -> HostColumns:
        """The same columns with a fresh HostClasses: codes re-interned from the
        rows' current keys (answers remembered so far are dropped)."""
        classes = HostClasses()
        for name, fn in self.classes.key_fns().items():
            classes.register(name, fn)
        other = self.copy()
        other.classes = classes
        for name, (codes, keys) in other._classes.items():
            codes[:] = [classes.code(name, k) for k in keys]
        return other


#: Field name -> (block attribute, index in the block).
_FIELD_BLOCKS = {**{name: ("_floats", j) for j, name in enumerate(FLOAT_FIELDS)},
                 **{name: ("_bools", j) for j, name in enumerate(BOOL_FIELDS)},
                 **{name: ("_cells", j) for j, name in enumerate(CELL_FIELDS)}}


def _row_field(name: str, parent: HostColumns, rows: slice) -> Any:
    """Field ``name`` of ``parent``'s ``rows`` as a view."""
    kind, j = _FIELD_BLOCKS[name]
    if kind == "_cells":
        return parent._cells[j, :, rows].T
    return getattr(parent, kind)[j, rows]


#: Attribute -> how a ``_RowView`` takes it from its parent's row.
_ROW_VIEWS = {
    **{name: functools.partial(_row_field, name) for name in _FIELD_BLOCKS},
    "_floats": lambda parent, rows: parent._floats[:, rows],
    "_bools": lambda parent, rows: parent._bools[:, rows],
    "_cells": lambda parent, rows: parent._cells[:, :, rows],
    "versions": lambda parent, rows: parent.versions[rows],
    "_agg_min": lambda parent, rows: {k: (v[rows], p[rows])
                                      for k, (v, p) in list(parent._agg_min.items())},
    "_classes": lambda parent, rows: {k: (c[rows], [keys[rows.start]])
                                      for k, (c, keys) in list(parent._classes.items())},
    "_res": lambda parent, rows: {rc: ResourceColumns(res.data[:, rows])
                                  for rc, res in list(parent._res.items())},
    "_traits": lambda parent, rows: {t: r[rows] for t, r in list(parent._traits.items())},
}


class _TakenWhenRead:
    """A ``_RowView`` attribute taken from the parent's row when first read,
    then kept in the instance (which later reads find first)."""

    __slots__ = ("name", "take")

    def __init__(self, name: str, take) -> None:
        self.name, self.take = name, take

    def __get__(self, view: Any, owner: type | None = None) -> Any:
        if view is None:
            return self
        value = view.__dict__[self.name] = self.take(view._parent, view._rows)
        return value


class _RowView(HostColumns):
    """``HostColumns.one_row``: a field, the versions, and the class, trait,
    aggregate and resource columns are views of the parent's row, each taken
    when it is first read (then kept as an attribute)."""


for _name, _take in _ROW_VIEWS.items():
    setattr(_RowView, _name, _TakenWhenRead(_name, _take))
del _name, _take


def _aggregate_min_row(hs, key: str, i: int, values: np.ndarray, present: np.ndarray) -> None:
    value = hs.aggregate_min_float(key, None) if hs.aggregates else None
    present[i] = value is not None
    values[i] = 0.0 if value is None else value


def seconds(dt: datetime.datetime) -> float:
    """Seconds since the epoch of a naive UTC datetime (heartbeat columns)."""
    return (dt - _EPOCH).total_seconds()
