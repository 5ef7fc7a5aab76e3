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
