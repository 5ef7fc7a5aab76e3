"""A node's resource providers as the scheduler sees them, and where a request's
groups go in them.

A :class:`ProviderTree` is the *shape* of a node's providers: for each provider
(the root first) its parent, traits and inventories — no ids, names or usage,
so that nodes built alike share one interned tree object. A node's usage is a
tuple aligned with ``tree.slots`` (one slot per provider and class). Hosts with
the same tree and usage get the same answer; the per-host checks are
remembered by that.

:func:`assign` answers "which provider gives what" for a
:class:`scheduler.resource_request.ResourceRequest`, Placement's way: a
numbered group is met by one provider (distinct ones under ``group_policy
isolate``); in the unnumbered group each class comes from one provider, the
required traits from the providers used together, and no provider used has a
forbidden trait. It returns the amounts per slot, or why nothing fits.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

from db.inventory import DISK_GB, MEMORY_MB, VCPU, Inventory, fits
from scheduler.resource_request import RequestGroup, ResourceRequest


@dataclasses.dataclass(frozen=True, slots=True)
class Provider:
    """One provider's shape: its parent's index (None for the root), its traits
    and its inventories (sorted by class)."""

    parent: int | None
    traits: frozenset[str]
    inventories: tuple[tuple[str, Inventory], ...]


class ProviderTree:
    """The providers of a node (root first), interned: use :func:`tree_of`."""

    __slots__ = ("providers", "slots", "slot_of", "by_class", "_inventories", "_hash",
                 "root_inventories", "classic_ratios", "__weakref__")

    def __init__(self, providers: tuple[Provider, ...]) -> None:
        self.providers = providers
        slots = []
        for index, provider in enumerate(providers):
            for rc, _inv in provider.inventories:
                slots.append((index, rc))
        #: (provider index, class) of every inventory, in order.
        self.slots: tuple[tuple[int, str], ...] = tuple(slots)
        self.slot_of: dict[tuple[int, str], int] = {s: i for i, s in enumerate(slots)}
        by_class: dict[str, list[int]] = {}
        for i, (_p, rc) in enumerate(slots):
            by_class.setdefault(rc, []).append(i)
        #: class -> its slots, in provider order (the root's first).
        self.by_class: dict[str, tuple[int, ...]] = {rc: tuple(v) for rc, v in by_class.items()}
        self._inventories: tuple[Inventory, ...] = tuple(
            dict(providers[p].inventories)[rc] for p, rc in slots)
        self._hash = hash(providers)
        #: class -> the root provider's inventory of it (per host views read it
        #: on every request: one lookup, not a walk through the slots).
        self.root_inventories: dict[str, Inventory] = dict(providers[0].inventories) \
            if providers else {}
        #: The root's allocation ratios of VCPU, MEMORY_MB and DISK_GB (1.0
        #: without the class): the classic ratios filters and NUMA fitting read.
        self.classic_ratios: tuple[float, float, float] = tuple(
            inv.allocation_ratio if inv is not None else 1.0
            for inv in map(self.root_inventories.get, (VCPU, MEMORY_MB, DISK_GB)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, ProviderTree) and self.providers == other.providers

    def __repr__(self) -> str:
        return f"<ProviderTree {len(self.providers)} providers, {len(self.slots)} slots>"

    @property
    def root(self) -> Provider:
        return self.providers[0]

    @property
    def nested(self) -> bool:
        return len(self.providers) > 1

    def slot_inventory(self, slot: int) -> Inventory:
        return self._inventories[slot]

    def root_inventory(self, rc: str) -> Inventory | None:
        return self.root_inventories.get(rc)


_TREES: dict[tuple[Provider, ...], ProviderTree] = {}
EMPTY_USAGE: tuple[int, ...] = ()


def tree_of(providers: Sequence[Provider]) -> ProviderTree:
    """The interned tree of these providers (nodes built alike share it)."""
    key = tuple(providers)
    tree = _TREES.get(key)
    if tree is None:
        if len(_TREES) >= 65536:
            _TREES.clear()
        tree = _TREES[key] = ProviderTree(key)
    return tree


def provider(inventories: Mapping[str, Inventory], traits=(), parent: int | None = None
             ) -> Provider:
    return Provider(parent=parent, traits=frozenset(traits),
                    inventories=tuple(sorted(inventories.items())))


EMPTY_TREE = tree_of((provider({}),))


# -- where a request goes --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """Amounts per slot of the tree (merged over the groups), and the provider
    index each group's resources come from (``mappings``: suffix -> indexes)."""

    amounts: tuple[tuple[int, int], ...]        # (slot, amount), by slot
    mappings: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def add_to(self, usage: tuple[int, ...]) -> tuple[int, ...]:
        out = list(usage)
        for slot, amount in self.amounts:
            out[slot] += amount
        return tuple(out)

    def take_from(self, usage: tuple[int, ...]) -> tuple[int, ...]:
        out = list(usage)
        for slot, amount in self.amounts:
            out[slot] = max(0, out[slot] - amount)
        return tuple(out)


NOTHING = Assignment(amounts=())

#: Choices tried at most per host before giving up on a tree of many providers.
MAX_TRIES = 20000


def unit_reason(rc: str, amount: int, inv: Inventory) -> str | None:
    """The reason text when ``amount`` breaks the inventory's unit limits."""
    broken = inv.broken_unit(amount)
    return None if broken is None else f"{rc} {amount} {broken}"


def insufficient(rc: str, amount: int) -> str:
    return f"insufficient {rc}: need {amount}"


def assign(tree: ProviderTree, usage: Sequence[int], request: ResourceRequest
           ) -> tuple[Assignment | None, str | None]:
    """Where ``request``'s groups go in ``tree`` with ``usage`` on it:
    (Assignment, None), or (None, why not)."""
    if not request.groups:
        return NOTHING, None
    if not tree.nested:
        return _assign_root(tree, usage, request)
    return _Search(tree, usage, request).run()


def _assign_root(tree: ProviderTree, usage: Sequence[int], request: ResourceRequest
                 ) -> tuple[Assignment | None, str | None]:
    """Every group on the root, the only provider."""
    root = tree.root
    numbered = request.numbered
    if request.group_policy == "isolate" and len(numbered) > 1:
        return None, (f"group_policy isolate: {len(numbered)} numbered groups need as many "
                      f"providers")
    totals: dict[str, int] = {}
    for group in request.groups:
        reason = _trait_reason(group, root.traits)
        if reason:
            return None, reason
        for rc, amount in group.resources:
            slot = tree.slot_of.get((0, rc))
            if slot is None:
                return None, f"no {rc} inventory"
            reason = unit_reason(rc, amount, tree.slot_inventory(slot))
            if reason:
                return None, reason
            totals[rc] = totals.get(rc, 0) + amount
    amounts = []
    for rc, amount in sorted(totals.items()):
        slot = tree.slot_of[(0, rc)]
        inv = tree.slot_inventory(slot)
        reason = unit_reason(rc, amount, inv)       # the groups together, as claimed
        if reason:
            return None, reason
        if not fits(usage[slot], amount, inv.total, inv.reserved, inv.allocation_ratio):
            return None, insufficient(rc, amount)
        amounts.append((slot, amount))
    amounts.sort()
    mappings = tuple((g.suffix, (0,)) for g in request.groups)
    return Assignment(amounts=tuple(amounts), mappings=mappings), None


def _trait_reason(group: RequestGroup, traits: frozenset[str]) -> str | None:
    missing = group.required - traits
    if missing:
        return f"lacks trait {min(missing)}"
    present = group.forbidden & traits
    if present:
        return f"has forbidden trait {min(present)}"
    return None


class _Search:
    """Backtracking over the choices of providers, for a tree of several."""

    def __init__(self, tree: ProviderTree, usage: Sequence[int],
                 request: ResourceRequest) -> None:
        self.tree = tree
        self.usage = list(usage)
        self.request = request
        self.isolate = request.group_policy == "isolate"
        self.tries = 0
        #: What the choices so far add to each slot (claimed as one amount).
        self.added = [0] * len(tree.slots)

    def run(self) -> tuple[Assignment | None, str | None]:
        tree, request = self.tree, self.request
        # Steps: each numbered group is one choice of provider; each class of the
        # unnumbered group is one choice of provider.
        steps: list[tuple[RequestGroup, str | None, list[int]]] = []
        for group in request.groups:
            if group.numbered:
                candidates = [p for p in range(len(tree.providers))
                              if self._group_fits(group, p)]
                if not candidates:
                    return None, self._group_reason(group)
                steps.append((group, None, candidates))
            else:
                for rc, amount in group.resources:
                    candidates = []
                    for slot in tree.by_class.get(rc, ()):
                        p = tree.slots[slot][0]
                        if group.forbidden & tree.providers[p].traits:
                            continue
                        if unit_reason(rc, amount, tree.slot_inventory(slot)) is None:
                            candidates.append(p)
                    if not candidates:
                        return None, self._class_reason(group, rc, amount)
                    steps.append((group, rc, candidates))
        unnumbered = request.unnumbered
        if unnumbered is not None and not unnumbered.resources:
            reason = _trait_reason(unnumbered, tree.root.traits)
            if reason:
                return None, reason
        chosen: list[int] = []
        found = self._search(steps, 0, chosen, set())
        if found is None:
            return None, self._search_reason(steps)
        return found, None

    # -- candidates ---------------------------------------------------------------
    def _group_fits(self, group: RequestGroup, p: int) -> bool:
        provider = self.tree.providers[p]
        if _trait_reason(group, provider.traits):
            return False
        for rc, amount in group.resources:
            slot = self.tree.slot_of.get((p, rc))
            if slot is None or not self.tree.slot_inventory(slot).admits(self.usage[slot],
                                                                         amount):
                return False
        return True

    # -- the search ---------------------------------------------------------------------
    def _search(self, steps, i: int, chosen: list[int], isolated: set[int]
                ) -> Assignment | None:
        self.tries += 1
        if self.tries > MAX_TRIES:
            return None
        if i == len(steps):
            return self._complete(steps, chosen)
        group, rc, candidates = steps[i]
        # the provider with the most room first: requests spread over providers
        for p in sorted(candidates, key=lambda p: -self._room(group, rc, p)):
            if group.numbered and self.isolate and p in isolated:
                continue
            if not self._take(group, rc, p, +1):
                self._take(group, rc, p, -1)
                continue
            chosen.append(p)
            if group.numbered:
                isolated.add(p)
            found = self._search(steps, i + 1, chosen, isolated)
            if group.numbered:
                isolated.discard(p)
            chosen.pop()
            self._take(group, rc, p, -1)
            if found is not None:
                return found
        return None

    def _room(self, group: RequestGroup, rc: str | None, p: int) -> float:
        classes = [rc] if rc is not None else [c for c, _ in group.resources]
        room = 0.0
        for c in classes:
            slot = self.tree.slot_of[(p, c)]
            room += self.tree.slot_inventory(slot).capacity - self.usage[slot]
        return room

    def _take(self, group: RequestGroup, rc: str | None, p: int, sign: int) -> bool:
        """Add (sign +1) or remove (-1) the step's amounts on provider ``p``;
        whether everything still fits (when adding)."""
        ok = True
        for c, amount in ([(rc, group.amount(rc))] if rc is not None else group.resources):
            slot = self.tree.slot_of[(p, c)]
            self.usage[slot] += sign * amount
            self.added[slot] += sign * amount
            if sign > 0:
                inv = self.tree.slot_inventory(slot)
                if not fits(self.usage[slot], 0, inv.total, inv.reserved,
                            inv.allocation_ratio) or unit_reason(c, self.added[slot], inv):
                    ok = False
        return ok

    def _complete(self, steps, chosen: list[int]) -> Assignment | None:
        tree = self.tree
        unnumbered = self.request.unnumbered
        if unnumbered is not None and unnumbered.required and unnumbered.resources:
            used = {p for (group, _rc, _c), p in zip(steps, chosen, strict=True)
                    if not group.numbered}
            traits: frozenset[str] = frozenset()
            for p in used:
                traits |= tree.providers[p].traits
            if unnumbered.required - traits:
                return None
        amounts: dict[int, int] = {}
        mappings: dict[str, set[int]] = {}
        for (group, rc, _c), p in zip(steps, chosen, strict=True):
            for c, amount in ([(rc, group.amount(rc))] if rc is not None else group.resources):
                slot = tree.slot_of[(p, c)]
                amounts[slot] = amounts.get(slot, 0) + amount
            mappings.setdefault(group.suffix, set()).add(p)
        if unnumbered is not None and not unnumbered.resources:
            mappings[""] = {0}
        return Assignment(amounts=tuple(sorted(amounts.items())),
                          mappings=tuple((s, tuple(sorted(ps)))
                                         for s, ps in sorted(mappings.items())))

    # -- reasons --------------------------------------------------------------------------
    def _class_reason(self, group: RequestGroup, rc: str, amount: int) -> str:
        tree = self.tree
        slots = tree.by_class.get(rc, ())
        if not slots:
            return f"no {rc} inventory"
        allowed = [s for s in slots
                   if not group.forbidden & tree.providers[tree.slots[s][0]].traits]
        if not allowed:
            return f"has forbidden trait {min(group.forbidden)}"
        return unit_reason(rc, amount, tree.slot_inventory(allowed[0])) or \
            insufficient(rc, amount)

    def _group_reason(self, group: RequestGroup) -> str:
        tree = self.tree
        for rc, _amount in group.resources:
            if rc not in tree.by_class:
                return f"no {rc} inventory"
        with_traits = [p for p in range(len(tree.providers))
                       if not _trait_reason(group, tree.providers[p].traits)]
        if not with_traits:
            missing = [t for t in sorted(group.required)
                       if not any(t in prov.traits for prov in tree.providers)]
            if missing:
                return f"lacks trait {missing[0]}"
            return f"no provider meets the traits of group {group.suffix}"
        for rc, _amount in group.resources:
            if not any((p, rc) in tree.slot_of for p in with_traits):
                return f"no {rc} inventory with the traits of group {group.suffix}"
        for rc, amount in group.resources:
            if not any(tree.slot_inventory(tree.slot_of[(p, rc)]).admits(
                    self.usage[tree.slot_of[(p, rc)]], amount)
                    for p in with_traits if (p, rc) in tree.slot_of):
                return insufficient(rc, amount)
        return f"no single provider has everything group {group.suffix} asks"

    def _search_reason(self, steps) -> str:
        if self.tries > MAX_TRIES:
            return "too many providers to choose among"
        unnumbered = self.request.unnumbered
        if unnumbered is not None and unnumbered.required:
            traits: frozenset[str] = frozenset()
            for prov in self.tree.providers:
                traits |= prov.traits
            missing = unnumbered.required - traits
            if missing:
                return f"lacks trait {min(missing)}"
        if self.isolate and len(self.request.numbered) > 1:
            return "group_policy isolate: not enough providers for every group"
        for group, rc, _c in steps:
            if rc is not None:
                return insufficient(rc, group.amount(rc))
        return "the request's groups do not fit together"


def describe_usage(tree: ProviderTree, usage: Sequence[int]) -> Iterator[tuple[int, str, int]]:
    """(provider index, class, used) of every slot."""
    for slot, (p, rc) in enumerate(tree.slots):
        yield p, rc, usage[slot] if slot < len(usage) else 0


def from_records(records) -> tuple[ProviderTree, tuple[int, ...], tuple[tuple[int, str, str], ...]]:
    """(tree, usage, providers' (id, uuid, name)) of a node's stored providers
    (``db.host_states.ProviderRecord``, the root first)."""
    if not records:
        return EMPTY_TREE, EMPTY_USAGE, ()
    index = {rec.id: i for i, rec in enumerate(records)}
    shapes = []
    for rec in records:
        shapes.append(provider({rc: inv for rc, (inv, _used) in rec.inventories.items()},
                               rec.traits, None if rec.parent_id is None
                               else index.get(rec.parent_id, 0)))
    tree = tree_of(shapes)
    used = {(i, rc): n for i, rec in enumerate(records)
            for rc, (_inv, n) in rec.inventories.items()}
    usage = tuple(used[slot] for slot in tree.slots)
    return tree, usage, tuple((rec.id, rec.uuid, rec.name) for rec in records)
