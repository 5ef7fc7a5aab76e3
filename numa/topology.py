"""Host, instance and fitted NUMA topologies as frozen values.

``from_primitive`` validates a plain dict (JSON from ``compute_nodes.numa_topology``, the
fleet file, an allocation row or a tool case) and raises ``NumaError`` naming the field;
``to_primitive`` gives the dict back. The host usage fields (``cpu_usage``,
``memory_usage``, ``pinned_cpus``, page ``used``/``reserved``) may be absent, as in the
fleet file, and then mean zero.

Host CPUs come in two pools per cell: ``cpuset`` for floating (shared) guest vCPUs and
``pcpuset`` for pinned (dedicated) ones. ``cpu_usage`` counts floating vCPUs placed on
the cell; pinned vCPUs are tracked by ``pinned_cpus``.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from numa.errors import NumaError

SHARED = "shared"
DEDICATED = "dedicated"
MIXED = "mixed"
CPU_POLICIES = (SHARED, DEDICATED, MIXED)

PREFER = "prefer"
ISOLATE = "isolate"
REQUIRE = "require"
THREAD_POLICIES = (PREFER, ISOLATE, REQUIRE)

PAGES_SMALL = "small"
PAGES_LARGE = "large"
PAGES_ANY = "any"
PAGE_KEYWORDS = (PAGES_SMALL, PAGES_LARGE, PAGES_ANY)

EMULATOR_SHARE = "share"
EMULATOR_ISOLATE = "isolate"
EMULATOR_POLICIES = (EMULATOR_SHARE, EMULATOR_ISOLATE)


# -- validation helpers -------------------------------------------------------------------

def _mapping(value: Any, field: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise NumaError(field, "expected an object")
    return value


def _int(value: Any, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NumaError(field, f"expected an integer >= {minimum}")
    if value < minimum:
        raise NumaError(field, f"expected an integer >= {minimum}, got {value}")
    return value


def _opt_int(data: Mapping, key: str, field: str, default: int = 0) -> int:
    value = data.get(key)
    return default if value is None else _int(value, f"{field}.{key}")


def _cpus(value: Any, field: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise NumaError(field, "expected a list of CPU numbers")
    cpus = [_int(cpu, field) for cpu in value]
    result = frozenset(cpus)
    if len(result) != len(cpus):
        raise NumaError(field, "a CPU is listed twice")
    return result


def _choice(value: Any, field: str, choices: tuple[str, ...], allow_none: bool = True):
    if value is None and allow_none:
        return None
    if value not in choices:
        allowed = " | ".join(choices) + (" | null" if allow_none else "")
        raise NumaError(field, f"expected one of {allowed}, got {value!r}")
    return value


def _list(value: Any, field: str) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise NumaError(field, "expected a list")
    return list(value)


# -- host ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MemPage:
    """Pages of one size on a host cell: ``total``, ``used`` by guests, ``reserved``."""

    size_kb: int
    total: int
    used: int = 0
    reserved: int = 0

    @property
    def free(self) -> int:
        return max(0, self.total - self.used - self.reserved)

    @classmethod
    def from_primitive(cls, data: Any, field: str = "mempage") -> MemPage:
        data = _mapping(data, field)
        return cls(
            size_kb=_int(data.get("size_kb"), f"{field}.size_kb", minimum=1),
            total=_int(data.get("total"), f"{field}.total"),
            used=_opt_int(data, "used", field),
            reserved=_opt_int(data, "reserved", field),
        )

    def to_primitive(self) -> dict:
        return {"size_kb": self.size_kb, "total": self.total, "used": self.used,
                "reserved": self.reserved}


@dataclasses.dataclass(frozen=True)
class HostCell:
    """One host NUMA cell: its CPU pools, hyperthread siblings, memory and usage."""

    id: int
    socket: int | None = None
    cpuset: frozenset[int] = frozenset()
    pcpuset: frozenset[int] = frozenset()
    siblings: tuple[frozenset[int], ...] = ()
    memory_mb: int = 0
    mempages: tuple[MemPage, ...] = ()
    cpu_usage: int = 0
    memory_usage: int = 0
    pinned_cpus: frozenset[int] = frozenset()

    @property
    def free_pcpus(self) -> frozenset[int]:
        """Dedicated CPUs not pinned by any guest."""
        return self.pcpuset - self.pinned_cpus

    @property
    def has_smt(self) -> bool:
        """Some core of the cell has more than one thread (a sibling set of two or more)."""
        return any(len(sibling_set) > 1 for sibling_set in self.siblings)

    def mempage(self, size_kb: int) -> MemPage | None:
        """The pages of ``size_kb``, or None when the cell has none of that size."""
        for page in self.mempages:
            if page.size_kb == size_kb:
                return page
        return None

    def cores(self) -> tuple[tuple[int, ...], ...]:
        """The cell's dedicated CPUs grouped by physical core (sibling set ∩ pcpuset);
        a CPU in no sibling set is a core of its own. Ordered by lowest CPU."""
        return self._cores

    @functools.cached_property
    def _cores(self) -> tuple[tuple[int, ...], ...]:
        # Cached on the (immutable) value: it depends on the hardware, not on usage.
        seen: set[int] = set()
        cores = []
        for sibling_set in self.siblings:
            core = tuple(sorted(sibling_set & self.pcpuset))
            if core:
                cores.append(core)
                seen.update(core)
        cores.extend((cpu,) for cpu in self.pcpuset - seen)
        return tuple(sorted(cores))

    @classmethod
    def from_primitive(cls, data: Any, field: str = "cell") -> HostCell:
        data = _mapping(data, field)
        cpuset = _cpus(data.get("cpuset"), f"{field}.cpuset")
        pcpuset = _cpus(data.get("pcpuset"), f"{field}.pcpuset")
        if cpuset & pcpuset:
            raise NumaError(f"{field}.pcpuset",
                            f"CPUs {_fmt(cpuset & pcpuset)} are also in cpuset")
        siblings = []
        in_siblings: set[int] = set()
        for i, item in enumerate(_list(data.get("siblings"), f"{field}.siblings")):
            sibling_set = _cpus(item, f"{field}.siblings.{i}")
            if not sibling_set:
                raise NumaError(f"{field}.siblings.{i}", "expected a non-empty list")
            if sibling_set & in_siblings:
                raise NumaError(f"{field}.siblings.{i}",
                                f"CPUs {_fmt(sibling_set & in_siblings)} are in two sets")
            in_siblings |= sibling_set
            siblings.append(sibling_set)
        mempages = []
        for i, item in enumerate(_list(data.get("mempages"), f"{field}.mempages")):
            page = MemPage.from_primitive(item, f"{field}.mempages.{i}")
            if any(p.size_kb == page.size_kb for p in mempages):
                raise NumaError(f"{field}.mempages.{i}.size_kb",
                                f"page size {page.size_kb} listed twice")
            mempages.append(page)
        pinned = _cpus(data.get("pinned_cpus"), f"{field}.pinned_cpus")
        if not pinned <= pcpuset:
            raise NumaError(f"{field}.pinned_cpus",
                            f"CPUs {_fmt(pinned - pcpuset)} are not in pcpuset")
        socket = data.get("socket")
        return cls(
            id=_int(data.get("id"), f"{field}.id"),
            socket=None if socket is None else _int(socket, f"{field}.socket"),
            cpuset=cpuset,
            pcpuset=pcpuset,
            siblings=tuple(siblings),
            memory_mb=_int(data.get("memory_mb"), f"{field}.memory_mb"),
            mempages=tuple(mempages),
            cpu_usage=_opt_int(data, "cpu_usage", field),
            memory_usage=_opt_int(data, "memory_usage", field),
            pinned_cpus=pinned,
        )

    def to_primitive(self) -> dict:
        return {
            "id": self.id,
            "socket": self.socket,
            "cpuset": sorted(self.cpuset),
            "pcpuset": sorted(self.pcpuset),
            "siblings": [sorted(s) for s in self.siblings],
            "memory_mb": self.memory_mb,
            "mempages": [p.to_primitive() for p in self.mempages],
            "cpu_usage": self.cpu_usage,
            "memory_usage": self.memory_usage,
            "pinned_cpus": sorted(self.pinned_cpus),
        }


@dataclasses.dataclass(frozen=True)
class HostTopology:
    """A host's NUMA cells (the JSON of ``compute_nodes.numa_topology``)."""

    cells: tuple[HostCell, ...]

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        # Topologies key the scheduler's caches: hash the cells once per value.
        return hash(self.cells)

    @functools.cached_property
    def has_smt(self) -> bool:
        """Some cell has SMT siblings (where thread policy ``isolate`` has a choice)."""
        return any(cell.has_smt for cell in self.cells)

    def cell(self, cell_id: int) -> HostCell | None:
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        return None

    @classmethod
    def from_primitive(cls, data: Any, field: str = "numa_topology") -> HostTopology:
        data = _mapping(data, field)
        return cls(cells=_cells(data, field, HostCell, "CPUs"))

    def to_primitive(self) -> dict:
        return {"cells": [cell.to_primitive() for cell in self.cells]}


#: CPU ids a host topology may name: below Linux's largest NR_CPUS (8192), with room.
MAX_CPU_ID = 65535
#: The smallest page size (KiB) a host may report; every size is a power of two.
MIN_PAGE_KB = 4


def check_host_layout(topology: HostTopology, memory_mb: int,
                      field: str = "numa_topology") -> None:
    """Raise NumaError unless ``topology`` could describe a host of ``memory_mb``
    MB: CPU ids at most ``MAX_CPU_ID``; sibling sets within their cell's CPUs (a
    host's ``vcpus`` may count fewer CPUs than its cells list, or more: it is
    not compared); the cells' memory at most
    the host's (plus 1/16 for what the kernel counts per node); page sizes powers
    of two of at least 4 KiB, each size's pages and all huge pages together
    within their cell's memory.

    ``from_primitive`` checks only that a topology is well formed (it also reads
    stored ones); this is what a report or a fleet file is held to."""
    cell_memory = 0
    for i, cell in enumerate(topology.cells):
        cf = f"{field}.cells.{i}"
        cpus = cell.cpuset | cell.pcpuset
        for key, pool in (("cpuset", cell.cpuset), ("pcpuset", cell.pcpuset)):
            if pool and max(pool) > MAX_CPU_ID:
                raise NumaError(f"{cf}.{key}", f"expected CPU ids <= {MAX_CPU_ID}, "
                                               f"got {max(pool)}")
        for j, sibling_set in enumerate(cell.siblings):
            if not sibling_set <= cpus:
                raise NumaError(f"{cf}.siblings.{j}",
                                f"CPUs {_fmt(sibling_set - cpus)} are not CPUs of this "
                                f"cell (cpuset or pcpuset)")
        cell_memory += cell.memory_mb
        cell_kb = (cell.memory_mb + 1) * 1024     # memory_mb is rounded down
        huge_kb = 0
        for j, page in enumerate(cell.mempages):
            pf = f"{cf}.mempages.{j}"
            size = page.size_kb
            if size < MIN_PAGE_KB or size & (size - 1):
                raise NumaError(f"{pf}.size_kb", f"expected a power of two >= "
                                                 f"{MIN_PAGE_KB}, got {size}")
            if page.total * size > cell_kb:
                raise NumaError(f"{pf}.total",
                                f"expected at most {cell_kb // size} pages of {size} KiB "
                                f"(the cell's memory_mb {cell.memory_mb}), got {page.total}")
            if size > MIN_PAGE_KB:
                huge_kb += page.total * size
        if huge_kb > cell_kb:
            raise NumaError(f"{cf}.mempages",
                            f"huge pages of {huge_kb // 1024} MB in all exceed the cell's "
                            f"memory_mb {cell.memory_mb}")
    allowed = memory_mb + memory_mb // 16
    if cell_memory > allowed:
        raise NumaError(f"{field}.cells", f"expected the cells' memory_mb to add up to "
                                          f"at most the host's memory_mb {memory_mb} "
                                          f"(+1/16), got {cell_memory}")


# -- instance -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InstanceCell:
    """One guest NUMA cell: floating vCPUs (``cpuset``), pinned vCPUs (``pcpuset``),
    memory, page size request (None, a size in KiB, or small | large | any) and policies."""

    id: int
    cpuset: frozenset[int] = frozenset()
    pcpuset: frozenset[int] = frozenset()
    memory_mb: int = 0
    pagesize: int | str | None = None
    cpu_policy: str = SHARED
    cpu_thread_policy: str | None = None

    @property
    def vcpus(self) -> int:
        return len(self.cpuset) + len(self.pcpuset)

    @classmethod
    def from_primitive(cls, data: Any, field: str = "cell") -> InstanceCell:
        data = _mapping(data, field)
        cpuset = _cpus(data.get("cpuset"), f"{field}.cpuset")
        pcpuset = _cpus(data.get("pcpuset"), f"{field}.pcpuset")
        if cpuset & pcpuset:
            raise NumaError(f"{field}.pcpuset",
                            f"vCPUs {_fmt(cpuset & pcpuset)} are also in cpuset")
        policy = _choice(data.get("cpu_policy"), f"{field}.cpu_policy", CPU_POLICIES) or SHARED
        if policy == SHARED and pcpuset:
            raise NumaError(f"{field}.pcpuset", "must be empty for cpu_policy shared")
        if policy == DEDICATED and cpuset:
            raise NumaError(f"{field}.cpuset", "must be empty for cpu_policy dedicated")
        if not cpuset and not pcpuset:
            raise NumaError(f"{field}.cpuset", "the cell has no vCPUs")
        thread_policy = _choice(data.get("cpu_thread_policy"), f"{field}.cpu_thread_policy",
                                THREAD_POLICIES)
        if thread_policy is not None and policy == SHARED:
            raise NumaError(f"{field}.cpu_thread_policy",
                            "needs cpu_policy dedicated or mixed")
        pagesize = data.get("pagesize")
        if pagesize is not None and pagesize not in PAGE_KEYWORDS:
            if isinstance(pagesize, bool) or not isinstance(pagesize, int) or pagesize < 1:
                raise NumaError(f"{field}.pagesize",
                                "expected null, a size in KiB, small, large or any")
        return cls(
            id=_int(data.get("id"), f"{field}.id"),
            cpuset=cpuset,
            pcpuset=pcpuset,
            memory_mb=_int(data.get("memory_mb"), f"{field}.memory_mb", minimum=1),
            pagesize=pagesize,
            cpu_policy=policy,
            cpu_thread_policy=thread_policy,
        )

    def to_primitive(self) -> dict:
        return {
            "id": self.id,
            "cpuset": sorted(self.cpuset),
            "pcpuset": sorted(self.pcpuset),
            "memory_mb": self.memory_mb,
            "pagesize": self.pagesize,
            "cpu_policy": self.cpu_policy,
            "cpu_thread_policy": self.cpu_thread_policy,
        }


@dataclasses.dataclass(frozen=True)
class InstanceTopology:
    """A guest's NUMA cells and where its emulator threads run (share | isolate)."""

    cells: tuple[InstanceCell, ...]
    emulator_threads_policy: str | None = None

    @property
    def emulator_threads_isolated(self) -> bool:
        return self.emulator_threads_policy == EMULATOR_ISOLATE

    @classmethod
    def from_primitive(cls, data: Any, field: str = "instance") -> InstanceTopology:
        data = _mapping(data, field)
        cells = _cells(data, field, InstanceCell, "vCPUs")
        emulator = _choice(data.get("emulator_threads_policy"),
                           f"{field}.emulator_threads_policy", EMULATOR_POLICIES)
        if emulator == EMULATOR_ISOLATE and not any(cell.pcpuset for cell in cells):
            raise NumaError(f"{field}.emulator_threads_policy",
                            "isolate needs dedicated vCPUs (cpu_policy dedicated or mixed)")
        return cls(cells=tuple(cells), emulator_threads_policy=emulator)

    def to_primitive(self) -> dict:
        return {"cells": [cell.to_primitive() for cell in self.cells],
                "emulator_threads_policy": self.emulator_threads_policy}


# -- fitted -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FittedCell:
    """Where one guest cell landed and what it takes from the host cell.

    ``cpu_pinning`` maps guest vCPU -> host CPU; ``cpuset_reserved`` are host CPUs held
    for isolated emulator threads; ``cpuset_isolated`` are siblings left idle by thread
    policy isolate; ``shared_cpus`` counts floating vCPUs; ``pagesize_kb`` is the page
    size the memory is taken in: the size asked for, or the host cell's smallest for a
    guest that asked none on a cell that lists pages (None: plain memory on a cell
    without a page list, no page accounting).
    """

    id: int
    host_cell_id: int
    cpu_pinning: dict[int, int] = dataclasses.field(default_factory=dict)
    pagesize_kb: int | None = None
    cpuset_reserved: frozenset[int] = frozenset()
    memory_mb: int = 0
    shared_cpus: int = 0
    cpuset_isolated: frozenset[int] = frozenset()

    @property
    def host_cpus(self) -> frozenset[int]:
        """Every host CPU this cell pins: vCPUs, emulator threads and idle siblings."""
        return frozenset(self.cpu_pinning.values()) | self.cpuset_reserved | self.cpuset_isolated

    @classmethod
    def from_primitive(cls, data: Any, field: str = "cell") -> FittedCell:
        data = _mapping(data, field)
        pinning_data = _mapping(data.get("cpu_pinning") or {}, f"{field}.cpu_pinning")
        pinning = {}
        for guest, host in pinning_data.items():
            key = f"{field}.cpu_pinning.{guest}"
            try:
                guest_cpu = int(guest)
            except (TypeError, ValueError):
                raise NumaError(key, "expected a vCPU number as key") from None
            pinning[_int(guest_cpu, key)] = _int(host, key)
        pagesize = data.get("pagesize_kb")
        return cls(
            id=_int(data.get("id"), f"{field}.id"),
            host_cell_id=_int(data.get("host_cell_id"), f"{field}.host_cell_id"),
            cpu_pinning=pinning,
            pagesize_kb=None if pagesize is None else _int(pagesize, f"{field}.pagesize_kb", 1),
            cpuset_reserved=_cpus(data.get("cpuset_reserved"), f"{field}.cpuset_reserved"),
            memory_mb=_opt_int(data, "memory_mb", field),
            shared_cpus=_opt_int(data, "shared_cpus", field),
            cpuset_isolated=_cpus(data.get("cpuset_isolated"), f"{field}.cpuset_isolated"),
        )

    def to_primitive(self) -> dict:
        return {
            "id": self.id,
            "host_cell_id": self.host_cell_id,
            "cpu_pinning": {str(g): h for g, h in sorted(self.cpu_pinning.items())},
            "pagesize_kb": self.pagesize_kb,
            "cpuset_reserved": sorted(self.cpuset_reserved),
            "memory_mb": self.memory_mb,
            "shared_cpus": self.shared_cpus,
            "cpuset_isolated": sorted(self.cpuset_isolated),
        }


@dataclasses.dataclass(frozen=True)
class FittedTopology:
    """A guest topology placed on a host: one ``FittedCell`` per guest cell, in order.

    Stored as JSON with the allocation; it holds all that is needed to remove the usage.
    """

    cells: tuple[FittedCell, ...]
    emulator_threads_policy: str | None = None

    @property
    def host_cell_ids(self) -> frozenset[int]:
        return frozenset(cell.host_cell_id for cell in self.cells)

    @classmethod
    def from_primitive(cls, data: Any, field: str = "numa") -> FittedTopology:
        data = _mapping(data, field)
        cells = tuple(FittedCell.from_primitive(item, f"{field}.cells.{i}")
                      for i, item in enumerate(_list(data.get("cells"), f"{field}.cells")))
        emulator = _choice(data.get("emulator_threads_policy"),
                           f"{field}.emulator_threads_policy", EMULATOR_POLICIES)
        return cls(cells=cells, emulator_threads_policy=emulator)

    def to_primitive(self) -> dict:
        return {"cells": [cell.to_primitive() for cell in self.cells],
                "emulator_threads_policy": self.emulator_threads_policy}


def _cells(data: Mapping, field: str, cell_cls, cpu_word: str) -> tuple:
    """The validated ``cells`` of a topology: at least one, distinct ids, and no
    CPU in two cells."""
    cells = [cell_cls.from_primitive(item, f"{field}.cells.{i}")
             for i, item in enumerate(_list(data.get("cells"), f"{field}.cells"))]
    if not cells:
        raise NumaError(f"{field}.cells", "expected at least one cell")
    ids: set[int] = set()
    seen: set[int] = set()
    for i, cell in enumerate(cells):
        if cell.id in ids:
            raise NumaError(f"{field}.cells.{i}.id", f"cell id {cell.id} used twice")
        ids.add(cell.id)
        both = cell.cpuset | cell.pcpuset
        if both & seen:
            raise NumaError(f"{field}.cells.{i}",
                            f"{cpu_word} {_fmt(both & seen)} are also in another cell")
        seen |= both
    return tuple(cells)


def _fmt(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
