"""HostColumns.aggregate_min equals HostState.aggregate_min_float row by row,
also after hosts change aggregates (the per-aggregate row index is rebuilt);
class codes follow host changes and survive recoding."""
from __future__ import annotations

import random

import pytest

from scheduler.host_columns import HostColumns
from tests.unit.scheduler import fakes

KEYS = ("ram_weight_multiplier", "cpu_allocation_ratio", "never_set")


def _check(cols: HostColumns, key: str) -> None:
    values, present = cols.aggregate_min(key)
    for i, hs in enumerate(cols.hosts):
        want = hs.aggregate_min_float(key, None)
        assert present[i] == (want is not None), (key, hs.host)
        assert values[i] == (0.0 if want is None else want), (key, hs.host)


@pytest.mark.parametrize("seed", range(5))
def test_aggregate_min_matches_every_host(seed):
    rng = random.Random(seed)
    pool = [fakes.aggregate({}),
            fakes.aggregate({"ram_weight_multiplier": "-2.5"}),
            fakes.aggregate({"ram_weight_multiplier": "oops"}),       # invalid: ignored
            fakes.aggregate({"ram_weight_multiplier": "3", "cpu_allocation_ratio": "4.0"}),
            fakes.aggregate({"cpu_allocation_ratio": "1.5"})]
    hosts = [fakes.fake_host(f"h{i}", aggregates=rng.sample(pool, rng.randint(0, 3)))
             for i in range(60)]
    cols = HostColumns(hosts)
    for key in KEYS:
        _check(cols, key)
    # Hosts move between aggregates after the columns were built: the cached
    # columns follow (the owner rewrites the rows), and keys first asked for
    # now see the moves.
    extra = fakes.aggregate({"never_set": "7", "ram_weight_multiplier": "-9"})
    for hs in rng.sample(hosts, 10):
        hs.set_aggregates(tuple(rng.sample(pool + [extra], rng.randint(0, 3))), "nova")
        cols.update(cols.row_of_node[hs.node_id], hs)
    for key in KEYS:
        _check(cols, key)
    assert cols.aggregate_min("never_set")[1].any() == any(
        extra in hs.aggregates for hs in hosts)


def test_class_codes_follow_changes_and_recoding():
    hosts = [fakes.fake_host(f"h{i}", stats={"tier": "gold" if i % 2 else "silver"})
             for i in range(6)]
    cols = HostColumns(hosts)
    cols.classes.register("tier", lambda h: h.stats.get("tier"))
    codes = cols.class_codes("tier")
    assert len(set(codes.tolist())) == 2
    assert codes[1] == codes[3] != codes[0]
    hosts[0].stats = {"tier": "gold"}
    cols.update(0, hosts[0])
    assert codes[0] == codes[1]
    fresh = cols.recoded()
    assert fresh.classes is not cols.classes
    assert fresh.class_codes("tier").tolist() == [0] * 4 + [0, 0] or \
        len(set(fresh.class_codes("tier").tolist())) == 2
    assert fresh.classes.size("tier") == 2      # only the keys rows still have
    assert fresh.hosts == cols.hosts and (fresh.free_ram == cols.free_ram).all()


def _admits_by_hand(hs, rc: str, amount: int) -> bool:
    tree = hs.tree
    return any(tree.slot_inventory(slot).admits(
        hs.usage[slot] if slot < len(hs.usage) else 0, amount)
        for slot in tree.by_class.get(rc, ()))


def _unit_breaks_by_hand(hs, rc: str, amount: int) -> set[str]:
    """The unit limits that every inventory of ``rc`` in the host's tree breaks."""
    def broken(inv) -> set[str]:
        return ({"below min_unit"} if amount < inv.min_unit else set()) | \
            ({"above max_unit"} if amount > inv.max_unit else set()) | \
            ({"not a multiple of step_size"} if amount % inv.step_size else set())
    each = [broken(hs.tree.slot_inventory(slot)) for slot in hs.tree.by_class.get(rc, ())]
    return set.intersection(*each) if each else set()


@pytest.mark.parametrize("seed", range(3))
def test_resource_columns_follow_usage_and_inventory_changes(seed):
    """What the columns remember of the inventories (usable, unit limits per
    amount) is kept while only usage changes, and dropped when a row gets
    other inventories: the vector check equals each host's own, every time."""
    rng = random.Random(seed)
    hosts = [fakes.fake_host(f"h{i}", vcpus=rng.choice((4, 8)),
                             memory_mb=rng.choice((4096, 8192)),
                             vcpus_used=rng.randint(0, 8))
             for i in range(30)]
    cols = HostColumns(hosts)
    amounts = {"VCPU": (1, 2, 4, 9), "MEMORY_MB": (512, 4096, 8192)}

    def check():
        for rc, asked in amounts.items():
            res = cols.resources(rc)
            for amount in asked:
                got = res.admits(amount).any(axis=1)
                want = [_admits_by_hand(hs, rc, amount) for hs in cols.hosts]
                assert got.tolist() == want, (rc, amount)
                # the refusals by unit limit, remembered per amount: only the
                # limits some row breaks, each with exactly its rows
                breaks = dict(res.unit_breaks(amount))
                for i, hs in enumerate(cols.hosts):
                    assert {t for t, rows in breaks.items() if rows[i]} == \
                        _unit_breaks_by_hand(hs, rc, amount), (rc, amount, hs.host)
                assert all(rows.any() for rows in breaks.values()), (rc, amount)

    check()
    for _round in range(4):
        for i in rng.sample(range(len(hosts)), 8):
            old = cols.hosts[i]
            if rng.random() < 0.5:      # a claim or a release: usage only
                fresh = fakes.fake_host(old.host)
                fresh.set_providers(old.tree, tuple(
                    rng.randint(0, old.tree.slot_inventory(slot).total)
                    for slot in range(len(old.tree.slots))), old.providers)
            else:                       # the host reported other inventories
                vcpus = rng.choice((2, 4, 16))
                fresh = fakes.fake_host(old.host, vcpus=vcpus,
                                        memory_mb=rng.choice((2048, 16384)),
                                        vcpus_used=old.vcpus_used,
                                        inventories={"VCPU": {"total": vcpus, "step_size": 2}}
                                        if rng.random() < 0.3 else None)
            cols.update(i, fresh)
        check()


def test_resource_refusals_are_the_rule_whatever_the_shortcut():
    """``ResourceColumns.refused`` (the root's column alone, the unit limits
    left out where every present slot allows the amount, plain numbers for
    one row) answers what ``~admits(...).any(axis=1)`` does: seeded random
    inventories with absent slots, unit limits and ratio overrides."""
    import numpy as np

    from scheduler.host_columns import RESOURCE_FIELDS, ResourceColumns

    rng = random.Random(23)
    for _case in range(300):
        n, k = rng.choice((1, 1, 2, 7)), rng.choice((1, 1, 2))
        cols = ResourceColumns.absent(n, k)
        for r in range(n):
            for j in range(k):
                if rng.random() < 0.2:
                    continue            # absent slot
                total = rng.randint(1, 64)
                values = {"total": total, "reserved": rng.randint(0, total),
                          "allocation_ratio": rng.choice((0.5, 1.0, 1.5, 16.0)),
                          "used": rng.randint(0, 80), "min_unit": rng.choice((1, 1, 2)),
                          "max_unit": rng.choice((total, total, 4)),
                          "step_size": rng.choice((1, 1, 2, 3))}
                for f, name in enumerate(RESOURCE_FIELDS):
                    cols.data[f, r, j] = values[name]
        ratio = None
        if rng.random() < 0.3:
            ratio = np.array([rng.choice((0.5, 1.0, 2.0)) for _ in range(n)])
        for amount in (1, 2, 3, 4, 8, 40):
            want = ~cols.admits(amount, None if ratio is None else ratio[:, None]).any(axis=1)
            assert cols.refused(amount, ratio).tolist() == want.tolist(), (n, k, amount)


def _same_numbers(a, b) -> bool:
    import numpy as np

    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def test_one_row_shows_what_columns_of_that_host_alone_show():
    """``one_row(i)`` (a recheck's view of a current row) reads what new
    columns of host ``i`` alone hold: every field, class code, trait, aggregate
    value and resource slot (the view may have more provider or cell columns,
    absent ones), also after rows were rewritten."""
    from numa.topology import HostTopology
    from scheduler.host_columns import BOOL_FIELDS, CELL_FIELDS, FLOAT_FIELDS
    from tests.unit.numa.factories import host_cell, smt_cell

    rng = random.Random(7)
    agg = fakes.aggregate({"ram_weight_multiplier": "2.5"})
    hosts = []
    for i in range(12):
        topology = None
        if i % 3 == 0:
            topology = HostTopology(cells=(smt_cell(cores=4),))
        elif i % 3 == 1:
            topology = HostTopology(cells=(host_cell(pcpuset=range(4)),
                                           host_cell(id=1, pcpuset=range(4, 8))))
        providers = ({"inventories": {"VGPU": {"total": 4}}, "used": {"VGPU": 1}},) \
            if i % 4 == 0 else ()
        hosts.append(fakes.fake_host(f"h{i}", numa_topology=topology, providers=providers,
                                     vcpus_used=rng.randint(0, 8),
                                     aggregates=[agg] if i % 2 else [],
                                     traits=("HW_CPU_X86_AVX2",) if i % 5 else ()))
    cols = HostColumns(hosts)
    cols.classes.register("zone", lambda h: h.availability_zone)
    cols.class_codes("zone")
    cols.trait_rows("HW_CPU_X86_AVX2")
    cols.aggregate_min("ram_weight_multiplier")

    def check():
        for i, hs in enumerate(cols.hosts):
            view, alone = cols.one_row(i), HostColumns([hs], cols.classes)
            assert view.n == 1 and view.hosts == [hs]
            for name in FLOAT_FIELDS + BOOL_FIELDS + CELL_FIELDS:
                assert _same_numbers(getattr(view, name), getattr(alone, name)), (i, name)
            assert view.class_codes("zone").tolist() == alone.class_codes("zone").tolist()
            assert view.trait_rows("HW_CPU_X86_AVX2").tolist() == \
                alone.trait_rows("HW_CPU_X86_AVX2").tolist()
            for got, want in zip(view.aggregate_min("ram_weight_multiplier"),
                                 alone.aggregate_min("ram_weight_multiplier"), strict=True):
                assert got.tolist() == want.tolist(), i
            assert set(alone.resource_classes()) <= set(view.resource_classes())
            for rc in view.resource_classes():
                got, want = view.resources(rc).data, alone.resources(rc).data
                k = want.shape[2]
                assert _same_numbers(got[:, :, :k], want), (i, rc)
                absent = _absent_slots(got.shape[2] - k)
                assert _same_numbers(got[:, :, k:], absent), (i, rc)
            assert view.free_ram.tolist() == alone.free_ram.tolist()

    check()
    for i in rng.sample(range(len(hosts)), 5):
        old = cols.hosts[i]
        fresh = fakes.fake_host(old.host, numa_topology=old.numa_topology,
                                vcpus_used=rng.randint(0, 8), aggregates=[agg])
        cols.update(i, fresh)
    check()


def _absent_slots(k: int):
    """The data of ``k`` absent provider slots of one row."""
    from scheduler.host_columns import ResourceColumns

    return ResourceColumns.absent(1, k).data


def test_every_field_follows_a_rewritten_row_and_a_row_view_reads_it_when_read():
    """``update`` rewrites every field of the row (the fields share one block
    per kind), copies keep their own values, and a ``one_row`` view taken
    before the rewrite shows the row as it is when a field is first read."""
    from numa.topology import HostTopology
    from scheduler.host_columns import BOOL_FIELDS, CELL_FIELDS, FLOAT_FIELDS
    from tests.unit.numa.factories import smt_cell

    hosts = [fakes.fake_host(f"h{i}") for i in range(3)]
    cols = HostColumns(hosts)
    before = cols.copy()
    view = cols.one_row(1)
    assert view.free_ram.tolist() == [16384.0]      # read now: taken as it is
    fresh = fakes.fake_host("h1", numa_topology=HostTopology(cells=(smt_cell(cores=4),)),
                            num_io_ops=3, num_instances=2, failed_builds=1,
                            hypervisor_version=9001000, disabled=True, memory_mb_used=1024)
    cols.update(1, fresh)
    alone = HostColumns([fresh])
    for name in FLOAT_FIELDS + BOOL_FIELDS + CELL_FIELDS:
        got, want = getattr(cols, name)[1:2], getattr(alone, name)
        assert _same_numbers(got, want), name
        assert _same_numbers(getattr(view, name), want), name   # first read after it
        assert _same_numbers(getattr(before, name), HostColumns(hosts).__dict__[name]), name
    assert view.free_ram.tolist() == [16384.0 - 1024]
    assert cols.num_io_ops.tolist() == [0.0, 3.0, 0.0] and cols.disabled.tolist() == \
        [False, True, False]
    assert before.num_io_ops.tolist() == [0.0, 0.0, 0.0]
