"""Short builders for NUMA test values."""
from __future__ import annotations

from numa.topology import HostCell, HostTopology, InstanceCell, InstanceTopology, MemPage


def host_cell(id=0, cpuset=(), pcpuset=(), siblings=(), memory_mb=8192, mempages=(),
              cpu_usage=0, memory_usage=0, pinned=(), socket=None) -> HostCell:
    return HostCell(
        id=id, socket=socket, cpuset=frozenset(cpuset), pcpuset=frozenset(pcpuset),
        siblings=tuple(frozenset(s) for s in siblings), memory_mb=memory_mb,
        mempages=tuple(MemPage(*p) for p in mempages), cpu_usage=cpu_usage,
        memory_usage=memory_usage, pinned_cpus=frozenset(pinned))


def smt_cell(id=0, cores=4, threads=2, first=0, memory_mb=8192, pinned=(), **kw) -> HostCell:
    """A cell whose pcpuset is ``cores`` x ``threads`` CPUs, siblings consecutive."""
    cpus = range(first, first + cores * threads)
    siblings = [cpus[i:i + threads] for i in range(0, len(cpus), threads)]
    return host_cell(id=id, pcpuset=cpus, siblings=siblings, memory_mb=memory_mb,
                     pinned=pinned, **kw)


def host(*cells: HostCell) -> HostTopology:
    return HostTopology(cells=tuple(cells))


def guest(*cells: InstanceCell, emulator=None) -> InstanceTopology:
    return InstanceTopology(cells=tuple(cells), emulator_threads_policy=emulator)


def pinned_cell(id=0, vcpus=(0, 1), memory_mb=1024, thread=None, pagesize=None,
                shared=()) -> InstanceCell:
    return InstanceCell(id=id, cpuset=frozenset(shared), pcpuset=frozenset(vcpus),
                        memory_mb=memory_mb, pagesize=pagesize,
                        cpu_policy="mixed" if shared else "dedicated",
                        cpu_thread_policy=thread)


def shared_cell(id=0, vcpus=(0, 1), memory_mb=1024, pagesize=None) -> InstanceCell:
    return InstanceCell(id=id, cpuset=frozenset(vcpus), memory_mb=memory_mb, pagesize=pagesize)
