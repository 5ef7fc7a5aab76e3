"""Fitting rules, one behaviour per test."""
from __future__ import annotations

import time

import pytest

from numa.fitting import FitResult, Limits, fit_instance_to_host
from numa.topology import InstanceCell
from tests.unit.numa.factories import (
    guest,
    host,
    host_cell,
    pinned_cell,
    shared_cell,
    smt_cell,
)


def fit(host_topology, instance, **kw) -> FitResult:
    return fit_instance_to_host(host_topology, instance, **kw)


def pinning(result: FitResult, cell: int = 0) -> dict[int, int]:
    assert result.fits, result.reason
    return result.fitted.cells[cell].cpu_pinning


# -- dedicated, thread policy prefer ------------------------------------------------------

def test_dedicated_pins_onto_siblings():
    result = fit(host(smt_cell(cores=4)), guest(pinned_cell(vcpus=range(4))))
    assert pinning(result) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert result.reason is None
    cell = result.fitted.cells[0]
    assert (cell.host_cell_id, cell.memory_mb, cell.shared_cpus) == (0, 1024, 0)
    assert cell.pagesize_kb is None and not cell.cpuset_reserved


def test_prefer_fills_a_broken_core_before_a_whole_one():
    cell = smt_cell(cores=3, pinned=[2])
    assert pinning(fit(host(cell), guest(pinned_cell(vcpus=[0])))) == {0: 3}
    assert sorted(pinning(fit(host(cell), guest(pinned_cell(vcpus=[0, 1, 2])))).values()) \
        == [0, 1, 3]


def test_prefer_uses_any_free_pcpus():
    cell = smt_cell(cores=4, pinned=[0, 2, 4, 6])
    assert sorted(pinning(fit(host(cell), guest(pinned_cell(vcpus=range(4))))).values()) \
        == [1, 3, 5, 7]


def test_not_enough_pcpus():
    result = fit(host(smt_cell(cores=2, pinned=[0])), guest(pinned_cell(vcpus=range(4))))
    assert not result.fits and result.fitted is None
    assert result.reason == "no host cell with 4 free pCPUs"


def test_pinned_guest_never_uses_the_shared_pool():
    cell = host_cell(cpuset=range(8), pcpuset=[8])
    assert fit(host(cell), guest(pinned_cell(vcpus=[0, 1]))).reason == \
        "no host cell with 2 free pCPUs"


# -- require ------------------------------------------------------------------------------

def test_require_takes_whole_free_cores():
    cell = smt_cell(cores=3, pinned=[0])
    assert pinning(fit(host(cell), guest(pinned_cell(vcpus=range(4), thread="require")))) == \
        {0: 2, 1: 3, 2: 4, 3: 5}


def test_require_odd_count_leaves_one_thread():
    cell = smt_cell(cores=2)
    assert sorted(pinning(fit(host(cell), guest(pinned_cell(vcpus=range(3),
                                                            thread="require")))).values()) \
        == [0, 1, 2]


def test_require_refuses_broken_cores():
    cell = smt_cell(cores=4, pinned=[0, 2, 4])
    result = fit(host(cell), guest(pinned_cell(vcpus=range(4), thread="require")))
    assert result.reason == "no host cell with 4 free pCPUs in sibling pairs"


def test_require_emulator_thread_cpu_may_be_on_a_broken_core():
    # cores (0,1) (2,3) whole, (4,5) with 5 pinned: the 4 vCPUs take the whole cores,
    # the emulator threads the free thread of the broken one
    cell = smt_cell(cores=3, pinned=[5])
    result = fit(host(cell), guest(pinned_cell(vcpus=range(4), thread="require"),
                                   emulator="isolate"))
    assert pinning(result) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert result.fitted.cells[0].cpuset_reserved == frozenset({4})
    assert fit(host(smt_cell(cores=2)), guest(pinned_cell(vcpus=range(4), thread="require"),
                                              emulator="isolate")).reason == \
        "no host cell with 4 free pCPUs in sibling pairs and 1 more for emulator threads"


def test_require_needs_smt():
    cell = host_cell(pcpuset=range(8))
    result = fit(host(cell), guest(pinned_cell(vcpus=[0, 1], thread="require")))
    assert result.reason == "no host cell with 2 free pCPUs in sibling pairs"


# -- isolate ------------------------------------------------------------------------------

def test_isolate_takes_a_core_per_vcpu_and_idles_siblings():
    result = fit(host(smt_cell(cores=4)), guest(pinned_cell(vcpus=[0, 1], thread="isolate")))
    cell = result.fitted.cells[0]
    assert cell.cpu_pinning == {0: 0, 1: 2}
    assert cell.cpuset_isolated == frozenset({1, 3})


def test_isolate_prefers_single_thread_cores():
    cell = host_cell(pcpuset=range(5), siblings=[[0, 1], [2, 3]])
    result = fit(host(cell), guest(pinned_cell(vcpus=[0], thread="isolate")))
    assert pinning(result) == {0: 4}
    assert not result.fitted.cells[0].cpuset_isolated


def test_isolate_refuses_broken_cores():
    cell = smt_cell(cores=4, pinned=[1, 3, 5])
    result = fit(host(cell), guest(pinned_cell(vcpus=[0, 1], thread="isolate")))
    assert result.reason == "no host cell with 2 free cores for thread policy isolate"


# -- mixed and shared ---------------------------------------------------------------------

def test_mixed_pins_some_and_floats_the_rest():
    cell = smt_cell(cores=2, cpuset=[10, 11])
    result = fit(host(cell), guest(pinned_cell(vcpus=[2, 3], shared=[0, 1])))
    fitted = result.fitted.cells[0]
    assert fitted.cpu_pinning == {2: 0, 3: 1}
    assert fitted.shared_cpus == 2


def test_mixed_needs_both_pools():
    cell = smt_cell(cores=2)
    assert fit(host(cell), guest(pinned_cell(vcpus=[2], shared=[0]))).reason == \
        "no host cell with 1 free shared CPUs"


def test_shared_cpus_within_ratio():
    cell = host_cell(cpuset=range(4), cpu_usage=6)
    instance = guest(shared_cell(vcpus=range(2)))
    assert not fit(host(cell), instance).fits
    assert fit(host(cell), instance, limits=Limits(cpu_allocation_ratio=2.0)).fits
    assert fit(host(cell), guest(shared_cell(vcpus=range(3))),
               limits=Limits(cpu_allocation_ratio=2.0)).reason == \
        "no host cell with 3 free shared CPUs"


def test_a_guest_cell_never_overcommits_itself():
    cell = host_cell(cpuset=range(2))
    result = fit(host(cell), guest(shared_cell(vcpus=range(3))),
                 limits=Limits(cpu_allocation_ratio=16.0))
    assert result.reason == "no host cell with 3 free shared CPUs"


def test_shared_memory_within_ratio():
    cell = host_cell(cpuset=range(4), memory_mb=4096, memory_usage=3072)
    instance = guest(shared_cell(memory_mb=2048))
    assert fit(host(cell), instance).reason == "no host cell with 2048 MB free memory"
    assert fit(host(cell), instance, limits=Limits(ram_allocation_ratio=1.5)).fits
    big = guest(shared_cell(memory_mb=8192))
    assert not fit(host(host_cell(cpuset=range(4), memory_mb=4096)), big,
                   limits=Limits(ram_allocation_ratio=4.0)).fits


def test_pinned_guest_never_overcommits_memory():
    cell = smt_cell(cores=2, memory_mb=4096, memory_usage=3072)
    result = fit(host(cell), guest(pinned_cell(memory_mb=2048)),
                 limits=Limits(ram_allocation_ratio=2.0))
    assert result.reason == "no host cell with 2048 MB free memory"


# -- page sizes ---------------------------------------------------------------------------

PAGES = [(4, 262144), (2048, 512), (1048576, 2)]  # 1 GiB, 1 GiB, 2 GiB


def paged(used_2m=0, used_1g=0, **kw):
    return host_cell(cpuset=range(4), memory_mb=4096,
                     mempages=[(4, 262144), (2048, 512, used_2m), (1048576, 2, used_1g)], **kw)


@pytest.mark.parametrize("request_, expected", [
    ("small", 4), ("large", 1048576), ("any", 1048576), (2048, 2048), (None, 4),
])
def test_page_size_choice(request_, expected):
    result = fit(host(paged()), guest(shared_cell(memory_mb=1024, pagesize=request_)))
    assert result.fitted.cells[0].pagesize_kb == expected


def test_large_falls_back_to_a_smaller_large_size():
    result = fit(host(paged(used_1g=2)), guest(shared_cell(memory_mb=1024, pagesize="large")))
    assert result.fitted.cells[0].pagesize_kb == 2048


def test_explicit_page_size_shortage_reason():
    result = fit(host(paged(used_2m=500)), guest(shared_cell(memory_mb=1024, pagesize=2048)))
    assert result.reason == "2048 KiB pages: need 512, 12 free"


def test_reserved_pages_are_not_free():
    cell = host_cell(cpuset=range(4), memory_mb=4096, mempages=[(4, 1000), (2048, 10, 0, 9)])
    result = fit(host(cell), guest(shared_cell(memory_mb=4, pagesize=2048)))
    assert result.reason == "2048 KiB pages: need 2, 1 free"


def test_large_pages_shortage_reason():
    result = fit(host(paged(used_2m=512, used_1g=2)),
                 guest(shared_cell(memory_mb=1024, pagesize="large")))
    assert result.reason == "large pages: no page size with 1024 MB free"


def test_memory_must_be_whole_pages():
    result = fit(host(paged()), guest(shared_cell(memory_mb=512, pagesize=1048576)))
    assert result.reason == "1048576 KiB pages: 512 MB is not a whole number of pages"


def test_missing_page_sizes():
    plain = host_cell(cpuset=range(4), memory_mb=4096)
    assert fit(host(plain), guest(shared_cell(pagesize=2048))).reason == \
        "host has no 2048 KiB pages"
    assert fit(host(plain), guest(shared_cell(pagesize="large"))).reason == \
        "host has no large pages"
    small = fit(host(plain), guest(shared_cell(pagesize="small")))
    assert small.fits and small.fitted.cells[0].pagesize_kb is None


def test_no_page_size_request_takes_small_pages_when_the_cell_lists_pages():
    # 1 GiB of small pages, 3 GiB in huge pages: the huge pages are not memory for a
    # guest that asked no page size.
    result = fit(host(paged()), guest(shared_cell(memory_mb=1024)))
    assert result.fitted.cells[0].pagesize_kb == 4
    assert not fit(host(paged()), guest(shared_cell(memory_mb=2048))).fits


def mostly_huge(small_used=0, memory_usage=0):
    """A 64 GiB cell with 62 GiB set aside in 1 GiB pages (2 GiB of small pages)."""
    return host_cell(cpuset=range(4, 8), pcpuset=range(4), memory_mb=65536,
                     memory_usage=memory_usage,
                     mempages=[(4, 524288, small_used), (1048576, 62)])


def test_pinned_guest_without_page_size_refused_where_memory_is_huge_pages():
    result = fit(host(mostly_huge()), guest(pinned_cell(memory_mb=8192)))
    assert result.reason == "no host cell with 8192 MB of small pages (4 KiB) free"
    assert fit(host(mostly_huge()), guest(pinned_cell(memory_mb=8192, pagesize="large"))).fits
    assert fit(host(mostly_huge()), guest(pinned_cell(memory_mb=2048))).fits


def test_pinned_guest_needs_free_small_pages_shared_guest_total():
    half_used = mostly_huge(small_used=262144, memory_usage=1024)
    assert fit(host(half_used), guest(pinned_cell(memory_mb=1024))).fits
    assert fit(host(half_used), guest(pinned_cell(memory_mb=1536))).reason == \
        "no host cell with 1536 MB of small pages (4 KiB) free"
    # a shared guest may over-commit the small pages (total, then the ratio check)
    shared = guest(shared_cell(memory_mb=2048))
    assert fit(host(half_used), shared, limits=Limits(ram_allocation_ratio=1.0)).fits
    assert fit(host(half_used), guest(shared_cell(memory_mb=3072))).reason == \
        "no host cell with 3072 MB of small pages (4 KiB) in all"
    full = mostly_huge(small_used=262144, memory_usage=65536 - 1024)
    assert fit(host(full), shared).reason == "no host cell with 2048 MB free memory"


def test_limits_none_checks_shared_guests_against_cell_size_only():
    busy = host_cell(cpuset=range(4), pcpuset=range(4, 8), memory_mb=4096, cpu_usage=4,
                     memory_usage=3072, pinned=range(4, 7))
    shared = guest(shared_cell(vcpus=range(4), memory_mb=4096))
    assert fit(host(busy), shared, limits=None).fits
    assert not fit(host(busy), shared).fits          # the default: ratios of 1.0
    assert not fit(host(busy), guest(shared_cell(vcpus=range(5))), limits=None).fits
    assert not fit(host(busy), guest(shared_cell(memory_mb=4097)), limits=None).fits
    # pinned vCPUs: still free pCPUs and free memory
    assert fit(host(busy), guest(pinned_cell(vcpus=[0, 1])), limits=None).reason == \
        "no host cell with 2 free pCPUs"
    roomy = host_cell(pcpuset=range(4), memory_mb=4096, memory_usage=4000)
    assert fit(host(roomy), guest(pinned_cell(vcpus=[0])), limits=None).reason == \
        "no host cell with 1024 MB free memory"


def test_isolate_on_smt_hosts_refuse():
    smt = host(smt_cell(cores=4))
    isolate = guest(pinned_cell(vcpus=[0, 1], thread="isolate"))
    assert fit(smt, isolate).fits
    assert fit(smt, isolate, isolate_on_smt="refuse").reason == \
        "thread policy isolate: host cell has SMT siblings ([numa] isolate_on_smt_hosts = refuse)"
    no_smt = host(smt_cell(cores=4, threads=1))
    assert pinning(fit(no_smt, isolate, isolate_on_smt="refuse")) == {0: 0, 1: 1}
    # other thread policies are not affected
    assert fit(smt, guest(pinned_cell(vcpus=[0, 1])), isolate_on_smt="refuse").fits
    with pytest.raises(ValueError, match="isolate_on_smt"):
        fit(smt, isolate, isolate_on_smt="maybe")


def test_isolate_refuse_picks_the_cell_without_smt():
    topo = host(smt_cell(id=0, cores=4), smt_cell(id=1, cores=4, threads=1, first=8))
    result = fit(topo, guest(pinned_cell(vcpus=[0, 1], thread="isolate")),
                 isolate_on_smt="refuse")
    assert result.fitted.cells[0].host_cell_id == 1


def test_shared_guest_in_huge_pages_stays_within_the_ram_ratio():
    cell = paged(memory_usage=1024)
    instance = guest(shared_cell(memory_mb=1024, pagesize=2048))
    assert fit(host(cell), instance, limits=Limits(ram_allocation_ratio=0.5)).fits
    assert fit(host(cell), instance, limits=Limits(ram_allocation_ratio=0.4)).reason == \
        "no host cell with 1024 MB free memory within ram_allocation_ratio 0.4"
    assert fit(host(cell), instance, limits=None).fits
    # pinned vCPUs only: the pages alone
    pinned_host = host(paged(memory_usage=1024, pcpuset=range(4, 8)))
    assert fit(pinned_host, guest(pinned_cell(memory_mb=1024, pagesize=2048)),
               limits=Limits(ram_allocation_ratio=0.4)).fits


def test_pages_are_not_overcommitted():
    result = fit(host(paged()), guest(shared_cell(memory_mb=3072, pagesize=1048576)),
                 limits=Limits(ram_allocation_ratio=10.0))
    assert result.reason == "1048576 KiB pages: need 3, 2 free"


# -- emulator threads ---------------------------------------------------------------------

def test_emulator_isolate_reserves_a_pcpu_on_the_first_cell():
    topo = host(smt_cell(id=0, cores=2), smt_cell(id=1, cores=2, first=4))
    instance = guest(pinned_cell(id=0, vcpus=[0, 1]), pinned_cell(id=1, vcpus=[2, 3]),
                     emulator="isolate")
    result = fit(topo, instance)
    first, second = result.fitted.cells
    assert len(first.cpuset_reserved) == 1
    assert not first.cpuset_reserved & set(first.cpu_pinning.values())
    assert not second.cpuset_reserved
    assert result.fitted.emulator_threads_policy == "isolate"


def test_emulator_isolate_needs_one_more_pcpu():
    instance = guest(pinned_cell(vcpus=range(4)), emulator="isolate")
    result = fit(host(smt_cell(cores=2)), instance)
    assert result.reason == "no host cell with 5 free pCPUs (incl. 1 for emulator threads)"


def test_emulator_isolate_with_isolate_threads_takes_a_whole_core():
    instance = guest(pinned_cell(vcpus=[0], thread="isolate"), emulator="isolate")
    fitted = fit(host(smt_cell(cores=2)), instance).fitted.cells[0]
    assert fitted.cpu_pinning == {0: 0}
    assert fitted.cpuset_reserved == frozenset({2})
    assert fitted.cpuset_isolated == frozenset({1, 3})


# -- multi-cell guests --------------------------------------------------------------------

def test_guest_cells_take_distinct_host_cells():
    topo = host(smt_cell(id=0, cores=4), smt_cell(id=1, cores=4, first=8))
    instance = guest(pinned_cell(id=0, vcpus=[0, 1]), pinned_cell(id=1, vcpus=[2, 3]))
    cells = fit(topo, instance).fitted.cells
    assert {c.host_cell_id for c in cells} == {0, 1}
    assert [c.id for c in cells] == [0, 1]


def test_more_guest_cells_than_host_cells():
    instance = guest(pinned_cell(id=0, vcpus=[0]), pinned_cell(id=1, vcpus=[1]))
    assert fit(host(smt_cell()), instance).reason == "guest has 2 cells, host has 1"


def test_guest_cell_that_fits_nowhere_is_named():
    topo = host(smt_cell(id=0, cores=2), smt_cell(id=1, cores=2, first=4))
    instance = guest(pinned_cell(id=0, vcpus=[0]), pinned_cell(id=1, vcpus=range(1, 9)))
    assert fit(topo, instance).reason == "guest cell 1: no host cell with 8 free pCPUs"


def test_cells_that_only_fit_the_same_host_cell():
    topo = host(smt_cell(id=0, cores=4), smt_cell(id=1, cores=1, first=8))
    instance = guest(pinned_cell(id=0, vcpus=range(4)), pinned_cell(id=1, vcpus=range(4, 8)))
    assert fit(topo, instance).reason == "guest cells do not fit on distinct host cells"


def test_search_backtracks_to_a_working_assignment():
    # Guest cell 0 fits both host cells; guest cell 1 fits only host cell 0 (the busier,
    # tried first by pack). The answer must move cell 0 to host cell 1.
    topo = host(smt_cell(id=0, cores=4, pinned=[0]), smt_cell(id=1, cores=1, first=8))
    instance = guest(pinned_cell(id=0, vcpus=[0]), pinned_cell(id=1, vcpus=range(1, 6)))
    cells = fit(topo, instance).fitted.cells
    assert [c.host_cell_id for c in cells] == [1, 0]


# -- pack and spread ----------------------------------------------------------------------

def test_pack_prefers_the_busiest_cell_and_spread_the_emptiest():
    topo = host(host_cell(id=0, cpuset=range(4), cpu_usage=0),
                host_cell(id=1, cpuset=range(4, 8), cpu_usage=2))
    instance = guest(shared_cell())
    assert fit(topo, instance, strategy="pack").fitted.cells[0].host_cell_id == 1
    assert fit(topo, instance, strategy="spread").fitted.cells[0].host_cell_id == 0


def test_pack_measures_free_pcpus_for_pinned_guests():
    topo = host(smt_cell(id=0, cores=4, pinned=[0, 1]), smt_cell(id=1, cores=4, first=8))
    assert fit(topo, guest(pinned_cell())).fitted.cells[0].host_cell_id == 0
    assert fit(topo, guest(pinned_cell()), strategy="spread").fitted.cells[0].host_cell_id == 1


def test_ties_go_to_the_lowest_cell_id():
    topo = host(smt_cell(id=1, cores=2, first=4), smt_cell(id=0, cores=2))
    assert fit(topo, guest(pinned_cell())).fitted.cells[0].host_cell_id == 0


def test_unknown_strategy():
    with pytest.raises(ValueError):
        fit(host(smt_cell()), guest(pinned_cell()), strategy="random")


# -- PCI ----------------------------------------------------------------------------------

def test_pci_check_restricts_host_cells():
    topo = host(smt_cell(id=0, cores=2), smt_cell(id=1, cores=2, first=4))
    seen = []

    def only_cell_1(cells):
        seen.append(cells)
        return cells == frozenset({1})

    assert fit(topo, guest(pinned_cell()), pci_check=only_cell_1).fitted.cells[0] \
        .host_cell_id == 1
    assert seen == [frozenset({0}), frozenset({1})]
    result = fit(topo, guest(pinned_cell()), pci_check=lambda cells: False)
    assert result.reason == "PCI requests cannot be satisfied on the host cells that fit"


def test_pci_check_on_multi_cell_guest_sees_the_whole_set():
    topo = host(*(smt_cell(id=i, cores=2, first=4 * i) for i in range(4)))
    instance = guest(pinned_cell(id=0, vcpus=[0]), pinned_cell(id=1, vcpus=[1]))
    seen = []

    def devices_on_1_and_3(cells):  # monotone, as every PCI NUMA policy is
        seen.append(cells)
        return {1, 3} <= cells

    result = fit(topo, instance, pci_check=devices_on_1_and_3)
    assert [c.host_cell_id for c in result.fitted.cells] == [1, 3]
    assert frozenset({1, 3}) in seen
    three = fit(topo, instance, pci_check=lambda cells: {0, 2, 3} <= cells)
    assert three.reason == "PCI requests cannot be satisfied on the host cells that fit"


def test_pci_search_gives_up_when_the_check_is_not_monotone():
    topo = host(*(smt_cell(id=i, cores=2, first=4 * i) for i in range(16)))
    instance = guest(*(pinned_cell(id=i, vcpus=[i]) for i in range(8)))
    odd = frozenset(range(1, 16, 2))
    start = time.perf_counter()
    result = fit(topo, instance, pci_check=lambda cells: cells == odd or len(cells) == 16)
    assert time.perf_counter() - start < 2.0  # a guard against blow-up, not a benchmark
    assert not result.fits
    assert result.reason == "PCI requests: no set of host cells found within the search limit"


# -- purity and bounds --------------------------------------------------------------------

def test_inputs_are_not_changed():
    topo = host(smt_cell(cores=4))
    instance = guest(pinned_cell(vcpus=range(4)))
    before = (topo.to_primitive(), instance.to_primitive())
    fit(topo, instance)
    assert (topo.to_primitive(), instance.to_primitive()) == before


def test_eight_cell_guest_on_sixteen_cell_host_is_fast():
    topo = host(*(smt_cell(id=i, cores=4, first=8 * i, pinned=[8 * i] if i % 3 else [])
                  for i in range(16)))
    instance = guest(*(pinned_cell(id=i, vcpus=range(4 * i, 4 * i + 4), thread="require")
                       for i in range(8)))
    start = time.perf_counter()
    result = fit(topo, instance)
    assert result.fits
    # PCI devices only on the last two cells, both needed.
    refusing = fit(topo, instance, pci_check=lambda cells: {14, 15} <= cells)
    elapsed = time.perf_counter() - start
    assert {14, 15} <= {c.host_cell_id for c in refusing.fitted.cells}
    assert elapsed < 2.0  # a guard against blow-up, not a benchmark


def test_shared_instance_cell_fits_by_default_limits():
    cell = host_cell(cpuset=range(4), memory_mb=2048)
    instance = guest(InstanceCell(id=0, cpuset=frozenset(range(4)), memory_mb=2048))
    assert fit(host(cell), instance).fits


def test_choose_cells_is_the_cells_of_the_fit():
    """``choose_cells`` picks no CPUs but the same cells as the full fit."""
    import random

    from numa import fitting as fit_mod
    from numa import topology as topo

    rng = random.Random(11)
    compared = 0
    for _ in range(300):
        cells = []
        for cid in range(rng.choice([1, 2, 4])):
            pcpus = set(range(cid * 8, cid * 8 + 8))
            pinned = set(rng.sample(sorted(pcpus), rng.randrange(0, 8)))
            cells.append({"id": cid, "cpuset": [], "pcpuset": sorted(pcpus),
                          "siblings": [[c, c + 1] for c in range(cid * 8, cid * 8 + 8, 2)],
                          "memory_mb": 16384, "pinned_cpus": sorted(pinned),
                          "memory_usage": rng.choice([0, 4096, 12288])})
        host = topo.HostTopology.from_primitive({"cells": cells})
        n = rng.choice([1, 2])
        vcpus = rng.choice([2, 4, 6]) * n
        guest = topo.InstanceTopology.from_primitive({"cells": [
            {"id": i, "pcpuset": list(range(i * vcpus // n, (i + 1) * vcpus // n)),
             "memory_mb": 2048, "cpu_policy": "dedicated",
             "cpu_thread_policy": rng.choice([None, "isolate", "require"])}
            for i in range(n)]})
        full = fit_mod.fit_instance_to_host(host, guest)
        cells_only, reason = fit_mod.choose_cells(host, guest)
        if full.fitted is None:
            assert cells_only is None and reason == full.reason
        else:
            assert cells_only == frozenset(c.host_cell_id for c in full.fitted.cells)
            compared += 1
    assert compared > 50
