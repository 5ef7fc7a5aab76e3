"""CPUs, sockets, NUMA nodes and SMT siblings from ``/sys/devices/system``.

Online CPUs come from ``cpu/online``; for each, ``topology/physical_package_id``
is its socket and ``topology/thread_siblings_list`` its hyperthread siblings.
NUMA nodes and their CPUs come from ``node/node<N>/cpulist``; without a
``node`` directory (a kernel without NUMA) every CPU is in node 0.
"""
from __future__ import annotations

import dataclasses

from scheduler.agent.kernel import KernelTree, KernelTreeError


@dataclasses.dataclass(frozen=True)
class Cpu:
    id: int
    socket: int | None
    node: int
    siblings: frozenset[int]      # online CPUs of the same core, itself included


@dataclasses.dataclass(frozen=True)
class CpuFacts:
    online: frozenset[int]
    offline: frozenset[int]
    cpus: tuple[Cpu, ...]          # the online CPUs, by id
    nodes: dict[int, frozenset[int]]  # NUMA node -> its online CPUs (maybe empty)
    has_numa: bool                 # the kernel has a node directory

    def sockets(self) -> list[int]:
        return sorted({c.socket for c in self.cpus if c.socket is not None})

    def threads_per_core(self) -> int:
        return max((len(c.siblings) for c in self.cpus), default=1)


def discover_cpus(tree: KernelTree) -> CpuFacts:
    base = tree.sys("devices", "system", "cpu")
    online = tree.read_cpus(f"{base}/online")
    present = tree.read_cpus(f"{base}/present")
    if online is None:
        # Very old kernels: every cpuN directory whose online flag is not 0.
        online = frozenset(n for n, path in tree.numbered(base, "cpu").items()
                           if tree.read_int(f"{path}/online") != 0)
    if not online:
        raise KernelTreeError(f"{base}/online: no online CPU found")
    offline = tree.read_cpus(f"{base}/offline") or frozenset()
    if present is not None:
        offline = offline & present

    node_dir = tree.sys("devices", "system", "node")
    node_paths = tree.numbered(node_dir, "node")
    nodes: dict[int, frozenset[int]] = {}
    for node, path in node_paths.items():
        nodes[node] = (tree.read_cpus(f"{path}/cpulist") or frozenset()) & online
    node_of = {cpu: node for node, cpus in nodes.items() for cpu in cpus}
    if not node_paths:
        nodes = {0: online}
        node_of = dict.fromkeys(online, 0)

    cpus = []
    for cpu in sorted(online):
        topo = f"{base}/cpu{cpu}/topology"
        socket = tree.read_int(f"{topo}/physical_package_id")
        siblings = tree.read_cpus(f"{topo}/thread_siblings_list") or frozenset({cpu})
        cpus.append(Cpu(id=cpu, socket=socket if socket is None or socket >= 0 else None,
                        node=node_of.get(cpu, 0), siblings=(siblings & online) | {cpu}))
    return CpuFacts(online=online, offline=offline - online, cpus=tuple(cpus), nodes=nodes,
                    has_numa=bool(node_paths))
