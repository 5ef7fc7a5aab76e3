"""The cases through OpenStack Placement, in-process on SQLite (``placement.direct``).

A fleet is written as Nova's compute service and host aggregates would write it:
one root provider per node (its classic fields as Nova's resource tracker
reports them: VCPU with ``reserved_host_cpus`` and the CPU ratio, MEMORY_MB,
DISK_GB with the reserved disk rounded up to whole GB, ``max_unit`` the total),
its ``inventories:`` over them, child providers under it, traits, aggregates on
the root providers, and the usage as one consumer per usage entry.

A request is translated by ``nova_request.query``.

``candidates`` returns the names of the root providers of every allocation
request, or raises :class:`Refused` with Placement's 400 message.
"""
from __future__ import annotations

import logging
import os
import tempfile

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from placement import conf as placement_conf
from placement import db_api, direct

from tools.placement_parity.nova_request import (
    asks_only_numbered,
    host_aggregates_ok,
    query,
    root_inventories,
    uuid_of,
)

logging.getLogger("placement").setLevel(logging.CRITICAL)

MICROVERSION = "1.39"


class Refused(Exception):
    """Placement answered 400 (a request it does not accept)."""


class Placement:
    """One in-process Placement on a throwaway SQLite file, reloaded per fleet."""

    def __init__(self) -> None:
        # in memory where the machine has a tmpfs: the writes of loading a
        # fleet are what takes the time
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self._tmp = tempfile.TemporaryDirectory(prefix="placement-parity-", dir=shm)
        conf = cfg.ConfigOpts()
        placement_conf.register_opts(conf)
        policy_opts.set_defaults(conf)
        conf.set_override("connection",
                          f"sqlite:///{os.path.join(self._tmp.name, 'placement.sqlite')}",
                          group="placement_database")
        conf([], project="placement", default_config_files=[])
        db_api.configure(conf)
        conf.set_override("sync_on_startup", True, group="placement_database")
        conf.set_override("randomize_allocation_candidates", False, group="placement")
        self._direct = direct.PlacementDirect(conf, latest_microversion=False)
        self.client = self._direct.__enter__()
        self._custom: set[str] = set()
        self._consumers: list[str] = []
        self._roots: list[str] = []
        self._children: list[str] = []
        self.root_name: dict[str, str] = {}

    def close(self) -> None:
        self._direct.__exit__(None, None, None)
        self._tmp.cleanup()

    # -- HTTP ---------------------------------------------------------------------------
    def _call(self, method: str, url: str, **kw):
        resp = getattr(self.client, method)(url, microversion=MICROVERSION, **kw)
        if resp.status_code >= 400:
            raise RuntimeError(f"{method.upper()} {url}: {resp.status_code} {resp.text}")
        return resp

    def _ensure_custom(self, classes, traits) -> None:
        for rc in classes:
            if rc.startswith("CUSTOM_") and ("rc", rc) not in self._custom:
                self._call("put", f"/resource_classes/{rc}")
                self._custom.add(("rc", rc))
        for trait in traits:
            if trait.startswith("CUSTOM_") and ("trait", trait) not in self._custom:
                self._call("put", f"/traits/{trait}")
                self._custom.add(("trait", trait))

    # -- the fleet -----------------------------------------------------------------------
    def load(self, fleet: dict) -> None:
        """Replace whatever was loaded with ``fleet``."""
        self.clear()
        for node in fleet["nodes"]:
            self._provider(node["name"], None, root_inventories(node), node["traits"])
            self._roots.append(node["name"])
            self.root_name[uuid_of(node["name"])] = node["name"]
            for child in node["children"]:
                self._provider(child["name"], child["parent"] or node["name"],
                               child["inventories"], child["traits"])
                self._children.append(child["name"])
                self.root_name[uuid_of(child["name"])] = node["name"]
        members: dict[str, list[str]] = {}
        for agg in fleet["aggregates"]:
            for host in agg["hosts"]:
                members.setdefault(host, []).append(uuid_of("agg:" + agg["name"]))
        for host, aggs in members.items():
            rp = uuid_of(host)
            gen = self._call("get", f"/resource_providers/{rp}").json()["generation"]
            self._call("put", f"/resource_providers/{rp}/aggregates",
                       json={"aggregates": aggs, "resource_provider_generation": gen})
        for i, consumer in enumerate(fleet["usage"]):
            cid = uuid_of(f"consumer:{consumer['node']}:{i}")
            allocations: dict[str, dict] = {}
            for prov, rc, amount in consumer["items"]:
                res = allocations.setdefault(uuid_of(prov), {"resources": {}})["resources"]
                res[rc] = res.get(rc, 0) + amount
            self._call("put", f"/allocations/{cid}", json={
                "allocations": allocations, "consumer_generation": None,
                "project_id": uuid_of("project"), "user_id": uuid_of("user"),
                "consumer_type": "INSTANCE"})
            self._consumers.append(cid)

    def _provider(self, name: str, parent: str | None, invs: dict, traits) -> None:
        self._ensure_custom(invs, traits)
        body = {"name": name, "uuid": uuid_of(name)}
        if parent is not None:
            body["parent_provider_uuid"] = uuid_of(parent)
        self._call("post", "/resource_providers", json=body)
        rp = uuid_of(name)
        gen = 0
        if invs:
            gen = self._call("put", f"/resource_providers/{rp}/inventories", json={
                "resource_provider_generation": gen,
                "inventories": invs}).json()["resource_provider_generation"]
        if traits:
            self._call("put", f"/resource_providers/{rp}/traits", json={
                "resource_provider_generation": gen, "traits": sorted(traits)})

    def clear(self) -> None:
        for cid in self._consumers:
            self._call("delete", f"/allocations/{cid}")
        for name in reversed(self._children):
            self._call("delete", f"/resource_providers/{uuid_of(name)}")
        for name in self._roots:
            self._call("delete", f"/resource_providers/{uuid_of(name)}")
        self._consumers, self._children, self._roots = [], [], []
        self.root_name = {}

    # -- a request -----------------------------------------------------------------------
    def candidates(self, fleet: dict, request: dict, *, isolation: bool = True,
                   isolate_forbids_ht: bool = True, aggregates_on_host: bool = False
                   ) -> frozenset[str]:
        """``aggregates_on_host``: for a request of numbered groups only, leave
        the aggregates out of the query and keep the roots that meet them
        (Berth's reading) instead."""
        on_host = aggregates_on_host and asks_only_numbered(request)
        params = query(fleet, request, isolation=isolation,
                       isolate_forbids_ht=isolate_forbids_ht, numbered_aggregates=not on_host)
        if params is None:
            raise Refused("no resources asked (Placement needs at least one group)")
        needed = {n for k, v in params if k.startswith(("required", "root_required"))
                  for n in v.replace("in:", "").split(",")}
        classes = {c.split(":")[0] for k, v in params if k.startswith("resources")
                   for c in v.split(",")}
        self._ensure_custom(classes, {n.lstrip("!") for n in needed})
        resp = self.client.get("/allocation_candidates", params=params,
                               microversion=MICROVERSION)
        if resp.status_code == 400:
            raise Refused(resp.json()["errors"][0]["detail"])
        if resp.status_code != 200:
            raise RuntimeError(f"GET /allocation_candidates {params}: {resp.status_code} "
                               f"{resp.text}")
        roots = set()
        for areq in resp.json()["allocation_requests"]:
            for rp in areq["allocations"]:
                roots.add(self.root_name[rp])
        if on_host:
            roots = {r for r in roots
                     if host_aggregates_ok(fleet, request, r, isolation=isolation)}
        return frozenset(roots)
