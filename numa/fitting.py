"""Fit a guest NUMA topology onto a host's: which host cell takes each guest cell, which
host CPUs the pinned vCPUs get, which page size the memory comes in.

Rules, per guest cell on one host cell:

- memory without a page size request: ``memory_usage + memory_mb`` within
  ``memory_mb * ram_allocation_ratio`` (a ratio above 1 does not apply to guests with
  pinned vCPUs: they never over-commit memory), and never more than the cell has.
  When the host cell lists ``mempages``, such a guest gets small pages only (memory the
  host set aside as huge pages is not memory for it): a guest with pinned vCPUs needs
  that much *free* small-page memory, a shared guest that much small-page memory in
  total (then the ratio check); the fit records the small page size, so the usage is
  charged to the small-page pool;
- with a page size request: enough free pages (``total - used - reserved``) of the chosen
  size (and, for guests with shared vCPUs, the cell's memory usage within
  ``memory_mb * ram_allocation_ratio`` too); ``small`` is the host's smallest size,
  ``large`` any other (largest first), ``any`` every size (largest first), a number
  exactly that size;
- floating vCPUs: ``cpu_usage + n`` within ``len(cpuset) * cpu_allocation_ratio``, and no
  more than ``len(cpuset)``;
- pinned vCPUs (plus one CPU for isolated emulator threads on the first guest cell's host
  cell) on free pCPUs by thread policy: ``prefer`` (default) any free pCPUs, siblings
  first; ``isolate`` one entirely free core per vCPU, its other threads left idle;
  ``require`` entirely free cores with two or more threads, all filled except the last
  (the thread policy binds guest vCPUs: an isolated emulator threads' CPU under
  ``require`` is any other free pCPU).

A page size request with a host cell that lists no pages: ``small``/``any`` fall back to
the plain memory check, ``large`` or a size does not fit.

A multi-cell guest takes distinct host cells. The search is a depth-first assignment in
pack/spread order, pruned by a bipartite matching check on the cells still to place and
memoised on (guest cell, host cells used), so it never walks all permutations; CPUs are
picked only for the host cells finally chosen (``check_fit`` skips even that).
``limits`` defaults to ratios of 1.0 (no over-commit). ``limits=None`` means *no limits
object* (as in Nova): guests with shared vCPUs are checked against the cell's size only
(CPUs and memory, or small-page memory), not its usage; pinned vCPUs still need free
pCPUs and free memory.

``isolate_on_smt`` says what thread policy ``isolate`` does on a host cell whose CPUs
have SMT siblings: ``reserve-siblings`` (default) pins one thread of each whole free
core and keeps its siblings idle; ``refuse`` refuses the cell (Nova's behaviour).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from numa.topology import (
    ISOLATE,
    PAGES_ANY,
    PAGES_LARGE,
    PAGES_SMALL,
    REQUIRE,
    FittedCell,
    FittedTopology,
    HostCell,
    HostTopology,
    InstanceCell,
    InstanceTopology,
    MemPage,
)

PACK = "pack"
SPREAD = "spread"
STRATEGIES = (PACK, SPREAD)

RESERVE_SIBLINGS = "reserve-siblings"
REFUSE = "refuse"
ISOLATE_ON_SMT = (RESERVE_SIBLINGS, REFUSE)

PciCheck = Callable[[frozenset[int]], bool]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Over-commit ratios applied per host cell (floating vCPUs and plain memory)."""

    cpu_allocation_ratio: float = 1.0
    ram_allocation_ratio: float = 1.0


#: The ``limits`` used when none are given: ratios of 1.0.
NO_OVERCOMMIT = Limits()


@dataclasses.dataclass(frozen=True)
class FitResult:
    """The fitted topology, or None and a short human-readable ``reason``."""

    fitted: FittedTopology | None
    reason: str | None = None

    @property
    def fits(self) -> bool:
        return self.fitted is not None


class _Miss(NamedTuple):
    """A guest cell does not fit a host cell: how far the checks got (``stage``) and by
    how much it missed (``slack``, higher is closer), to report the most telling reason."""

    stage: int
    slack: float
    reason: str


_STAGE_MEMORY, _STAGE_SHARED, _STAGE_PINNED = 1, 2, 3
_EMULATOR_NOTE = " (incl. 1 for emulator threads)"


def fit_instance_to_host(host: HostTopology, instance: InstanceTopology,
                         limits: Limits | None = NO_OVERCOMMIT, pci_requests: Any = None,
                         pci_pools: Any = None, pci_check: PciCheck | None = None,
                         strategy: str = PACK,
                         isolate_on_smt: str = RESERVE_SIBLINGS) -> FitResult:
    """Place ``instance`` on ``host``; neither is modified.

    ``pci_check(host_cell_ids)`` (optional) accepts or refuses a candidate set of host
    cells for the PCI requests; when it is not given but ``pci_requests`` and
    ``pci_pools`` are, ``pci.matching.supports_requests`` is used. ``strategy`` ``pack``
    tries the busiest host cells first, ``spread`` the emptiest. ``limits`` and
    ``isolate_on_smt``: see the module docstring.
    """
    chosen, reason = _choose(host, instance, limits, pci_requests, pci_pools, pci_check,
                             strategy, isolate_on_smt)
    if chosen is None:
        return FitResult(None, reason)
    reserve = 1 if instance.emulator_threads_isolated else 0
    cells = tuple(_place_cell(host.cells[j], guest, reserve if index == 0 else 0, pagesize)
                  for index, (guest, (j, pagesize)) in enumerate(zip(instance.cells, chosen,
                                                                     strict=True)))
    return FitResult(FittedTopology(cells, instance.emulator_threads_policy))


def check_fit(host: HostTopology, instance: InstanceTopology,
              limits: Limits | None = NO_OVERCOMMIT, pci_requests: Any = None,
              pci_pools: Any = None, pci_check: PciCheck | None = None, strategy: str = PACK,
              isolate_on_smt: str = RESERVE_SIBLINGS) -> str | None:
    """Why ``instance`` does not fit ``host``, or None when it does: the answer of
    ``fit_instance_to_host`` without picking CPUs (cheaper, for filters)."""
    return _choose(host, instance, limits, pci_requests, pci_pools, pci_check, strategy,
                   isolate_on_smt)[1]


def choose_cells(host: HostTopology, instance: InstanceTopology,
                 limits: Limits | None = NO_OVERCOMMIT, strategy: str = PACK,
                 isolate_on_smt: str = RESERVE_SIBLINGS) -> tuple[frozenset[int] | None,
                                                                  str | None]:
    """The host cell ids ``fit_instance_to_host`` (without PCI) would put the guest
    on, and None; or (None, reason). No CPUs are picked."""
    chosen, reason = _choose(host, instance, limits, None, None, None, strategy,
                             isolate_on_smt)
    if chosen is None:
        return None, reason
    return frozenset(host.cells[j].id for j, _ in chosen), None


class _Rules(NamedTuple):
    """What the per-cell checks read besides the cells: the ratios (None: no limits
    object) and what ``isolate`` does on SMT cells."""

    limits: Limits | None
    refuse_isolate_on_smt: bool

    @property
    def cpu_ratio(self) -> float:
        return 1.0 if self.limits is None else self.limits.cpu_allocation_ratio


def _choose(host: HostTopology, instance: InstanceTopology, limits: Limits | None,
            pci_requests: Any, pci_pools: Any, pci_check: PciCheck | None,
            strategy: str, isolate_on_smt: str,
            ) -> tuple[list[tuple[int, int | None]] | None, str | None]:
    """(host cell position and page size per guest cell, None), or (None, reason)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if isolate_on_smt not in ISOLATE_ON_SMT:
        raise ValueError(f"isolate_on_smt must be one of {', '.join(ISOLATE_ON_SMT)}, "
                         f"got {isolate_on_smt!r}")
    rules = _Rules(limits, isolate_on_smt == REFUSE)
    if pci_check is None and pci_requests:
        pci_check = _pci_check_from_pools(host, pci_requests, pci_pools)
    guests = instance.cells
    if len(guests) > len(host.cells):
        return None, f"guest has {len(guests)} cells, host has {len(host.cells)}"
    order = _host_cell_order(host, instance, rules.cpu_ratio, strategy)
    reserve = 1 if instance.emulator_threads_isolated else 0

    if len(guests) == 1:
        return _choose_single(host, guests[0], order, rules, reserve, pci_check)

    # Which host cells each guest cell fits, in preference order. Guest cells of the
    # same shape (the usual even split) are checked once per host cell.
    checked: dict[tuple, _Ok | _Miss] = {}
    shapes = []
    candidates: list[list[int]] = []
    for index, guest in enumerate(guests):
        cell_reserve = reserve if index == 0 else 0
        shape = _shape(guest, cell_reserve)
        shapes.append(shape)
        row = []
        best: _Miss | None = None
        for j in order:
            result = checked.get((shape, j))
            if result is None:
                result = checked[shape, j] = _check_cell(host.cells[j], guest, rules,
                                                         cell_reserve)
            if isinstance(result, _Ok):
                row.append(j)
            elif best is None or result[:2] > best[:2]:
                best = result
        if not row:
            return None, f"guest cell {guest.id}: {best.reason}"
        candidates.append(row)
    if not _can_match(candidates, 0, 0):
        return None, "guest cells do not fit on distinct host cells"

    search = _Search(host, candidates, pci_check)
    chosen = search.run()
    if chosen is None:
        if search.gave_up:
            return None, "PCI requests: no set of host cells found within the search limit"
        return None, _PCI_REFUSED
    return [(j, checked[shape, j].pagesize) for shape, j in zip(shapes, chosen, strict=True)], None


_PCI_REFUSED = "PCI requests cannot be satisfied on the host cells that fit"


def _choose_single(host: HostTopology, guest: InstanceCell, order: list[int], rules: _Rules,
                   reserve: int, pci_check: PciCheck | None,
                   ) -> tuple[list[tuple[int, int | None]] | None, str | None]:
    """The common case: one guest cell, the first host cell in order that fits."""
    best: _Miss | None = None
    pci_refused = False
    for j in order:
        result = _check_cell(host.cells[j], guest, rules, reserve)
        if isinstance(result, _Ok):
            if pci_check is None or pci_check(frozenset((host.cells[j].id,))):
                return [(j, result.pagesize)], None
            pci_refused = True
        elif best is None or result[:2] > best[:2]:
            best = result
    return None, _PCI_REFUSED if pci_refused else best.reason


class _Search:
    """Depth-first assignment of guest cells to distinct host cells, in preference
    order, pruned by a matching check and memoised on (guest cell, host cells used).

    Without PCI the matching check means it never backtracks. With PCI, ``pci_check``
    is taken to be monotone (a superset of accepted host cells is accepted, as for every
    PCI NUMA policy): cells every accepted set needs are tried first, a branch whose
    cells plus all still reachable ones are refused is cut, and at most ``MAX_NODES``
    branches are walked before giving up.
    """

    MAX_NODES = 2000

    def __init__(self, host: HostTopology, candidates: list[list[int]],
                 pci_check: PciCheck | None) -> None:
        self.host = host
        self.candidates = candidates
        self.pci_check = pci_check
        self.dead: set[tuple[int, int]] = set()
        self.pci_answers: dict[int, bool] = {}
        self.nodes = 0
        self.gave_up = False

    def run(self) -> list[int] | None:
        if self.pci_check is not None:
            reachable = 0
            for row in self.candidates:
                for j in row:
                    reachable |= 1 << j
            if not self._pci_ok(reachable):
                return None
            needed = {j for j in range(len(self.host.cells))
                      if reachable >> j & 1 and not self._pci_ok(reachable & ~(1 << j))}
            if needed:
                self.candidates = [sorted(row, key=lambda j: j not in needed)
                                   for row in self.candidates]
        return self._place(0, 0, [])

    def _place(self, index: int, used: int, chosen: list[int]) -> list[int] | None:
        if index == len(self.candidates):
            return chosen if self._pci_ok(used) else None
        if (index, used) in self.dead or self.gave_up:
            return None
        self.nodes += 1
        if self.nodes > self.MAX_NODES:
            self.gave_up = True
            return None
        if self.pci_check is not None and index:
            reachable = used
            for row in self.candidates[index:]:
                for j in row:
                    reachable |= 1 << j
            if not self._pci_ok(reachable):
                self.dead.add((index, used))
                return None
        for j in self.candidates[index]:
            bit = 1 << j
            if used & bit or not _can_match(self.candidates, index + 1, used | bit):
                continue
            found = self._place(index + 1, used | bit, chosen + [j])
            if found is not None:
                return found
        if not self.gave_up:
            self.dead.add((index, used))
        return None

    def _pci_ok(self, cells: int) -> bool:
        """``pci_check`` on the host cell ids at the positions set in ``cells``."""
        if self.pci_check is None:
            return True
        if cells not in self.pci_answers:
            ids = frozenset(cell.id for j, cell in enumerate(self.host.cells) if cells >> j & 1)
            self.pci_answers[cells] = bool(self.pci_check(ids))
        return self.pci_answers[cells]


def _can_match(candidates: list[list[int]], start: int, used: int) -> bool:
    """Can guest cells ``start..`` each get a distinct host cell outside ``used``?
    (Kuhn's augmenting paths; a handful of cells, so this is cheap.)"""
    owner: dict[int, int] = {}

    def augment(index: int, seen: set[int]) -> bool:
        for j in candidates[index]:
            if used >> j & 1 or j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = index
                return True
        return False

    return all(augment(index, set()) for index in range(start, len(candidates)))


def _host_cell_order(host: HostTopology, instance: InstanceTopology, cpu_ratio: float,
                     strategy: str) -> list[int]:
    """Host cell positions, busiest first (pack) or emptiest first (spread), measured on
    the resource the guest cares about most; ties by cell id."""
    pinned = any(cell.pcpuset for cell in instance.cells)

    def room(cell: HostCell) -> tuple[float, float]:
        free_memory = cell.memory_mb - cell.memory_usage
        if pinned:
            return (len(cell.free_pcpus), free_memory)
        return (len(cell.cpuset) * cpu_ratio - cell.cpu_usage, free_memory)

    sign = 1 if strategy == PACK else -1
    keyed = []
    for j, cell in enumerate(host.cells):
        first, second = room(cell)
        keyed.append(((sign * first, sign * second, cell.id), j))
    return [j for _, j in sorted(keyed)]


# -- one guest cell on one host cell ------------------------------------------------------

class _Ok(NamedTuple):
    """A guest cell fits a host cell, with its memory in ``pagesize`` (None: plain)."""

    pagesize: int | None


def _shape(guest: InstanceCell, reserve: int) -> tuple:
    """What the checks of a guest cell depend on (not its id or vCPU numbers)."""
    return (len(guest.cpuset), len(guest.pcpuset), guest.memory_mb, guest.pagesize,
            guest.cpu_thread_policy, reserve)


def _check_cell(host: HostCell, guest: InstanceCell, rules: _Rules,
                reserve: int) -> _Ok | _Miss:
    """Does the guest cell fit the host cell? Cheap: counts only, no CPU picked."""
    pagesize = _fit_memory(host, guest, rules.limits)
    if isinstance(pagesize, _Miss):
        return pagesize
    shared = len(guest.cpuset)
    if shared:
        capacity = len(host.cpuset)
        headroom = (capacity if rules.limits is None
                    else capacity * rules.limits.cpu_allocation_ratio - host.cpu_usage)
        if shared > capacity or shared > headroom:
            return _Miss(_STAGE_SHARED, min(capacity, headroom) - shared,
                         f"no host cell with {shared} free shared CPUs")
    wanted = len(guest.pcpuset) + reserve
    if wanted:
        if (rules.refuse_isolate_on_smt and guest.cpu_thread_policy == ISOLATE
                and host.has_smt):
            return _Miss(_STAGE_PINNED, -wanted,
                         "thread policy isolate: host cell has SMT siblings "
                         "([numa] isolate_on_smt_hosts = refuse)")
        miss = _pinned_miss(host, wanted, guest.cpu_thread_policy, reserve)
        if miss is not None:
            return miss
    return _Ok(pagesize)


def _place_cell(host: HostCell, guest: InstanceCell, reserve: int,
                pagesize: int | None) -> FittedCell:
    """The fitted cell for a guest cell that ``_check_cell`` accepted on ``host``."""
    pinning: dict[int, int] = {}
    reserved: frozenset[int] = frozenset()
    isolated: frozenset[int] = frozenset()
    if guest.pcpuset or reserve:
        cpus, isolated = _pick_pcpus(host, len(guest.pcpuset), reserve,
                                     guest.cpu_thread_policy)
        vcpus = sorted(guest.pcpuset)
        pinning = dict(zip(vcpus, cpus[:len(vcpus)], strict=True))
        reserved = frozenset(cpus[len(vcpus):])
    return FittedCell(id=guest.id, host_cell_id=host.id, cpu_pinning=pinning,
                      pagesize_kb=pagesize, cpuset_reserved=reserved,
                      memory_mb=guest.memory_mb, shared_cpus=len(guest.cpuset),
                      cpuset_isolated=isolated)


def _fit_memory(host: HostCell, guest: InstanceCell,
                limits: Limits | None) -> int | None | _Miss:
    """The page size the guest cell's memory is taken in (None: plain memory, on a
    host cell that lists no pages)."""
    request = guest.pagesize
    sizes = sorted(page.size_kb for page in host.mempages)
    if request is None and sizes:
        miss = _small_pages_miss(host.mempage(sizes[0]), guest)
        if miss is not None:
            return miss
    if request is None or (not sizes and request in (PAGES_SMALL, PAGES_ANY)):
        miss = _plain_memory_miss(host, guest, limits)
        if miss is not None:
            return miss
        return sizes[0] if sizes else None
    if guest.cpuset and limits is not None:
        # Guests with shared vCPUs stay within the RAM ratio even in huge pages.
        limit = host.memory_mb * limits.ram_allocation_ratio
        if host.memory_usage + guest.memory_mb > limit:
            return _Miss(_STAGE_MEMORY, limit - host.memory_usage - guest.memory_mb,
                         f"no host cell with {guest.memory_mb} MB free memory within "
                         f"ram_allocation_ratio {limits.ram_allocation_ratio:g}")
    if request == PAGES_SMALL:
        candidates = sizes[:1]
    elif request == PAGES_LARGE:
        candidates = sizes[1:][::-1]
        if not candidates:
            return _Miss(_STAGE_MEMORY, -guest.memory_mb, "host has no large pages")
    elif request == PAGES_ANY:
        candidates = sizes[::-1]
    else:
        if request not in sizes:
            return _Miss(_STAGE_MEMORY, -guest.memory_mb, f"host has no {request} KiB pages")
        candidates = [request]
    memory_kb = guest.memory_mb * 1024
    for size in candidates:
        page = host.mempage(size)
        if memory_kb % size == 0 and memory_kb // size <= page.free:
            return size
    if len(candidates) == 1:
        size = candidates[0]
        if memory_kb % size:
            return _Miss(_STAGE_MEMORY, -guest.memory_mb,
                         f"{size} KiB pages: {guest.memory_mb} MB is not a whole number of pages")
        need, free = memory_kb // size, host.mempage(size).free
        return _Miss(_STAGE_MEMORY, (free - need) * size / 1024,
                     f"{size} KiB pages: need {need}, {free} free")
    most_free = max(host.mempage(size).free * size // 1024 for size in candidates)
    return _Miss(_STAGE_MEMORY, most_free - guest.memory_mb,
                 f"{request} pages: no page size with {guest.memory_mb} MB free")


def _small_pages_miss(small: MemPage, guest: InstanceCell) -> _Miss | None:
    """A guest cell without a page size request gets the host cell's smallest pages:
    free ones for pinned vCPUs (they never over-commit), else as many in total (the
    ratio check follows)."""
    if guest.memory_mb * 1024 % small.size_kb:
        return _Miss(_STAGE_MEMORY, -guest.memory_mb,
                     f"{small.size_kb} KiB pages: {guest.memory_mb} MB is not a whole number "
                     "of pages")
    pages = small.free if guest.pcpuset else small.total
    have_mb = pages * small.size_kb / 1024
    if guest.memory_mb > have_mb:
        what = "free" if guest.pcpuset else "in all"
        return _Miss(_STAGE_MEMORY, have_mb - guest.memory_mb,
                     f"no host cell with {guest.memory_mb} MB of small pages ({small.size_kb} "
                     f"KiB) {what}")
    return None


def _plain_memory_miss(host: HostCell, guest: InstanceCell,
                       limits: Limits | None) -> _Miss | None:
    """The cell's memory: within ``memory_mb * ratio`` with its usage (no ratio above 1
    for pinned vCPUs), never more than the cell has; without limits, shared guests are
    checked against the cell's size only."""
    if limits is None and not guest.pcpuset:
        room = float(host.memory_mb)
    else:
        ratio = 1.0 if limits is None else limits.ram_allocation_ratio
        if guest.pcpuset:
            ratio = min(ratio, 1.0)
        room = host.memory_mb * ratio - host.memory_usage
    if guest.memory_mb > min(room, host.memory_mb):
        return _Miss(_STAGE_MEMORY, room - guest.memory_mb,
                     f"no host cell with {guest.memory_mb} MB free memory")
    return None


def _pinned_miss(host: HostCell, wanted: int, thread_policy: str | None,
                 reserve: int) -> _Miss | None:
    """Why ``wanted`` pCPUs can't be had under the thread policy (None if they can)."""
    note = _EMULATOR_NOTE if reserve else ""
    pinned = host.pinned_cpus
    free = len(host.pcpuset) - len(pinned)
    if thread_policy == ISOLATE:
        have = free if free < wanted else sum(
            1 for core in host.cores() if pinned.isdisjoint(core))
        if have < wanted:
            return _Miss(_STAGE_PINNED, have - wanted,
                         f"no host cell with {wanted} free cores for thread policy isolate"
                         + note)
        return None
    if thread_policy == REQUIRE:
        # the vCPUs on whole free cores of two or more threads; the emulator threads'
        # CPU (not a guest vCPU) on any other free pCPU
        vcpus = wanted - reserve
        have = free - reserve if free < wanted else min(free - reserve, sum(
            len(core) for core in host.cores() if len(core) > 1 and pinned.isdisjoint(core)))
        if have < vcpus:
            more = f" and {reserve} more for emulator threads" if reserve else ""
            return _Miss(_STAGE_PINNED, have - vcpus,
                         f"no host cell with {vcpus} free pCPUs in sibling pairs" + more)
        return None
    if free < wanted:
        return _Miss(_STAGE_PINNED, free - wanted, f"no host cell with {wanted} free pCPUs"
                     + note)
    return None


def _pick_pcpus(host: HostCell, vcpus: int, reserve: int,
                thread_policy: str | None) -> tuple[list[int], frozenset[int]]:
    """``vcpus`` + ``reserve`` free pCPUs by thread policy (known to be there), the
    vCPUs' grouped by core so consecutive guest vCPUs land on siblings, and the sibling
    CPUs left idle by ``isolate``. With ``require`` the ``reserve`` (emulator threads)
    CPUs come from what the vCPUs left free, broken cores first."""
    pinned = host.pinned_cpus
    cores = host.cores()
    wanted = vcpus + reserve
    if thread_policy == ISOLATE:
        whole = sorted((core for core in cores if pinned.isdisjoint(core)),
                       key=lambda core: (len(core), core))
        taken = whole[:wanted]
        return [core[0] for core in taken], frozenset(c for core in taken for c in core[1:])
    free = [left for left in (tuple(c for c in core if c not in pinned) for core in cores)
            if left]
    if thread_policy == REQUIRE:
        pool = [core for core in cores if len(core) > 1 and pinned.isdisjoint(core)]
        cpus = _best_fit(pool, vcpus)
        if reserve:
            taken = set(cpus)
            rest = [left for left in (tuple(c for c in core if c not in taken) for core in free)
                    if left]
            cpus += _best_fit(rest, reserve)
        return cpus, frozenset()
    return _best_fit(free, wanted), frozenset()


def _best_fit(pool: Sequence[tuple[int, ...]], wanted: int) -> list[int]:
    """Take whole cores (largest, then lowest) while the remainder exceeds every core,
    then the smallest core that holds the remainder: siblings together, few cores broken."""
    by_size: dict[int, list[tuple[int, ...]]] = {}
    for core in sorted(pool, reverse=True):
        by_size.setdefault(len(core), []).append(core)  # each list: lowest core last
    cpus: list[int] = []
    remaining = wanted
    while remaining:
        sizes = [size for size, cores in by_size.items() if cores]
        holding = [size for size in sizes if size >= remaining]
        if holding:
            cpus.extend(by_size[min(holding)].pop()[:remaining])
            break
        size = max(sizes)
        cpus.extend(by_size[size].pop())
        remaining -= size
    return cpus


def _pci_check_from_pools(host: HostTopology, pci_requests: Any, pci_pools: Any) -> PciCheck:
    """A ``pci_check`` backed by ``pci.matching.supports_requests``."""
    from pci import matching  # imported late: numa does not need pci otherwise

    socket_of = {cell.id: cell.socket for cell in host.cells if cell.socket is not None}

    def check(cell_ids: frozenset[int]) -> bool:
        return matching.supports_requests(pci_pools, pci_requests, numa_cells=cell_ids,
                                          socket_of=socket_of)

    return check
