"""Where a request's groups go in a node's providers, checked against brute force."""
from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from db.inventory import Inventory
from scheduler import provider_tree
from scheduler.provider_tree import assign, provider, tree_of
from scheduler.resource_request import RequestGroup, ResourceRequest

CLASSES = ("VCPU", "MEMORY_MB", "VGPU", "CUSTOM_X")
TRAITS = ("CUSTOM_A", "CUSTOM_B", "CUSTOM_C")


def _valid(tree, usage, request, chosen_numbered, chosen_classes) -> bool:
    """Whether one complete choice meets every rule (the test's reference)."""
    added: dict[int, list[int]] = {}
    numbered = request.numbered
    if request.group_policy == "isolate" and len(set(chosen_numbered)) != len(numbered):
        return False
    for group, p in zip(numbered, chosen_numbered, strict=True):
        prov = tree.providers[p]
        if group.required - prov.traits or group.forbidden & prov.traits:
            return False
        for rc, amount in group.resources:
            slot = tree.slot_of.get((p, rc))
            if slot is None:
                return False
            added.setdefault(slot, []).append(amount)
    unnumbered = request.unnumbered
    if unnumbered is not None:
        used_traits: set[str] = set()
        for (rc, amount), p in zip(unnumbered.resources, chosen_classes, strict=True):
            prov = tree.providers[p]
            if unnumbered.forbidden & prov.traits:
                return False
            slot = tree.slot_of.get((p, rc))
            if slot is None:
                return False
            added.setdefault(slot, []).append(amount)
            used_traits |= prov.traits
        if not unnumbered.resources:
            used_traits = set(tree.root.traits)
            if unnumbered.forbidden & used_traits:
                return False
        if unnumbered.required - used_traits:
            return False
    for slot, parts in added.items():
        inv = tree.slot_inventory(slot)
        if not all(inv.admits(0, a) or (inv.min_unit <= a <= inv.max_unit
                                         and a % inv.step_size == 0) for a in parts):
            return False
        total = sum(parts)
        if not inv.admits(usage[slot], total):
            return False
    return True


def brute_force(tree, usage, request) -> bool:
    n = len(tree.providers)
    numbered = request.numbered
    classes = request.unnumbered.resources if request.unnumbered else ()
    for chosen_numbered in itertools.product(range(n), repeat=len(numbered)):
        for chosen_classes in itertools.product(range(n), repeat=len(classes)):
            if _valid(tree, usage, request, chosen_numbered, chosen_classes):
                return True
    return False


inventories = st.builds(lambda total, reserved, hi, step: Inventory(
    total=total, reserved=min(reserved, total), max_unit=max(1, hi), step_size=step),
    st.integers(1, 8), st.integers(0, 2), st.integers(1, 8), st.sampled_from([1, 1, 2]))
providers = st.builds(lambda invs, traits: (invs, traits),
                      st.dictionaries(st.sampled_from(CLASSES), inventories, max_size=3),
                      st.frozensets(st.sampled_from(TRAITS), max_size=2))
trees = st.lists(providers, min_size=1, max_size=4).map(
    lambda ps: tree_of([provider(invs, traits, None if i == 0 else 0)
                        for i, (invs, traits) in enumerate(ps)]))
groups = st.builds(lambda res, req, forb: (res, req, forb - req),
                   st.dictionaries(st.sampled_from(CLASSES), st.integers(1, 5), max_size=2),
                   st.frozensets(st.sampled_from(TRAITS), max_size=1),
                   st.frozensets(st.sampled_from(TRAITS), max_size=1))


@st.composite
def requests(draw):
    unnumbered = draw(groups)
    numbered = draw(st.lists(groups.filter(lambda g: g[0]), max_size=2))
    out = []
    if unnumbered[0] or unnumbered[1] or unnumbered[2]:
        out.append(RequestGroup("", tuple(sorted(unnumbered[0].items())), unnumbered[1],
                                unnumbered[2]))
    for i, (res, req, forb) in enumerate(numbered, start=1):
        out.append(RequestGroup(str(i), tuple(sorted(res.items())), req, forb))
    policy = draw(st.sampled_from(["none", "isolate"])) if len(numbered) > 1 else None
    return ResourceRequest(groups=tuple(out), group_policy=policy)


@settings(max_examples=600, deadline=None)
@given(trees, requests(), st.data())
def test_assign_finds_a_placement_exactly_when_one_exists(tree, request, data):
    usage = tuple(data.draw(st.integers(0, tree.slot_inventory(s).total))
                  for s in range(len(tree.slots)))
    assignment, reason = assign(tree, usage, request)
    assert (assignment is not None) == brute_force(tree, usage, request), reason
    if assignment is None:
        assert isinstance(reason, str) and reason
        return
    # what it assigns fits, and adds up to what the request asks
    after = assignment.add_to(usage)
    for slot, amount in assignment.amounts:
        inv = tree.slot_inventory(slot)
        assert inv.admits(usage[slot], amount)
        assert after[slot] == usage[slot] + amount
    asked = request.amounts()
    got: dict[str, int] = {}
    for slot, amount in assignment.amounts:
        rc = tree.slots[slot][1]
        got[rc] = got.get(rc, 0) + amount
    assert got == asked


def test_vgpu_types_on_two_gpus_with_isolate():
    root = provider({"VCPU": Inventory(total=16, max_unit=16)}, {"HW_CPU_X86_AVX2"})
    gpu_a = provider({"VGPU": Inventory(total=4, max_unit=4)}, {"CUSTOM_VGPU_TYPE_A"}, 0)
    gpu_b = provider({"VGPU": Inventory(total=2, max_unit=2)}, {"CUSTOM_VGPU_TYPE_B"}, 0)
    tree = tree_of([root, gpu_a, gpu_b])
    usage = (0, 0, 0)
    both = ResourceRequest(groups=(
        RequestGroup("", (("VCPU", 2),)),
        RequestGroup("1", (("VGPU", 1),), frozenset({"CUSTOM_VGPU_TYPE_A"})),
        RequestGroup("2", (("VGPU", 1),), frozenset({"CUSTOM_VGPU_TYPE_B"}))),
        group_policy="isolate")
    assignment, reason = assign(tree, usage, both)
    assert reason is None
    assert dict(assignment.mappings) == {"": (0,), "1": (1,), "2": (2,)}
    # type B is full: the group asking it has no provider
    full = (0, 0, 2)
    assert assign(tree, full, both) == (None, "insufficient VGPU: need 1")
    # two groups on one GPU type under isolate: one provider only
    same = ResourceRequest(groups=(
        RequestGroup("1", (("VGPU", 1),), frozenset({"CUSTOM_VGPU_TYPE_B"})),
        RequestGroup("2", (("VGPU", 1),), frozenset({"CUSTOM_VGPU_TYPE_B"}))),
        group_policy="isolate")
    assert assign(tree, usage, same)[0] is None
    assert assign(tree, usage, ResourceRequest(groups=same.groups, group_policy="none"))[0] \
        is not None


def test_reasons_name_the_class_or_trait():
    root = tree_of([provider({"VCPU": Inventory(total=4, max_unit=4)}, {"CUSTOM_A"})])
    ask = ResourceRequest(groups=(RequestGroup("", (("VGPU", 1),)),))
    assert assign(root, (0,), ask) == (None, "no VGPU inventory")
    ask = ResourceRequest(groups=(RequestGroup("", (("VCPU", 1),), frozenset({"CUSTOM_B"})),))
    assert assign(root, (0,), ask) == (None, "lacks trait CUSTOM_B")
    ask = ResourceRequest(groups=(RequestGroup("", (("VCPU", 1),), frozenset(),
                                               frozenset({"CUSTOM_A"})),))
    assert assign(root, (0,), ask) == (None, "has forbidden trait CUSTOM_A")
    ask = ResourceRequest(groups=(RequestGroup("", (("VCPU", 5),)),))
    assert assign(root, (0,), ask) == (None, "VCPU 5 above max_unit")
    ask = ResourceRequest(groups=(RequestGroup("", (("VCPU", 2),)),))
    assert assign(root, (3,), ask) == (None, provider_tree.insufficient("VCPU", 2))


def test_groups_on_one_provider_are_one_allocation_within_max_unit():
    """Two groups landing on one provider are claimed as one amount: together
    they must stay within max_unit (the claim's guard checks the sum)."""
    tree = tree_of([provider({"VGPU": Inventory(total=8, max_unit=2)})])
    two = ResourceRequest(groups=(RequestGroup("1", (("VGPU", 2),)),
                                  RequestGroup("2", (("VGPU", 1),))), group_policy="none")
    assert assign(tree, (0,), two) == (None, "VGPU 3 above max_unit")
    nested = tree_of([provider({}), provider({"VGPU": Inventory(total=8, max_unit=2)}, (), 0),
                      provider({"VGPU": Inventory(total=8, max_unit=2)}, (), 0)])
    assignment, _ = assign(nested, (0, 0), two)
    assert assignment is not None and sorted(a for _s, a in assignment.amounts) == [1, 2]
