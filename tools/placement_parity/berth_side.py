"""The cases through Berth: the fleet file's import path and the filter layer.

A fleet becomes a fleet document (``hosts:`` with classic fields,
``inventories:``, ``traits:`` and ``providers:``; ``aggregates:`` with their
metadata), is validated by ``scheduler.fleet.load_fleet`` and imported into a
throwaway SQLite database by ``db.hosts.import_fleet``; each usage entry is
claimed through ``db.claims.claim`` (the claim's own rule guards it). A request
is validated as the RPC server validates it and asked of the filters the way a
dry-run select asks them (``Cycle.candidates``), with RamFilter, CoreFilter
and DiskFilter enabled (the views of the ledger's check) and ResourcesFilter
as always; ``enable_isolated_aggregate_filtering`` is on.

``passes`` returns the hosts the filters pass, and the hosts among them whose
claim would still find no assignment (``provider_tree.assign``, what the
claim writes): the two should never differ.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import uuid as uuidlib

import sqlalchemy as sa
from oslo_config import cfg

from db import claims, migration, models
from db import hosts as db_hosts
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import metrics
from scheduler.deadline import Deadline
from scheduler.filter_scheduler import FilterScheduler, load_filters
from scheduler.filters.resources import assigned
from scheduler.host_manager import HostManager

FILTERS = ("RamFilter", "CoreFilter", "DiskFilter")


def fleet_document(fleet: dict) -> dict:
    hosts = []
    for node in fleet["nodes"]:
        entry: dict = {"host": node["name"]}
        if node["classic"]:
            entry.update(node["classic"])
        if node["inventories"] or not node["classic"]:
            entry["inventories"] = {rc: dict(inv) for rc, inv in node["inventories"].items()}
        if node["traits"]:
            entry["traits"] = list(node["traits"])
        if node["children"]:
            entry["providers"] = [
                {"name": c["name"], **({"parent": c["parent"]} if c["parent"] else {}),
                 "traits": list(c["traits"]),
                 "inventories": {rc: dict(inv) for rc, inv in c["inventories"].items()}}
                for c in node["children"]]
        hosts.append(entry)
    aggregates = [{"name": a["name"], "hosts": list(a["hosts"]),
                   **({"metadata": dict(a["metadata"])} if a["metadata"] else {})}
                  for a in fleet["aggregates"]]
    return {"hosts": hosts, "aggregates": aggregates}


class Berth:
    """A throwaway database and scheduler per fleet."""

    def __init__(self, conf: cfg.ConfigOpts = cfg.CONF) -> None:
        self.conf = conf
        conf([], project="berth", default_config_files=[])
        conf.set_override("enable_isolated_aggregate_filtering", True, group="scheduler")
        self._stack: contextlib.ExitStack | None = None
        self.scheduler: FilterScheduler | None = None

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def load(self, fleet: dict) -> None:
        self.close()
        stack = self._stack = contextlib.ExitStack()
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="berth-parity-", dir=shm))
        db = Database(f"sqlite:///{os.path.join(tmp, 'berth.sqlite')}")
        stack.callback(db.dispose)
        migration.db_sync(db)
        db_hosts.import_fleet(db, fleet_mod.load_fleet(fleet_document(fleet)))
        _claim_usage(db, fleet)
        manager = HostManager(db, self.conf)
        stack.callback(manager.close)
        self.scheduler = FilterScheduler(manager, self.conf,
                                         filters=load_filters(list(FILTERS), self.conf),
                                         weighers=[], seed=1)
        self.scheduler.warm_up()

    def passes(self, request: dict) -> tuple[frozenset[str], frozenset[str]]:
        """(hosts the filters pass, those of them the claim's assignment refuses);
        raises InvalidRequest."""
        sched = self.scheduler
        spec = sched.parse_request(request)
        req = sched._request(spec, Deadline(60.0), metrics.SelectTimings(), (), dry_run=True)
        rows, _ = req.cycle.candidates(sched._context(req, 0))
        hosts = [req.cycle.cols.hosts[r] for r in rows.tolist()]
        refused = {h.host for h in hosts
                   if assigned(spec.resources, h.tree, h.usage)[1] is not None}
        return frozenset(h.host for h in hosts), frozenset(refused)


def _claim_usage(db: Database, fleet: dict) -> None:
    rp = models.ResourceProvider.__table__
    cn = models.ComputeNode.__table__
    with db.engine.connect() as conn:
        providers = {name: (pid, node) for pid, name, node in conn.execute(
            sa.select(rp.c.id, rp.c.name, rp.c.compute_node_id))}
    for i, consumer in enumerate(fleet["usage"]):
        node_id = providers[consumer["node"]][1]
        with db.engine.connect() as conn:
            generation = conn.execute(sa.select(cn.c.generation)
                                      .where(cn.c.id == node_id)).scalar_one()
        items = tuple((providers[prov][0], rc, amount)
                      for prov, rc, amount in consumer["items"])
        claims.claim(db, claims.ClaimRecord(
            instance_uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{consumer['node']}:{i}")),
            node_id=node_id, seen_generation=generation, items=items))
