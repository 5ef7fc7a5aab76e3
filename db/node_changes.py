"""The node change journal: each claim and release, for the other schedulers' caches.

A claim or a release bumps its node's ``generation``; in the same transaction
it writes one ``node_changes`` row naming that generation and what changed:
the consumer, what it took or gave back per provider and class, the node's
NUMA topology and free PCI pools after (when they changed), and for a claim
what the instance index and the preemptible index keep of it. A host-state
cache whose node is at generation g and that finds rows for g+1 ... g' (the
node's generation now) applies them in order instead of reading the node in
full; a generation without a row (a host report, an inventory or device
change, a build failure, a move's hand-over or a preemption) is read in full.

The row holds values, not instructions that depend on the reader: amounts
are added to (or, never below 0, taken off) what the cache holds, exactly as
the claim's and the release's statements change the inventories' ``used``;
the topology and the pools are the node's own after the change. Applied to a
cache equal to the node at g, the rows give the node at g'. Rows older than
``[scheduler] node_change_ttl`` are purged (by the claim reaper); a cache
that fell further behind reads the node in full.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from db import models
from db.api import Database
from db.precompiled import Precompiled

_t = models.NodeChange.__table__

#: One amount: (provider id, resource class, amount).
Item = tuple[int, str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One claim (``taken``) or release on a node, as of ``generation``."""

    node_id: int
    generation: int
    at: datetime.datetime            # the node's updated_at as the change stamped it
    taken: bool                      # a claim; False: a release
    consumer_uuid: str
    consumer_type: str
    instance_group: str | None
    items: tuple[Item, ...]
    numa_topology: str | None        # the node's topology after, when it changed
    pci_pools: tuple | None          # the node's free pools after, when devices changed
    # a claim: what the preemptible index and the image weigher keep of it
    priority: int = 0
    preemptible: bool = False
    pending: bool = False
    project_id: str | None = None
    numa_cells: str | None = None    # the consumer's fitted cells (JSON), as stored
    device_pools: tuple = ()         # ((PoolKey, count), ...) of its devices
    image_properties: Mapping | None = None


#: Whether this process writes the journal (``write``): the daemon decides it
#: from ``[scheduler] node_change_journal``. Not writing it is always safe: a
#: generation without its row makes the other caches re-read the node.
_writing = True


def write(on: bool) -> None:
    """Write the journal's rows from now on, or not."""
    global _writing
    _writing = bool(on)


def writing() -> bool:
    return _writing


def claim_row(*, node_id: int, generation: int, at: datetime.datetime,
              consumer_uuid: str, consumer_type: str, instance_group: str | None,
              items: Iterable[Item], numa_topology: str | None, pci_pools,
              priority: int, preemptible: bool, pending: bool, project_id: str | None,
              numa_cells: str | None, device_pools: Iterable, image_properties
              ) -> tuple | None:
    """A claim's journal row: the values of ``INSERT``, or None when this
    process writes no journal (``pci_pools``: the node's pools after, None
    when no device changed; ``device_pools``: (PoolKey, count) of the devices
    it took). The claim writes it in its transaction."""
    if not _writing:
        return None
    from db import pci as db_pci
    from pci.pools import PciPool

    change: dict = {"k": "c", "u": consumer_uuid, "t": consumer_type, "g": instance_group,
                    "i": [list(item) for item in items], "n": numa_topology,
                    "pr": priority, "pe": bool(preemptible), "pd": bool(pending),
                    "pj": project_id, "nc": numa_cells}
    if pci_pools is not None:
        change["p"] = db_pci.pool_rows(pci_pools)
    picked = list(device_pools)
    if picked:
        change["dp"] = db_pci.pool_rows(PciPool(key, count) for key, count in picked)
    if image_properties:
        change["im"] = dict(image_properties)
    return _row(node_id, generation, at, change)


def release_row(*, node_id: int, generation: int, at: datetime.datetime,
                consumer_uuid: str, consumer_type: str, instance_group: str | None,
                items: Iterable[Item], numa_topology: str | None, pci_pools
                ) -> tuple | None:
    """A release's journal row (as ``claim_row``)."""
    if not _writing:
        return None
    from db import pci as db_pci

    change: dict = {"k": "r", "u": consumer_uuid, "t": consumer_type, "g": instance_group,
                    "i": [list(item) for item in items], "n": numa_topology}
    if pci_pools is not None:
        change["p"] = db_pci.pool_rows(pci_pools)
    return _row(node_id, generation, at, change)


#: A journal row's INSERT (values as ``claim_row`` gives them).
INSERT = Precompiled(sa.insert(_t), ("compute_node_id", "generation", "at", "change"))


def _row(node_id: int, generation: int, at: datetime.datetime, change: dict) -> tuple:
    return node_id, generation, at, json.dumps(change, separators=(",", ":"))


def decode(node_id: int, generation: int, at: datetime.datetime, text: str) -> Change:
    """A journal row back as a Change."""
    from db import pci as db_pci

    c = json.loads(text)
    pools = c.get("p")
    device_pools = tuple((p.key, p.count) for p in db_pci.pools_from_rows(c["dp"])) \
        if c.get("dp") else ()
    return Change(node_id=node_id, generation=generation, at=at, taken=c["k"] == "c",
                  consumer_uuid=c["u"], consumer_type=c["t"], instance_group=c["g"],
                  items=tuple((p, rc, n) for p, rc, n in c["i"]),
                  numa_topology=c["n"],
                  pci_pools=None if pools is None else db_pci.pools_from_rows(pools),
                  priority=c.get("pr", 0), preemptible=c.get("pe", False),
                  pending=c.get("pd", False), project_id=c.get("pj"),
                  numa_cells=c.get("nc"), device_pools=device_pools,
                  image_properties=c.get("im"))


def purge(db: Database, before: datetime.datetime, limit: int = 1000) -> int:
    """Forget the oldest changes made before ``before`` (at most ``limit``);
    how many were deleted."""
    from db import transitions

    return transitions.purge_older(db, _t, before, limit)
