"""The capacity rule: one function, the same answer as a number, a numpy vector and SQL."""
from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from db import inventory
from db.inventory import Inventory, InventoryError

inventories = st.builds(
    lambda total, reserved, lo, span, step, ratio: Inventory(
        total=total, reserved=min(reserved, total), min_unit=lo, max_unit=lo + span,
        step_size=step, allocation_ratio=ratio),
    st.integers(0, 5000), st.integers(0, 5000), st.integers(1, 50), st.integers(0, 5000),
    st.integers(1, 16), st.sampled_from([0.5, 1.0, 1.5, 2.0, 4.0, 16.0]))


def _by_hand(inv: Inventory, used: int, amount: int) -> bool:
    """The rule written out the obvious way (the test's reference)."""
    return (inv.min_unit <= amount <= inv.max_unit and amount % inv.step_size == 0
            and used + amount <= (inv.total - inv.reserved) * inv.allocation_ratio)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(inventories, st.integers(0, 20000), st.integers(1, 6000)),
                min_size=1, max_size=40))
def test_rule_is_the_same_on_numbers_vectors_and_sql(cases):
    want = [_by_hand(inv, used, amount) for inv, used, amount in cases]
    assert [inv.admits(used, amount) for inv, used, amount in cases] == want

    # numpy: one amount per call, as the host columns ask it
    for inv, used, amount in cases:
        cols = {f: np.array([float(getattr(inv, f))]) for f in
                ("total", "reserved", "min_unit", "max_unit", "step_size",
                 "allocation_ratio")}
        vec = inventory.unit_ok(amount, cols["min_unit"], cols["max_unit"],
                                cols["step_size"]) & inventory.fits(
            np.array([float(used)]), amount, cols["total"], cols["reserved"],
            cols["allocation_ratio"])
        assert bool(vec[0]) == _by_hand(inv, used, amount)

    # SQL: the claim's guard, evaluated by SQLite on a table of the same rows
    meta = sa.MetaData()
    table = sa.Table("inv", meta, sa.Column("id", sa.Integer, primary_key=True),
                     *(sa.Column(f, sa.BigInteger) for f in
                       ("total", "reserved", "min_unit", "max_unit", "step_size", "used",
                        "amount")),
                     sa.Column("allocation_ratio", sa.Float))
    engine = sa.create_engine("sqlite://")
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [
            {"id": i, "used": used, "amount": amount, **inv.to_primitive()}
            for i, (inv, used, amount) in enumerate(cases)])
        guard = inventory.admits(table.c.used, table.c.amount, table.c)
        got = dict(conn.execute(sa.select(table.c.id, guard)).all())
    assert [bool(got[i]) for i in range(len(cases))] == want


def test_inventory_from_primitive_defaults_and_errors():
    inv = Inventory.from_primitive({"total": 4}, "inventories.VGPU")
    assert inv == Inventory(total=4, max_unit=4)
    assert Inventory.from_primitive(8, "x") == Inventory(total=8, max_unit=8)
    # total 0 is how a fleet file or the agent says "this class is gone";
    # it must not trip over the max_unit >= 1 rule.
    assert Inventory.from_primitive({"total": 0}, "x") == Inventory(total=0, max_unit=1)
    assert Inventory.from_primitive(0, "x").capacity == 0
    base = Inventory(total=32, reserved=2, max_unit=32, allocation_ratio=4.0)
    assert Inventory.from_primitive({"allocation_ratio": 2.0}, "x", defaults=base) == \
        Inventory(total=32, reserved=2, max_unit=32, allocation_ratio=2.0)
    for data, field in (({"total": -1}, "inventories.VGPU.total"),
                        ({"total": 4, "reserved": 5}, "inventories.VGPU.reserved"),
                        ({"total": 4, "step_size": 0}, "inventories.VGPU.step_size"),
                        ({"total": 4, "allocation_ratio": 0}, "inventories.VGPU.allocation_ratio"),
                        ({"total": 4, "allocation_ratio": float("inf")},
                         "inventories.VGPU.allocation_ratio"),
                        ({"total": 4, "min_unit": 3, "max_unit": 2}, "inventories.VGPU.min_unit"),
                        ({"total": 4, "colour": 1}, "inventories.VGPU.colour"),
                        ({"reserved": 1}, "inventories.VGPU.total"),
                        ("four", "inventories.VGPU"),
                        ({"total": True}, "inventories.VGPU.total"),
                        ({"total": 2 ** 40}, "inventories.VGPU.total")):
        with pytest.raises(InventoryError) as e:
            Inventory.from_primitive(data, "inventories.VGPU")
        assert e.value.field == field


@pytest.mark.parametrize("name,ok", [("VCPU", True), ("VGPU", True), ("CUSTOM_GOLD_1", True),
                                     ("CUSTOM_", False), ("CUSTOM_gold", False),
                                     ("vcpu", False), ("GPU", False), ("", False), (7, False)])
def test_class_names(name, ok):
    if ok:
        assert inventory.check_class(name, "f") == name
    else:
        with pytest.raises(InventoryError) as e:
            inventory.check_class(name, "flavor.extra_specs.resources:X")
        assert e.value.field == "flavor.extra_specs.resources:X"


@pytest.mark.parametrize("name,ok", [("HW_CPU_X86_AVX512F", True), ("CUSTOM_RACK_A", True),
                                     ("HW_CPU_X86_AVX9000", False), ("custom_x", False),
                                     ("CUSTOM_A-B", False)])
def test_trait_names(name, ok):
    if ok:
        assert inventory.check_trait(name, "f") == name
    else:
        with pytest.raises(InventoryError):
            inventory.check_trait(name, "f")


def test_node_inventories_split_dedicated_cpus_and_round_disk_up():
    invs = inventory.node_inventories(
        vcpus=32, memory_mb=65536, local_gb=100, cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.5, disk_allocation_ratio=1.0, reserved_host_cpus=2,
        reserved_host_memory_mb=4096, reserved_host_disk_mb=1025, dedicated_cpus=16)
    assert invs["VCPU"] == Inventory(total=16, reserved=2, max_unit=16, allocation_ratio=4.0)
    assert invs["PCPU"] == Inventory(total=16, max_unit=16)
    assert invs["MEMORY_MB"] == Inventory(total=65536, reserved=4096, max_unit=65536,
                                          allocation_ratio=1.5)
    assert invs["DISK_GB"] == Inventory(total=100, reserved=2, max_unit=100)
    # nothing of a class with a total of 0: no disk, every CPU dedicated
    invs = inventory.node_inventories(
        vcpus=8, memory_mb=1024, local_gb=0, cpu_allocation_ratio=1.0,
        ram_allocation_ratio=1.0, disk_allocation_ratio=1.0, dedicated_cpus=8)
    assert set(invs) == {"PCPU", "MEMORY_MB"}
