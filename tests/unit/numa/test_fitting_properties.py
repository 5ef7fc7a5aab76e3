"""Property tests: every fit returned is valid, and on small cases an exhaustive search
finds a fit exactly when the tool says there is one.

The rules are restated here independently of ``numa.fitting`` (a checker for a given
fit, and a brute force over every assignment of host cells and every set of host CPUs).
"""
from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numa.fitting import Limits, check_fit, fit_instance_to_host
from numa.tool import fit_case
from numa.topology import (
    FittedTopology,
    HostCell,
    HostTopology,
    InstanceCell,
    InstanceTopology,
    MemPage,
)
from numa.usage import apply_usage, remove_usage

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- generators ---------------------------------------------------------------------------

@st.composite
def host_cells(draw, cell_id: int, first_cpu: int) -> HostCell:
    cores = draw(st.integers(0, 5))
    threads = draw(st.integers(1, 3))
    shared = draw(st.sampled_from([0, 1, 2, 4, 4]))
    pcpus = list(range(first_cpu, first_cpu + cores * threads))
    siblings = [frozenset(pcpus[i:i + threads]) for i in range(0, len(pcpus), threads)]
    if threads > 1 and siblings and draw(st.booleans()):
        siblings = siblings[1:]  # a core listed without siblings: single-thread
    cpuset = range(first_cpu + len(pcpus), first_cpu + len(pcpus) + shared)
    pinned = draw(st.sets(st.sampled_from(pcpus), max_size=len(pcpus) // 2)) if pcpus else ()
    memory_mb = draw(st.integers(2, 16))
    pages = []
    if draw(st.sampled_from([True, True, True, False])):
        # the rest of the cell's memory may be set aside as huge pages
        small_total = memory_mb * 256 // draw(st.sampled_from([1, 1, 2, 4, 16]))
        pages.append(MemPage(4, small_total, draw(st.integers(0, small_total))))
        for size in draw(st.sets(st.sampled_from([2048, 8192]))):
            total = draw(st.integers(0, 8))
            used = draw(st.integers(0, total))
            pages.append(MemPage(size, total, used, draw(st.integers(0, total - used))))
    return HostCell(
        id=cell_id, cpuset=frozenset(cpuset), pcpuset=frozenset(pcpus),
        siblings=tuple(siblings), memory_mb=memory_mb, mempages=tuple(pages),
        cpu_usage=draw(st.integers(0, 4)),
        memory_usage=draw(st.integers(0, memory_mb // draw(st.sampled_from([1, 2, 4])))),
        pinned_cpus=frozenset(pinned))


@st.composite
def hosts(draw, max_cells: int = 3) -> HostTopology:
    count = draw(st.integers(1, max_cells))
    ids = draw(st.permutations(range(count)))
    return HostTopology(cells=tuple(draw(host_cells(cell_id, 20 * i))
                                    for i, cell_id in enumerate(ids)))


@st.composite
def instances(draw, max_cells: int = 2) -> InstanceTopology:
    count = draw(st.integers(1, max_cells))
    policy = draw(st.sampled_from(["shared", "dedicated", "mixed"]))
    thread = draw(st.sampled_from([None, "prefer", "isolate", "require"]))
    pagesize = draw(st.sampled_from([None, None, "small", "large", "any", 2048, 4, 8192]))
    cells = []
    vcpu = 0
    for i in range(count):
        if policy == "shared":
            pinned, shared = 0, draw(st.integers(1, 3))
        elif policy == "dedicated":
            pinned, shared = draw(st.integers(1, 4)), 0
        else:
            pinned = draw(st.integers(0, 4))
            shared = draw(st.integers(0 if pinned else 1, 3))
        cpus = list(range(vcpu, vcpu + pinned + shared))
        vcpu += len(cpus)
        cells.append(InstanceCell(
            id=i, cpuset=frozenset(cpus[pinned:]), pcpuset=frozenset(cpus[:pinned]),
            memory_mb=draw(st.sampled_from([1, 2, 2, 4, 4, 6, 8])), pagesize=pagesize,
            cpu_policy=policy,
            cpu_thread_policy=None if policy == "shared" else thread))
    emulator = None
    if any(cell.pcpuset for cell in cells):
        emulator = draw(st.sampled_from([None, "share", "isolate"]))
    return InstanceTopology(cells=tuple(cells), emulator_threads_policy=emulator)


isolate_on_smt = st.sampled_from(["reserve-siblings", "refuse"])

limits = st.one_of(st.none(), st.builds(Limits, st.sampled_from([0.5, 1.0, 1.5, 4.0]),
                                        st.sampled_from([0.5, 1.0, 1.5, 2.0])))


@st.composite
def pci_checks(draw, host: HostTopology):
    """None, or a monotone check like the PCI NUMA policies: some cells must be in."""
    kind = draw(st.sampled_from([None, "all_of", "any_of"]))
    if kind is None:
        return None
    wanted = frozenset(draw(st.sets(st.sampled_from([c.id for c in host.cells]), min_size=1)))
    if kind == "all_of":
        return lambda cells: wanted <= cells
    return lambda cells: bool(wanted & cells)


# -- the rules, restated ------------------------------------------------------------------

def core_of(cell: HostCell, cpu: int) -> frozenset[int]:
    for sibling_set in cell.siblings:
        if cpu in sibling_set:
            return sibling_set & cell.pcpuset
    return frozenset({cpu})


def threads_ok(cell: HostCell, cpus: set[int], policy: str | None,
               isolate_on_smt: str = "reserve-siblings") -> bool:
    cores = {core_of(cell, cpu) for cpu in cpus}
    if policy == "isolate":
        # refuse: no pinned CPU of an isolate guest on an SMT cell (a guest cell
        # without pinned CPUs pins nothing there)
        if isolate_on_smt == "refuse" and cpus and any(len(s) > 1 for s in cell.siblings):
            return False
        return (len(cores) == len(cpus)
                and all(not core & cell.pinned_cpus for core in cores))
    if policy == "require":
        partial = sum(1 for core in cores if not core <= cpus)
        return (all(len(core) > 1 and not core & cell.pinned_cpus for core in cores)
                and partial <= 1)
    return True


def allowed_page_sizes(cell: HostCell, request) -> list[int | None]:
    sizes = sorted(page.size_kb for page in cell.mempages)
    if request is None and sizes:
        return sizes[:1]      # no request: the small pages, when the cell lists pages
    if request is None or (not sizes and request in ("small", "any")):
        return [None]
    return {"small": sizes[:1], "large": sizes[1:], "any": sizes}.get(
        request, [request] if request in sizes else [])


def plain_memory_ok(cell: HostCell, guest: InstanceCell, limits: Limits | None) -> bool:
    if guest.memory_mb > cell.memory_mb:
        return False
    if limits is None:       # no limits object: shared guests against the cell's size only
        return not guest.pcpuset or cell.memory_usage + guest.memory_mb <= cell.memory_mb
    ratio = min(limits.ram_allocation_ratio, 1.0) if guest.pcpuset \
        else limits.ram_allocation_ratio
    return cell.memory_usage + guest.memory_mb <= cell.memory_mb * ratio


def memory_ok(cell: HostCell, guest: InstanceCell, limits: Limits | None,
              size: int | None) -> bool:
    if size is None:
        return plain_memory_ok(cell, guest, limits)
    kb = guest.memory_mb * 1024
    page = cell.mempage(size)
    if guest.pagesize is None:
        # small pages for a guest that asked none: free ones when pinned, else in all
        pages = page.total - page.used - page.reserved if guest.pcpuset else page.total
        return (kb % size == 0 and kb <= pages * size
                and plain_memory_ok(cell, guest, limits))
    if guest.cpuset and limits is not None and \
            cell.memory_usage + guest.memory_mb > cell.memory_mb * limits.ram_allocation_ratio:
        return False
    return kb % size == 0 and kb // size <= page.total - page.used - page.reserved


def shared_ok(cell: HostCell, guest: InstanceCell, limits: Limits | None) -> bool:
    n = len(guest.cpuset)
    if n == 0:
        return True
    if limits is None:
        return n <= len(cell.cpuset)
    return (n <= len(cell.cpuset)
            and cell.cpu_usage + n <= len(cell.cpuset) * limits.cpu_allocation_ratio)


def cell_fits_somehow(cell: HostCell, guest: InstanceCell, limits: Limits | None,
                      reserve: int, isolate_on_smt: str) -> bool:
    if not any(memory_ok(cell, guest, limits, size)
               for size in allowed_page_sizes(cell, guest.pagesize)):
        return False
    if not shared_ok(cell, guest, limits):
        return False
    wanted = len(guest.pcpuset) + reserve
    if not wanted:
        return True
    free = sorted(cell.pcpuset - cell.pinned_cpus)
    if guest.cpu_thread_policy == "require":
        # the policy binds the vCPUs; the emulator threads' CPU is any other free one
        return len(free) >= wanted and any(
            threads_ok(cell, set(cpus), "require")
            for cpus in itertools.combinations(free, len(guest.pcpuset)))
    return any(threads_ok(cell, set(cpus), guest.cpu_thread_policy, isolate_on_smt)
               for cpus in itertools.combinations(free, wanted))


def exists_fit(host: HostTopology, instance: InstanceTopology, limits: Limits | None,
               pci_check, isolate_on_smt: str = "reserve-siblings") -> bool:
    reserve = 1 if instance.emulator_threads_policy == "isolate" else 0
    for cells in itertools.permutations(host.cells, len(instance.cells)):
        if pci_check is not None and not pci_check(frozenset(c.id for c in cells)):
            continue
        if all(cell_fits_somehow(cell, guest, limits, reserve if i == 0 else 0,
                                 isolate_on_smt)
               for i, (cell, guest) in enumerate(zip(cells, instance.cells, strict=True))):
            return True
    return False


def assert_valid(host: HostTopology, instance: InstanceTopology, limits: Limits | None,
                 fitted: FittedTopology, pci_check=None,
                 isolate_on_smt: str = "reserve-siblings") -> None:
    assert len(fitted.cells) == len(instance.cells)
    host_ids = [cell.host_cell_id for cell in fitted.cells]
    assert len(set(host_ids)) == len(host_ids), "guest cells share a host cell"
    if pci_check is not None:
        assert pci_check(frozenset(host_ids))
    for index, (guest, placed) in enumerate(zip(instance.cells, fitted.cells, strict=True)):
        cell = host.cell(placed.host_cell_id)
        assert cell is not None and placed.id == guest.id
        reserve = 1 if instance.emulator_threads_isolated and index == 0 else 0
        # pinned vCPUs and emulator threads
        assert set(placed.cpu_pinning) == set(guest.pcpuset)
        used = list(placed.cpu_pinning.values()) + list(placed.cpuset_reserved)
        assert len(set(used)) == len(used) == len(guest.pcpuset) + reserve
        free = cell.pcpuset - cell.pinned_cpus
        assert set(used) <= free, "pinned outside the free pcpuset"
        bound = set(placed.cpu_pinning.values()) if guest.cpu_thread_policy == "require" \
            else set(used)
        assert threads_ok(cell, bound, guest.cpu_thread_policy, isolate_on_smt)
        if guest.cpu_thread_policy == "isolate":
            idle = frozenset().union(*(core_of(cell, cpu) for cpu in used)) - set(used)
            assert placed.cpuset_isolated == idle
        else:
            assert not placed.cpuset_isolated
        # floating vCPUs
        assert placed.shared_cpus == len(guest.cpuset)
        assert shared_ok(cell, guest, limits)
        # memory and pages
        assert placed.memory_mb == guest.memory_mb
        assert placed.pagesize_kb in allowed_page_sizes(cell, guest.pagesize)
        assert memory_ok(cell, guest, limits, placed.pagesize_kb)


# -- properties ---------------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_every_fit_is_valid_and_usage_round_trips(data):
    host = data.draw(hosts())
    instance = data.draw(instances())
    limit = data.draw(limits)
    pci_check = data.draw(pci_checks(host))
    strategy = data.draw(st.sampled_from(["pack", "spread"]))
    smt = data.draw(isolate_on_smt)
    result = fit_instance_to_host(host, instance, limit, pci_check=pci_check,
                                  strategy=strategy, isolate_on_smt=smt)
    assert result.fits == (result.reason is None)
    assert check_fit(host, instance, limit, pci_check=pci_check, strategy=strategy,
                     isolate_on_smt=smt) == result.reason
    assert result.fits == exists_fit(host, instance, limit, pci_check, smt), result.reason
    if result.fits:
        assert_valid(host, instance, limit, result.fitted, pci_check, smt)
        used = apply_usage(host, result.fitted)
        assert HostTopology.from_primitive(used.to_primitive()) == used
        assert remove_usage(used, result.fitted) == host


@SETTINGS
@given(hosts(), instances(), limits, isolate_on_smt)
def test_tool_does_not_fit_only_when_exhaustive_search_agrees(host, instance, limit, smt):
    case = {"host": host.to_primitive(), "instance": instance.to_primitive(),
            "isolate_on_smt_hosts": smt,
            "limits": None if limit is None else {
                "cpu_allocation_ratio": limit.cpu_allocation_ratio,
                "ram_allocation_ratio": limit.ram_allocation_ratio}}
    answer = fit_case(case)
    assert "error" not in answer, answer
    assert answer["fits"] == exists_fit(host, instance, limit, None, smt), answer
    if not answer["fits"]:
        assert answer["reason"] and answer["cells"] == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_packing_guests_until_full_then_releasing_returns_to_zero(data):
    host = data.draw(hosts(max_cells=2))
    limit = data.draw(limits)
    current = host
    placed = []
    for _ in range(6):
        instance = data.draw(instances(max_cells=2))
        result = fit_instance_to_host(current, instance, limit)
        if result.fits:
            assert_valid(current, instance, limit, result.fitted)
            current = apply_usage(current, result.fitted)
            placed.append(result.fitted)
    order = data.draw(st.permutations(range(len(placed))))
    for index in order:
        current = remove_usage(current, placed[index])
    assert current == host


def zero_usage(host: HostTopology) -> HostTopology:
    return HostTopology(cells=tuple(
        dataclasses.replace(cell, cpu_usage=0, memory_usage=0, pinned_cpus=frozenset(),
                            mempages=tuple(dataclasses.replace(p, used=0)
                                           for p in cell.mempages))
        for cell in host.cells))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_small_page_pool_is_charged_and_released_back_to_zero(data):
    """Guests that ask no page size on cells listing pages are charged to the small
    pages; pinned ones never take more than are free; releasing everything, in any
    order, leaves every counter at exactly zero."""
    empty = zero_usage(data.draw(hosts(max_cells=2)))
    limit = data.draw(limits)
    current = empty
    placed = []
    expected_small: dict[int, int] = {cell.id: 0 for cell in empty.cells}
    for _ in range(8):
        instance = data.draw(instances(max_cells=2))
        result = fit_instance_to_host(current, instance, limit)
        if not result.fits:
            continue
        assert_valid(current, instance, limit, result.fitted)
        before = current
        current = apply_usage(current, result.fitted)
        placed.append(result.fitted)
        for guest_cell, fitted_cell in zip(instance.cells, result.fitted.cells, strict=True):
            cell = current.cell(fitted_cell.host_cell_id)
            if not cell.mempages:
                continue
            small = min(page.size_kb for page in cell.mempages)
            if guest_cell.pagesize is None:
                assert fitted_cell.pagesize_kb == small
                if guest_cell.pcpuset:
                    page = before.cell(cell.id).mempage(small)
                    assert guest_cell.memory_mb * 1024 // small <= page.free
            if fitted_cell.pagesize_kb == small:   # no request, or small asked for
                expected_small[cell.id] += guest_cell.memory_mb * 1024 // small
        for cell in current.cells:
            if cell.mempages:
                small = min(page.size_kb for page in cell.mempages)
                assert cell.mempage(small).used == expected_small[cell.id]
    for index in data.draw(st.permutations(range(len(placed)))):
        current = remove_usage(current, placed[index])
    assert current == empty
    for cell in current.cells:
        assert (cell.cpu_usage, cell.memory_usage, cell.pinned_cpus) == (0, 0, frozenset())
        assert all(page.used == 0 for page in cell.mempages)
