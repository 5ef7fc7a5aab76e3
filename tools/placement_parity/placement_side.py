"""The cases through OpenStack Placement, in-process on SQLite (``placement.direct``).

A fleet is written as Nova's compute service and host aggregates would write it:
one root provider per node (its classic fields as Nova's resource tracker
reports them: VCPU with ``reserved_host_cpus`` and the CPU ratio, MEMORY_MB,
DISK_GB with the reserved disk rounded up to whole GB, ``max_unit`` the total),
its ``inventories:`` over them, child providers under it, traits, aggregates on
the root providers, and the usage as one consumer per usage entry.

A request is translated as Nova's scheduler translates a flavor and an image
into ``GET /allocation_candidates`` (``nova.scheduler.utils.ResourceRequest``),
written here from its documented behaviour:

* ``resources[N]:CLASS=N`` make the groups' ``resources[N]`` (zeros dropped);
  the flavor's VCPU, MEMORY_MB and DISK_GB (root + ephemeral + swap rounded
  up to GB) are added to the unnumbered group for the classes no group names; ``hw:cpu_policy=dedicated`` asks PCPU for the vCPUs instead of VCPU,
  ``hw:cpu_thread_policy=require`` requires HW_CPU_HYPERTHREADING and
  ``isolate`` forbids it;
* ``trait:NAME=required|forbidden`` and image ``trait:NAME=required`` make the
  unnumbered ``required``; numbered groups ``resourcesN``/``requiredN``;
  ``group_policy``;
* ``member_of`` entries as ``member_of=in:...`` and ``member_of=!in:...`` of the
  unnumbered group (of every numbered group when the unnumbered one asks no
  resources: a child is in its root's aggregates), plus the aggregates Nova's ``isolate_aggregates`` request
  filter forbids (metadata ``trait:NAME=required`` whose traits the request
  does not all require);
* when the unnumbered group has traits but no resources (a request made only
  of numbered groups), its traits are ``root_required``: the microversion that
  allows resourceless groups asks them to be named in ``same_subtree``, and
  Berth reads them as the root provider's (see the differences page).

``candidates`` returns the names of the root providers of every allocation
request, or raises :class:`Refused` with Placement's 400 message.
"""
from __future__ import annotations

import logging
import os
import tempfile
import uuid as uuidlib

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from placement import conf as placement_conf
from placement import db_api
from placement import direct

logging.getLogger("placement").setLevel(logging.CRITICAL)

MICROVERSION = "1.39"
_NS = uuidlib.UUID("5f0c4b8e-7d0e-4f39-9a57-2a4c6f9a0b11")
STANDARD_DISK = ("VCPU", "MEMORY_MB", "DISK_GB")


def uuid_of(name: str) -> str:
    return str(uuidlib.uuid5(_NS, name))


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
                   isolate_forbids_ht: bool = True) -> frozenset[str]:
        params = query(fleet, request, isolation=isolation,
                       isolate_forbids_ht=isolate_forbids_ht)
        if params is None:
            return frozenset()      # nothing asked: Nova would not ask Placement
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
        return frozenset(roots)


def root_inventories(node: dict) -> dict[str, dict]:
    """The root provider's inventories as Nova's resource tracker reports the
    classic fields, with the node's own ``inventories`` over them."""
    out: dict[str, dict] = {}
    classic = node.get("classic")
    if classic:
        def put(rc, total, reserved, ratio):
            if total > 0:
                out[rc] = {"total": total, "reserved": min(reserved, total), "min_unit": 1,
                           "max_unit": total, "step_size": 1, "allocation_ratio": ratio}
        put("VCPU", classic["vcpus"], classic.get("reserved_host_cpus", 0),
            classic["cpu_allocation_ratio"])
        put("MEMORY_MB", classic["memory_mb"], classic.get("reserved_host_memory_mb", 0),
            classic["ram_allocation_ratio"])
        put("DISK_GB", classic["local_gb"], -(-classic.get("reserved_host_disk_mb", 0) // 1024),
            classic["disk_allocation_ratio"])
    out.update(node["inventories"])
    return out


def _groups(request: dict, isolate_forbids_ht: bool):
    """{suffix: {"resources": {...}, "required": set, "forbidden": set}}, policy."""
    flavor = request["flavor"]
    specs = flavor.get("extra_specs", {})
    groups: dict[str, dict] = {}

    def group(suffix):
        return groups.setdefault(suffix, {"resources": {}, "required": set(),
                                          "forbidden": set()})
    un = group("")
    policy = None
    named = set()           # classes any group names (a 0 too): the flavor's are not added
    for key, value in specs.items():
        if key == "group_policy":
            policy = value
            continue
        prefix, _, name = key.partition(":")
        for kind in ("resources", "trait"):
            if prefix.startswith(kind):
                g = group(prefix[len(kind):])
                if kind == "resources":
                    g["resources"][name] = int(value)
                    named.add(name)
                else:
                    g["required" if value == "required" else "forbidden"].add(name)
    if specs.get("hw:cpu_policy") == "dedicated":
        un["resources"]["PCPU"] = flavor["vcpus"]
        un["resources"].pop("VCPU", None)
        thread = specs.get("hw:cpu_thread_policy")
        if thread == "require":
            un["required"].add("HW_CPU_HYPERTHREADING")
        elif thread == "isolate" and isolate_forbids_ht:
            un["forbidden"].add("HW_CPU_HYPERTHREADING")
    elif "VCPU" not in named and "PCPU" not in named:
        un["resources"]["VCPU"] = flavor["vcpus"]
    if "MEMORY_MB" not in named:
        un["resources"]["MEMORY_MB"] = flavor["memory_mb"]
    if "DISK_GB" not in named:
        un["resources"]["DISK_GB"] = (flavor.get("root_gb", 0) + flavor.get("ephemeral_gb", 0)
                                      + -(-flavor.get("swap", 0) // 1024))
    for key, value in request.get("image", {}).get("properties", {}).items():
        if key.startswith("trait:") and value == "required":
            un["required"].add(key[len("trait:"):])
    for g in groups.values():
        g["resources"] = {rc: n for rc, n in g["resources"].items() if n}
    return groups, policy


def query(fleet: dict, request: dict, *, isolation: bool = True,
          isolate_forbids_ht: bool = True) -> list[tuple[str, str]] | None:
    """The query string Nova would send (a list of pairs), None if nothing is asked."""
    groups, policy = _groups(request, isolate_forbids_ht)
    names = {a["name"]: uuid_of("agg:" + a["name"]) for a in fleet["aggregates"]}
    params: list[tuple[str, str]] = []
    required_all = set().union(*(g["required"] for g in groups.values()))
    un = groups[""]
    for suffix, g in sorted(groups.items()):
        if not g["resources"]:
            continue
        params.append((f"resources{suffix}",
                       ",".join(f"{rc}:{n}" for rc, n in sorted(g["resources"].items()))))
        traits = sorted(g["required"]) + sorted("!" + t for t in g["forbidden"])
        if traits:
            params.append((f"required{suffix}", ",".join(traits)))
    if not params:
        return None
    if not un["resources"] and (un["required"] or un["forbidden"]):
        params.append(("root_required", ",".join(
            sorted(un["required"]) + sorted("!" + t for t in un["forbidden"]))))
    aggs: list[str] = []
    for entry in request.get("member_of", []) or []:
        listed = [entry] if isinstance(entry, str) else entry
        if listed[0].startswith("!"):
            aggs.append("!in:" + ",".join(names.get(n[1:], uuid_of("agg:" + n[1:]))
                                          for n in listed))
        else:
            aggs.append("in:" + ",".join(names.get(n, uuid_of("agg:" + n)) for n in listed))
    if isolation:
        isolated = []
        for agg in fleet["aggregates"]:
            wanted = {k[len("trait:"):] for k, v in agg["metadata"].items()
                      if k.startswith("trait:") and v == "required"}
            if wanted - required_all:
                isolated.append(names[agg["name"]])
        if isolated:
            aggs.append("!in:" + ",".join(sorted(isolated)))
    # The aggregates of the host: on the unnumbered group, or, when it asks
    # nothing, on every numbered group (a child is in its root's aggregates).
    suffixes = [""] if un["resources"] else [s for s, g in sorted(groups.items())
                                             if s and g["resources"]]
    for suffix in suffixes:
        params.extend((f"member_of{suffix}", value) for value in aggs)
    numbered = sum(1 for s, g in groups.items() if s and g["resources"])
    if policy is not None and numbered:
        params.append(("group_policy", policy))
    return params
