"""PreemptibleIndex: the cached hosts' instances that a request of higher
priority could preempt, as columns (one slot per instance), so that the
preemption search finds hosts and victims without reading the database.

Kept per instance: its node, priority, preemptible and pending flags, creation
time, and what it holds per resource class summed over its node's providers
(for the vector checks), beside the ``db.preemption.Candidate`` with what it
holds per provider, its NUMA cells and device pools (for the exact check).
Indexed are the instances that are not moving and are preemptible, or every
instance once a search asks for non-preemptible victims
(``[preemption] preempt_non_preemptible``).

The HostManager keeps it in step with its hosts: loaded with them, re-read for
the nodes it re-reads, told of this process's claims, confirmations and
releases. Another process's confirmation is not seen by a refresh (it changes
no node): the search re-reads the pending flags of the instances it would
otherwise consider (``pending``). A stale slot can only make a search choose
a victim that is gone: the claim re-checks every victim under its row lock and
conflicts, and the node is re-read; it never preempts one wrongly.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence

import numpy as np

from db.preemption import Candidate

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class View:
    """The slots a request of some priority may preempt, read in one step:
    per slot its node, priority, creation time (epoch seconds) and, per class
    asked, what it holds (summed over providers); ``candidate(i)`` its
    Candidate (None when the slot changed since)."""

    slots: np.ndarray
    node: np.ndarray
    priority: np.ndarray
    created: np.ndarray
    amounts: dict[str, np.ndarray]
    entries: list

    def candidate(self, i: int) -> Candidate | None:
        c = self.entries[int(self.slots[i])]
        if c is None or c.node_id != int(self.node[i]) or c.priority != int(self.priority[i]):
            return None
        return c


class PreemptibleIndex:
    """The instances a request of higher priority could preempt, by slot."""

    def __init__(self, any_preemptible: bool = False) -> None:
        #: Non-preemptible instances are indexed too.
        self.any_preemptible = any_preemptible
        self.loaded = False
        self._lock = threading.Lock()
        self._cap = 0
        self._top = 0                       # slots [0, _top) were ever used
        self.node = _EMPTY
        self.priority = _EMPTY
        self.created = np.zeros(0)
        self.preemptible = np.zeros(0, dtype=bool)
        self.pending = np.zeros(0, dtype=bool)
        self.alive = np.zeros(0, dtype=bool)
        self._amounts: dict[str, np.ndarray] = {}
        self._entries: list[Candidate | None] = []
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._by_node: dict[int, set[str]] = {}

    def __len__(self) -> int:
        return len(self._slot)

    # -- writing (the HostManager) --------------------------------------------
    def load(self, rows: Iterable[tuple[Candidate, bool, bool]], any_preemptible: bool
             ) -> None:
        """Every indexed instance afresh: (candidate, preemptible, pending)."""
        with self._lock:
            self.__init__(any_preemptible)
            for row in rows:
                self._add(*row)
            self.loaded = True

    def replace_nodes(self, node_ids: Iterable[int],
                      rows: Iterable[tuple[Candidate, bool, bool]]) -> None:
        """The indexed instances of ``node_ids`` are now ``rows``."""
        with self._lock:
            for node_id in node_ids:
                for uuid in list(self._by_node.get(node_id, ())):
                    self._remove(uuid)
            for row in rows:
                self._add(*row)

    def add(self, candidate: Candidate, preemptible: bool, pending: bool) -> None:
        """A claim this process made (indexed when preemptible, or when
        every instance is)."""
        if not (preemptible or self.any_preemptible):
            return
        with self._lock:
            self._add(candidate, preemptible, pending)

    def remove(self, uuid: str) -> None:
        with self._lock:
            self._remove(uuid)

    def drop_node(self, node_id: int) -> None:
        with self._lock:
            for uuid in list(self._by_node.get(node_id, ())):
                self._remove(uuid)

    def settle(self, states: dict[str, bool], asked: Sequence[str]) -> None:
        """Take re-read pending flags (``states``: uuid -> pending); the
        ``asked`` instances missing from it no longer count."""
        with self._lock:
            for uuid in asked:
                slot = self._slot.get(uuid)
                if slot is None:
                    continue
                if uuid in states:
                    self.pending[slot] = states[uuid]
                else:
                    self._remove(uuid)

    def confirmed(self, uuids: Iterable[str]) -> None:
        with self._lock:
            for uuid in uuids:
                slot = self._slot.get(uuid)
                if slot is not None:
                    self.pending[slot] = False

    def _add(self, c: Candidate, preemptible: bool, pending: bool) -> None:
        if c.uuid in self._slot:
            self._remove(c.uuid)
        if self._free:
            slot = self._free.pop()
        else:
            if self._top == self._cap:
                self._grow(max(64, 2 * self._cap))
            slot = self._top
            self._top += 1
        self.node[slot] = c.node_id
        self.priority[slot] = c.priority
        self.created[slot] = c.created_at.timestamp() if c.created_at else 0.0
        self.preemptible[slot] = preemptible
        self.pending[slot] = pending
        self.alive[slot] = True
        for column in self._amounts.values():
            column[slot] = 0
        for _provider, rc, amount in c.amounts:
            column = self._amounts.get(rc)
            if column is None:
                column = self._amounts[rc] = np.zeros(self._cap)
            column[slot] += amount
        self._entries[slot] = c
        self._slot[c.uuid] = slot
        self._by_node.setdefault(c.node_id, set()).add(c.uuid)

    def _remove(self, uuid: str) -> None:
        slot = self._slot.pop(uuid, None)
        if slot is None:
            return
        c = self._entries[slot]
        self._entries[slot] = None
        self.alive[slot] = False
        self._free.append(slot)
        on_node = self._by_node.get(c.node_id)
        if on_node is not None:
            on_node.discard(uuid)
            if not on_node:
                del self._by_node[c.node_id]

    def _grow(self, cap: int) -> None:
        def grown(a: np.ndarray) -> np.ndarray:
            out = np.zeros(cap, dtype=a.dtype)
            out[:len(a)] = a
            return out

        # new arrays, so that views taken before keep theirs
        self.node, self.priority, self.created = (grown(self.node), grown(self.priority),
                                                  grown(self.created))
        self.preemptible, self.pending, self.alive = (
            grown(self.preemptible), grown(self.pending), grown(self.alive))
        self._amounts = {rc: grown(a) for rc, a in self._amounts.items()}
        self._entries.extend([None] * (cap - self._cap))
        self._cap = cap

    # -- reading (the preemption search) ---------------------------------------
    def _mask(self, priority: int, any_preemptible: bool) -> np.ndarray:
        top = self._top
        mask = self.alive[:top] & (self.priority[:top] < priority)
        if not any_preemptible:
            mask &= self.preemptible[:top]
        return mask

    def pending_below(self, priority: int, any_preemptible: bool) -> list[str]:
        """The pending instances a request of ``priority`` would otherwise
        consider (their flags to re-read)."""
        with self._lock:
            slots = np.flatnonzero(self._mask(priority, any_preemptible)
                                   & self.pending[:self._top])
            return [self._entries[s].uuid for s in slots]

    def view(self, priority: int, any_preemptible: bool, classes: Iterable[str]) -> View:
        """The instances a request of ``priority`` may preempt, as columns."""
        with self._lock:
            mask = self._mask(priority, any_preemptible) & ~self.pending[:self._top]
            slots = np.flatnonzero(mask)
            amounts = {}
            for rc in classes:
                column = self._amounts.get(rc)
                amounts[rc] = column[slots] if column is not None else np.zeros(len(slots))
            return View(slots=slots, node=self.node[slots], priority=self.priority[slots],
                        created=self.created[slots], amounts=amounts,
                        entries=self._entries)

    def of_node(self, node_id: int) -> list[Candidate]:
        """The indexed instances of one node (any priority)."""
        with self._lock:
            return [self._entries[self._slot[u]] for u in self._by_node.get(node_id, ())]

    def get(self, uuid: str) -> Candidate | None:
        with self._lock:
            slot = self._slot.get(uuid)
            return None if slot is None else self._entries[slot]
