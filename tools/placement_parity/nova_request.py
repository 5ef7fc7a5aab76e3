"""A request as Nova's scheduler puts it to Placement, and a node's classic
fields as Nova's resource tracker reports them.

A request is translated as Nova's scheduler translates a flavor and an image
into ``GET /allocation_candidates`` (``nova.scheduler.utils.ResourceRequest``),
written here from its documented behaviour:

* ``resources[N]:CLASS=N`` make the groups' ``resources[N]`` (zeros dropped);
  the flavor's VCPU, MEMORY_MB and DISK_GB (root + ephemeral + swap rounded
  up to GB) are added to the unnumbered group for the classes no group names;
  ``hw:cpu_policy=dedicated`` asks PCPU for the vCPUs instead of VCPU
  (``mixed``: PCPU for the vCPUs of ``hw:cpu_dedicated_mask``, VCPU for the
  others; ``hw:emulator_threads_policy=isolate`` one PCPU more),
  ``hw:cpu_thread_policy=require`` requires HW_CPU_HYPERTHREADING and
  ``isolate`` forbids it;
* ``trait:NAME=required|forbidden`` and image ``trait:NAME=required`` make the
  unnumbered ``required``; numbered groups ``resourcesN``/``requiredN``;
  ``group_policy``;
* ``member_of`` entries as ``member_of=in:...`` and ``member_of=!in:...`` of the
  unnumbered group (``member_ofN`` of every numbered group when the unnumbered
  one asks no resources), plus the aggregates Nova's ``isolate_aggregates``
  request filter forbids (metadata ``trait:NAME=required`` whose traits the
  request does not all require);
* when the unnumbered group has traits but no resources (a request made only
  of numbered groups), its traits are ``root_required``: the microversion that
  allows resourceless groups asks them to be named in ``same_subtree``, and
  Berth reads them as the root provider's (see the differences page);
* a request that asks no resource at all has no query (Placement refuses one
  without resources).
"""
from __future__ import annotations

import uuid as uuidlib

_NS = uuidlib.UUID("5f0c4b8e-7d0e-4f39-9a57-2a4c6f9a0b11")


def uuid_of(name: str) -> str:
    """A stable uuid for a provider, aggregate or consumer name."""
    return str(uuidlib.uuid5(_NS, name))


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
    cpu_policy = specs.get("hw:cpu_policy")
    if cpu_policy in ("dedicated", "mixed"):
        pinned = flavor["vcpus"]
        if cpu_policy == "mixed":       # the cases' only mask: "^0"
            assert specs.get("hw:cpu_dedicated_mask") == "^0"
            pinned -= 1
        emulator = specs.get("hw:emulator_threads_policy") == "isolate"
        un["resources"]["PCPU"] = pinned + emulator
        un["resources"].pop("VCPU", None)
        if flavor["vcpus"] > pinned:
            un["resources"]["VCPU"] = flavor["vcpus"] - pinned
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


def host_aggregates_ok(fleet: dict, request: dict, host: str, *, isolation: bool = True
                       ) -> bool:
    """Whether ``host`` (a root) meets the request's aggregates as Berth reads
    them: ``member_of`` and the isolated aggregates apply to the host."""
    inside = {a["name"] for a in fleet["aggregates"] if host in a["hosts"]}
    for entry in request.get("member_of", []) or []:
        listed = [entry] if isinstance(entry, str) else entry
        if listed[0].startswith("!"):
            if inside & {n[1:] for n in listed}:
                return False
        elif not inside & set(listed):
            return False
    if isolation:
        groups, _policy = _groups(request, True)
        required_all = set().union(*(g["required"] for g in groups.values()))
        for agg in fleet["aggregates"]:
            wanted = {k[len("trait:"):] for k, v in agg["metadata"].items()
                      if k.startswith("trait:") and v == "required"}
            if host in agg["hosts"] and wanted - required_all:
                return False
    return True


def asks_only_numbered(request: dict) -> bool:
    """Whether the unnumbered group asks no resource (and some numbered one does)."""
    groups, _policy = _groups(request, True)
    return not groups[""]["resources"] and any(g["resources"] for s, g in groups.items() if s)


def query(fleet: dict, request: dict, *, isolation: bool = True,
          isolate_forbids_ht: bool = True, numbered_aggregates: bool = True
          ) -> list[tuple[str, str]] | None:
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
                                             if s and g["resources"] and numbered_aggregates]
    for suffix in suffixes:
        params.extend((f"member_of{suffix}", value) for value in aggs)
    numbered = sum(1 for s, g in groups.items() if s and g["resources"])
    if policy is not None and numbered:
        params.append(("group_policy", policy))
    return params
