"""Applying and removing a fitted topology on the host's usage."""
from __future__ import annotations

import pytest

from numa.errors import NumaError
from numa.fitting import fit_instance_to_host
from numa.topology import FittedCell, FittedTopology, MemPage
from numa.usage import apply_usage, remove_usage
from tests.unit.numa.factories import guest, host, host_cell, pinned_cell, shared_cell, smt_cell


def two_cells():
    return host(smt_cell(id=0, cores=4, cpuset=[20, 21], mempages=[(4, 1 << 20), (2048, 512)]),
                smt_cell(id=1, cores=4, first=8, cpuset=[22, 23]))


def test_apply_counts_every_kind_of_usage():
    topo = two_cells()
    instance = guest(pinned_cell(id=0, vcpus=[0, 1], thread="isolate", pagesize=2048,
                                 memory_mb=512, shared=[4]),
                     pinned_cell(id=1, vcpus=[2, 3], memory_mb=1024), emulator="isolate")
    fitted = fit_instance_to_host(topo, instance).fitted
    used = apply_usage(topo, fitted)
    first, second = used.cells
    assert first.cpu_usage == 1 and first.memory_usage == 512
    assert first.pinned_cpus == frozenset(range(6))  # 2 isolated cores + emulator core
    assert first.mempage(2048) == MemPage(2048, 512, used=256)
    assert first.mempage(4).used == 0
    assert second.pinned_cpus == frozenset({8, 9}) and second.memory_usage == 1024
    assert remove_usage(used, fitted) == topo


def test_remove_after_many_returns_exactly_the_original():
    topo = two_cells()
    fits = []
    current = topo
    for instance in [guest(pinned_cell(vcpus=[0, 1])), guest(shared_cell(vcpus=[0, 1])),
                     guest(pinned_cell(vcpus=[0], pagesize="large", memory_mb=2)),
                     guest(pinned_cell(vcpus=[0, 1, 2], thread="require"))]:
        fitted = fit_instance_to_host(current, instance).fitted
        current = apply_usage(current, fitted)
        fits.append(fitted)
    assert current != topo
    for fitted in reversed(fits[:2]):
        current = remove_usage(current, fitted)
    for fitted in fits[2:]:
        current = remove_usage(current, fitted)
    assert current == topo


def test_apply_does_not_change_its_argument():
    topo = two_cells()
    before = topo.to_primitive()
    apply_usage(topo, fit_instance_to_host(topo, guest(pinned_cell())).fitted)
    assert topo.to_primitive() == before


def fitted_on(cell_id=0, pinning=None, pagesize=None):
    return FittedTopology(cells=(FittedCell(id=0, host_cell_id=cell_id,
                                            cpu_pinning=pinning or {0: 0},
                                            pagesize_kb=pagesize, memory_mb=2),))


@pytest.mark.parametrize("fitted, words", [
    (fitted_on(cell_id=9), "no cell 9"),
    (fitted_on(pinning={0: 20}), "not in the cell's pcpuset"),
    (fitted_on(pinning={0: 1}), "already pinned"),
    (fitted_on(pagesize=1048576), "no 1048576 KiB pages"),
])
def test_apply_refuses_a_stale_fit(fitted, words):
    topo = host(smt_cell(cores=2, cpuset=[20], pinned=[1], mempages=[(4, 100)]))
    with pytest.raises(NumaError, match=words):
        apply_usage(topo, fitted)


def test_remove_never_goes_below_zero():
    topo = host(host_cell(pcpuset=[0, 1], mempages=[(2048, 10)]))
    released = remove_usage(topo, fitted_on(pagesize=2048))
    assert released == topo
    assert remove_usage(topo, fitted_on(cell_id=7)) == topo
