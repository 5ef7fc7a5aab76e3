"""Memory and huge pages, per host and per NUMA node.

Host memory is ``MemTotal`` of ``/proc/meminfo``. Per node: ``MemTotal`` of
``node<N>/meminfo`` and ``node<N>/hugepages/hugepages-<size>kB/{nr,free}_hugepages``.
Without NUMA the single node 0 has the host's memory and the huge pages of
``/sys/kernel/mm/hugepages``.
"""
from __future__ import annotations

import dataclasses
import re

from scheduler.agent.kernel import KernelTree, KernelTreeError

_MEMINFO_LINE = re.compile(r"^(?:Node\s+\d+\s+)?([A-Za-z_()0-9]+):\s+(\d+)(?:\s+kB)?$")
_HUGEPAGE_DIR = re.compile(r"^hugepages-(\d+)kB$")


@dataclasses.dataclass(frozen=True)
class HugePages:
    size_kb: int
    total: int
    free: int


@dataclasses.dataclass(frozen=True)
class NodeMemory:
    node: int
    total_kb: int
    free_kb: int | None
    hugepages: tuple[HugePages, ...]   # by size

    @property
    def hugepage_kb(self) -> int:
        return sum(h.size_kb * h.total for h in self.hugepages)


@dataclasses.dataclass(frozen=True)
class MemoryFacts:
    total_kb: int
    nodes: dict[int, NodeMemory]


def parse_meminfo(text: str, path: str) -> dict[str, int]:
    """``meminfo`` lines (``MemTotal: 123 kB`` or ``Node 0 MemTotal: 123 kB``) by key."""
    values = {}
    for line in text.splitlines():
        m = _MEMINFO_LINE.match(line.strip())
        if m:
            values[m.group(1)] = int(m.group(2))
    if "MemTotal" not in values:
        raise KernelTreeError(f"{path}: no MemTotal line")
    return values


def _hugepages(tree: KernelTree, directory: str) -> tuple[HugePages, ...]:
    pages = []
    for name in tree.listdir(directory):
        m = _HUGEPAGE_DIR.match(name)
        if not m:
            continue
        path = f"{directory}/{name}"
        pages.append(HugePages(size_kb=int(m.group(1)),
                               total=tree.read_int(f"{path}/nr_hugepages") or 0,
                               free=tree.read_int(f"{path}/free_hugepages") or 0))
    return tuple(sorted(pages, key=lambda p: p.size_kb))


def discover_memory(tree: KernelTree) -> MemoryFacts:
    path = tree.proc("meminfo")
    text = tree.read(path)
    if text is None:
        raise KernelTreeError(f"{path}: missing")
    host = parse_meminfo(text, path)
    nodes: dict[int, NodeMemory] = {}
    for node, node_path in tree.numbered(tree.sys("devices", "system", "node"), "node").items():
        info_path = f"{node_path}/meminfo"
        info_text = tree.read(info_path)
        if info_text is None:
            raise KernelTreeError(f"{info_path}: missing")
        info = parse_meminfo(info_text, info_path)
        nodes[node] = NodeMemory(node=node, total_kb=info["MemTotal"],
                                 free_kb=info.get("MemFree"),
                                 hugepages=_hugepages(tree, f"{node_path}/hugepages"))
    if not nodes:
        nodes[0] = NodeMemory(node=0, total_kb=host["MemTotal"], free_kb=host.get("MemFree"),
                              hugepages=_hugepages(tree, tree.sys("kernel", "mm", "hugepages")))
    return MemoryFacts(total_kb=host["MemTotal"], nodes=nodes)


# -- [compute] reserved_huge_pages ------------------------------------------------------

_SIZE = re.compile(r"^([0-9]+)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)
_UINT = re.compile(r"^[0-9]+$")
_UNIT_KB = {"": 1, "K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3}
_RESERVED_KEYS = ("node", "size", "count")


def _page_size_kb(text: str) -> int | None:
    """``2048``, ``2048K``, ``2MB``, ``1GB``, ``1G`` as KiB (a bare number is KiB)."""
    m = _SIZE.match(text.strip())
    if m is None or int(m.group(1)) <= 0:
        return None
    return int(m.group(1)) * _UNIT_KB[m.group(2).upper()]


def parse_reserved_huge_pages(values: list[str], field: str = "compute.reserved_huge_pages"
                              ) -> dict[tuple[int, int], int]:
    """Pages held back for the host, ``{(numa node, page size in KiB): count}``.

    Each value is Nova's ``node:0,size:2048,count:64`` (``size`` in KiB, or with
    a unit: ``2MB``, ``1GB``). Raises ``ReservedPagesError`` naming
    ``{field}[i]`` and the bad key.
    """
    reserved: dict[tuple[int, int], int] = {}
    for i, text in enumerate(values):
        where = f"{field}[{i}]"
        items: dict[str, str] = {}
        for part in (p.strip() for p in text.split(",")):
            key, sep, value = (s.strip() for s in part.partition(":"))
            if not sep or not key or not value:
                raise ReservedPagesError(where, f"expected node:N,size:KiB,count:N, got "
                                                f"{text!r}")
            if key not in _RESERVED_KEYS:
                raise ReservedPagesError(f"{where}.{key}", f"unknown key; expected "
                                                           f"{', '.join(_RESERVED_KEYS)}")
            if key in items:
                raise ReservedPagesError(f"{where}.{key}", "given twice")
            items[key] = value
        for key in _RESERVED_KEYS:
            if key not in items:
                raise ReservedPagesError(f"{where}.{key}", "required")
        node = items["node"]
        if not _UINT.match(node):
            raise ReservedPagesError(f"{where}.node",
                                     f"expected a NUMA node id (integer >= 0), got {node!r}")
        size = _page_size_kb(items["size"])
        if size is None:
            raise ReservedPagesError(f"{where}.size", f"expected a page size in KiB or with "
                                                      f"a unit (2048, 2MB, 1GB), got "
                                                      f"{items['size']!r}")
        count = items["count"]
        if not _UINT.match(count) or int(count) > 2 ** 31 - 1:
            raise ReservedPagesError(f"{where}.count",
                                     f"expected a page count (integer >= 0), got {count!r}")
        if (int(node), size) in reserved:
            raise ReservedPagesError(where, f"node {int(node)} {size} KiB pages are "
                                            f"reserved twice")
        reserved[(int(node), size)] = int(count)
    return reserved


class ReservedPagesError(ValueError):
    """A bad ``reserved_huge_pages`` value: ``field`` names it, ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
