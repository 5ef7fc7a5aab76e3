"""Seeded random fleets and requests for the Placement cross-check.

A *fleet* is plain data both sides load their own way::

    {"nodes": [{"name": "n0",
                "classic": {"vcpus": 16, "memory_mb": 32768, ...} | None,
                "inventories": {"VCPU": {total, reserved, min_unit, max_unit,
                                         step_size, allocation_ratio}, ...},
                "traits": [...],
                "children": [{"name": "n0-gpu0", "parent": None | "n0-pf0",
                              "inventories": {...}, "traits": [...]}]}],
     "aggregates": [{"name": "agg0", "hosts": ["n0"], "metadata": {...}}],
     "usage": [{"node": "n0", "items": [["n0", "VCPU", 2], ["n0-gpu0", "VGPU", 1]]}]}

``classic`` holds the fleet file's classic fields (vcpus, memory_mb, local_gb,
ratios, reserved_host_*); ``inventories`` are written in full (all six fields)
and override the class a classic field stands for. Every usage item is one
allocation that the unit limits admit and that fits.

A *request* is a Berth request payload (flavor with extra specs, image
properties, ``member_of``)::

    {"flavor": {...}, "image": {"properties": {...}}, "member_of": [...]}

Nothing here imports Berth or Placement: the same cases feed both.
"""
from __future__ import annotations

import copy
import random

ROOT_TRAITS = ("HW_CPU_X86_AVX2", "HW_CPU_X86_AVX512F", "HW_CPU_HYPERTHREADING",
               "CUSTOM_RACK_A", "CUSTOM_RACK_B", "COMPUTE_VOLUME_MULTI_ATTACH")
GPU_TRAITS = ("CUSTOM_VGPU_TYPE_A", "CUSTOM_VGPU_TYPE_B", "CUSTOM_GPU_FAST")
NIC_TRAITS = ("CUSTOM_PHYSNET_NET1", "CUSTOM_PHYSNET_NET2", "CUSTOM_VNIC_TYPE_DIRECT")
BAREMETAL = ("CUSTOM_BAREMETAL_GOLD", "CUSTOM_BAREMETAL_SILVER")
BW_EGR, BW_IGR = "NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC"
ISOLATING = ("CUSTOM_RACK_A", "CUSTOM_GPU_FAST", "CUSTOM_LICENSED")


def inventory(total: int, *, reserved: int = 0, min_unit: int = 1, max_unit: int | None = None,
              step_size: int = 1, allocation_ratio: float = 1.0) -> dict:
    return {"total": total, "reserved": reserved, "min_unit": min_unit,
            "max_unit": total if max_unit is None else max_unit, "step_size": step_size,
            "allocation_ratio": allocation_ratio}


def capacity(inv: dict) -> float:
    return (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]


def unit_ok(inv: dict, amount: int) -> bool:
    return (inv["min_unit"] <= amount <= inv["max_unit"]
            and amount % inv["step_size"] == 0)


# -- fleets ------------------------------------------------------------------------------

def _edgy(rng: random.Random, total: int, *, ratios=(1.0,), step_choices=(1,),
          reserved_max: int = 0) -> dict:
    """An inventory with, now and then, unit limits that requests can hit."""
    step = rng.choice(step_choices) if rng.random() < 0.3 else 1
    total = max(total, step)
    reserved = rng.randint(0, reserved_max) if reserved_max and rng.random() < 0.4 else 0
    min_unit = rng.choice((1, 1, 2, step, 2 * step)) if rng.random() < 0.25 else 1
    max_unit = total
    if rng.random() < 0.3:
        max_unit = rng.choice((max(min_unit, total // 2), max(min_unit, total // 4),
                               total * 2, min_unit))
    max_unit = max(max_unit, min_unit)
    return inventory(total, reserved=min(reserved, total), min_unit=min_unit,
                     max_unit=max_unit, step_size=step, allocation_ratio=rng.choice(ratios))


def _compute_node(rng: random.Random, name: str) -> dict:
    node: dict = {"name": name, "classic": None, "inventories": {}, "traits": [],
                  "children": []}
    vcpus = rng.choice((2, 4, 8, 16, 32, 48, 64))
    memory = rng.choice((2048, 4096, 8192, 16384, 65536))
    disk = rng.choice((0, 20, 40, 100, 100, 500, 500, 1000))
    if rng.random() < 0.35:
        classic = {"vcpus": vcpus, "memory_mb": memory, "local_gb": disk,
                   "cpu_allocation_ratio": rng.choice((1.0, 4.0, 16.0, 1.5)),
                   "ram_allocation_ratio": rng.choice((1.0, 1.5)),
                   "disk_allocation_ratio": rng.choice((1.0, 2.0))}
        if rng.random() < 0.4:
            classic["reserved_host_cpus"] = rng.randint(0, 2)
            classic["reserved_host_memory_mb"] = rng.choice((0, 512, 1024))
            if disk:
                classic["reserved_host_disk_mb"] = rng.choice((0, 1, 1024, 2049))
        node["classic"] = classic
    else:
        invs = node["inventories"]
        invs["VCPU"] = _edgy(rng, vcpus, ratios=(1.0, 2.0, 4.0, 16.0, 1.5), step_choices=(2, 4),
                             reserved_max=2)
        invs["MEMORY_MB"] = _edgy(rng, memory, ratios=(1.0, 1.5, 0.9),
                                  step_choices=(256, 512, 1024), reserved_max=1024)
        if disk:
            invs["DISK_GB"] = _edgy(rng, disk, ratios=(1.0, 2.0), step_choices=(1, 5),
                                    reserved_max=10)
    if rng.random() < 0.45:
        node["inventories"]["PCPU"] = _edgy(rng, rng.choice((4, 8, 16)), step_choices=(2,))
    node["traits"] = sorted(rng.sample(ROOT_TRAITS, rng.randint(0, 3)))
    for c in range(rng.choice((0, 0, 1, 1, 2, 2, 3))):
        node["children"].append(_child(rng, name, c, node["children"]))
    return node


def _child(rng: random.Random, node: str, index: int, siblings: list) -> dict:
    kind = rng.choice(("gpu", "gpu", "nic", "fpga"))
    parent = None
    if siblings and rng.random() < 0.2:
        parent = rng.choice(siblings)["name"]
    if kind == "gpu":
        invs = {"VGPU": _edgy(rng, rng.choice((1, 2, 4, 8, 16)), step_choices=(2,))}
        traits = sorted(rng.sample(GPU_TRAITS, rng.randint(0, 2)))
    elif kind == "nic":
        invs = {BW_EGR: _edgy(rng, rng.choice((1000, 10000, 25000)), step_choices=(100,),
                              reserved_max=1000),
                BW_IGR: _edgy(rng, rng.choice((1000, 10000, 25000)), step_choices=(100,))}
        traits = sorted(rng.sample(NIC_TRAITS, rng.randint(0, 2)))
    else:
        invs = {"CUSTOM_FPGA": _edgy(rng, rng.choice((1, 2, 4)))}
        traits = sorted(rng.sample(("CUSTOM_FPGA_INTEL", "CUSTOM_FPGA_XILINX"),
                                   rng.randint(0, 1)))
    if rng.random() < 0.1:      # a child with some root class too (a NUMA-like child)
        invs["VCPU"] = _edgy(rng, rng.choice((2, 4, 8)), ratios=(1.0, 4.0))
    return {"name": f"{node}-{kind}{index}", "parent": parent, "inventories": invs,
            "traits": traits}


def _baremetal_node(rng: random.Random, name: str) -> dict:
    rc = rng.choice(BAREMETAL)
    return {"name": name, "classic": None,
            "inventories": {rc: inventory(1, max_unit=1)},
            "traits": sorted(rng.sample(("CUSTOM_RACK_A", "CUSTOM_RACK_B", "CUSTOM_RAID"),
                                        rng.randint(0, 2))),
            "children": []}


def _root_classes(node: dict) -> dict[str, dict]:
    """The root's inventories as Berth and Nova read the classic fields (for
    usage: the generator only needs totals and unit limits)."""
    out = {}
    classic = node["classic"]
    if classic:
        rcpu = classic.get("reserved_host_cpus", 0)
        rmem = classic.get("reserved_host_memory_mb", 0)
        rdisk = -(-classic.get("reserved_host_disk_mb", 0) // 1024)
        out["VCPU"] = inventory(classic["vcpus"], reserved=min(rcpu, classic["vcpus"]),
                                allocation_ratio=classic["cpu_allocation_ratio"])
        out["MEMORY_MB"] = inventory(classic["memory_mb"],
                                     reserved=min(rmem, classic["memory_mb"]),
                                     allocation_ratio=classic["ram_allocation_ratio"])
        if classic["local_gb"]:
            out["DISK_GB"] = inventory(classic["local_gb"],
                                       reserved=min(rdisk, classic["local_gb"]),
                                       allocation_ratio=classic["disk_allocation_ratio"])
    out.update(node["inventories"])
    return out


def providers_of(node: dict) -> list[tuple[str, dict[str, dict]]]:
    """(provider name, inventories) of a node's tree, the root first."""
    return [(node["name"], _root_classes(node))] + \
        [(c["name"], c["inventories"]) for c in node["children"]]


def _usage(rng: random.Random, node: dict) -> list[dict]:
    consumers = []
    used: dict[tuple[str, str], int] = {}
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        items = []
        for prov, invs in providers_of(node):
            for rc, inv in sorted(invs.items()):
                if rng.random() < 0.5:
                    continue
                room = capacity(inv) - used.get((prov, rc), 0)
                wanted = rng.choice((inv["min_unit"], inv["max_unit"], int(room),
                                     rng.randint(1, max(1, int(room) // 2)),
                                     rng.randint(1, max(1, int(room) // 2))))
                amount = _fitting(inv, min(wanted, int(room)))
                if amount:
                    items.append([prov, rc, amount])
        if items:
            for prov, rc, amount in items:
                used[prov, rc] = used.get((prov, rc), 0) + amount
            consumers.append({"node": node["name"], "items": items})
    return consumers


def _fitting(inv: dict, at_most: int) -> int:
    """The largest amount <= at_most the unit limits admit (0: none)."""
    amount = min(at_most, inv["max_unit"])
    amount -= amount % inv["step_size"]
    return amount if amount >= inv["min_unit"] and amount > 0 else 0


def make_fleet(rng: random.Random, index: int) -> dict:
    nodes = []
    for i in range(rng.randint(4, 9)):
        name = f"f{index}n{i}"
        nodes.append(_baremetal_node(rng, name) if rng.random() < 0.15
                     else _compute_node(rng, name))
    aggregates = []
    for a in range(rng.randint(1, 4)):
        hosts = sorted(n["name"] for n in rng.sample(nodes, rng.randint(1, len(nodes))))
        metadata = {}
        if rng.random() < 0.3:
            hosts = hosts[:2]
            for trait in rng.sample(ISOLATING, rng.randint(1, 2)):
                metadata[f"trait:{trait}"] = "required"
        aggregates.append({"name": f"f{index}agg{a}", "hosts": hosts, "metadata": metadata})
    usage = [c for n in nodes for c in _usage(rng, n)]
    return {"nodes": nodes, "aggregates": aggregates, "usage": usage}


# -- requests ----------------------------------------------------------------------------

def _amount_near(rng: random.Random, fleet: dict, rc: str, default: int) -> int:
    """An amount that hits some inventory's min/max/step edge now and then."""
    invs = [inv for n in fleet["nodes"] for _p, pinv in providers_of(n)
            for c, inv in pinv.items() if c == rc]
    if not invs or rng.random() < 0.65:
        return default
    inv = rng.choice(invs)
    return max(1, rng.choice((inv["min_unit"], inv["min_unit"] - 1, inv["max_unit"],
                              inv["max_unit"] + 1, inv["step_size"], inv["step_size"] + 1,
                              2 * inv["step_size"], int(capacity(inv)))))


def make_request(rng: random.Random, fleet: dict) -> dict:
    """A request; most are drawn towards one node of the fleet (its traits, its
    children's classes and traits, its aggregates) so that many have hosts to
    compare, and amounts now and then sit at some inventory's unit limits."""
    target = rng.choice(fleet["nodes"]) if rng.random() < 0.7 else None
    providers = providers_of(target) if target else []
    children = target["children"] if target else []

    def pick_traits(pool, k, own=()):
        own = [t for t in own if t in pool] if own else []
        if own and rng.random() < 0.7:
            return rng.sample(own, min(k, len(own)))
        return rng.sample(pool, k)

    vcpus = _amount_near(rng, fleet, "VCPU", rng.choice((1, 1, 2, 4, 8)))
    memory = _amount_near(rng, fleet, "MEMORY_MB", rng.choice((128, 256, 512, 1024, 2048)))
    flavor = {"vcpus": min(vcpus, 4096), "memory_mb": memory,
              "root_gb": rng.choice((0, 1, 5, 10)), "ephemeral_gb": rng.choice((0, 0, 5)),
              "swap": rng.choice((0, 0, 0, 512, 1025)), "extra_specs": {}}
    specs = flavor["extra_specs"]
    image: dict = {"properties": {}}
    request: dict = {"flavor": flavor, "image": image}
    bare = [rc for _p, invs in providers for rc in invs if rc in BAREMETAL]
    kind = rng.random()
    if kind < 0.1 or (bare and kind < 0.6):     # an Ironic flavor
        for rc in ("VCPU", "MEMORY_MB", "DISK_GB"):
            specs[f"resources:{rc}"] = "0"
        specs[f"resources:{rng.choice(bare or BAREMETAL)}"] = "1"
    elif kind < 0.2 or (kind < 0.4 and any("PCPU" in invs for _p, invs in providers)):
        specs["hw:cpu_policy"] = "dedicated"    # pinned CPUs
        flavor["vcpus"] = _amount_near(rng, fleet, "PCPU", rng.choice((1, 2, 4)))
        if rng.random() < 0.2 and flavor["vcpus"] >= 2:
            specs["hw:cpu_policy"] = "mixed"    # vCPU 0 shared, the others pinned
            specs["hw:cpu_dedicated_mask"] = "^0"
        elif rng.random() < 0.5:
            specs["hw:cpu_thread_policy"] = rng.choice(("require", "isolate", "isolate",
                                                        "prefer"))
        if rng.random() < 0.25:
            specs["hw:emulator_threads_policy"] = "isolate"
    elif kind < 0.25:
        specs["resources:DISK_GB"] = "0"        # boot from volume
    elif kind < 0.27:                           # asks nothing of the ledger
        for rc in ("VCPU", "MEMORY_MB", "DISK_GB"):
            specs[f"resources:{rc}"] = "0"
    if rng.random() < 0.15:
        rc = rng.choice(("VCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_FPGA", "VGPU"))
        if not specs.get("hw:cpu_policy") or rc != "VCPU":
            specs[f"resources:{rc}"] = str(_amount_near(rng, fleet, rc, rng.choice((0, 1, 2))))
    # unnumbered traits: mostly of the target's providers
    own = sorted({t for t in (target["traits"] if target else ())}
                 | {t for c in children for t in c["traits"]})
    for trait in pick_traits(ROOT_TRAITS + GPU_TRAITS[:1], rng.choice((0, 0, 0, 1, 1, 2)),
                             own):
        specs[f"trait:{trait}"] = rng.choice(("required", "required", "forbidden"))
    # numbered groups: mostly of the target's children
    groups = rng.choice((0, 0, 0, 1, 1, 2, 3)) if children or rng.random() < 0.3 else 0
    for g in range(1, groups + 1):
        child = rng.choice(children) if children and rng.random() < 0.8 else None
        if child is not None:
            rc = rng.choice(sorted(child["inventories"]))
            specs[f"resources{g}:{rc}"] = str(_amount_near(
                rng, fleet, rc, child["inventories"][rc]["min_unit"]))
            if child["traits"] and rng.random() < 0.5:
                specs[f"trait{g}:{rng.choice(child['traits'])}"] = "required"
            elif rng.random() < 0.2:
                specs[f"trait{g}:{rng.choice(GPU_TRAITS + NIC_TRAITS)}"] = "forbidden"
            continue
        what = rng.choice(("vgpu", "bw", "fpga", "vcpu"))
        if what == "vgpu":
            specs[f"resources{g}:VGPU"] = str(_amount_near(rng, fleet, "VGPU", 1))
            if rng.random() < 0.4:
                specs[f"trait{g}:{rng.choice(GPU_TRAITS)}"] = rng.choice(
                    ("required", "required", "forbidden"))
        elif what == "bw":
            specs[f"resources{g}:{BW_EGR}"] = str(_amount_near(rng, fleet, BW_EGR, 1000))
            if rng.random() < 0.5:
                specs[f"resources{g}:{BW_IGR}"] = str(_amount_near(rng, fleet, BW_IGR, 1000))
            if rng.random() < 0.5:
                specs[f"trait{g}:{rng.choice(NIC_TRAITS)}"] = "required"
        elif what == "fpga":
            specs[f"resources{g}:CUSTOM_FPGA"] = "1"
        else:
            specs[f"resources{g}:VCPU"] = str(rng.choice((1, 2)))
            if rng.random() < 0.4:
                specs[f"trait{g}:{rng.choice(ROOT_TRAITS)}"] = rng.choice(
                    ("required", "forbidden"))
    if groups >= 2 or (groups == 1 and rng.random() < 0.3):
        specs["group_policy"] = rng.choice(("none", "isolate"))
    if rng.random() < 0.12:
        trait = pick_traits(ROOT_TRAITS + ISOLATING, 1, own)[0]
        image["properties"][f"trait:{trait}"] = "required"
    if rng.random() < 0.1:
        specs[f"trait:{rng.choice(ISOLATING)}"] = "required"
    mine = [a["name"] for a in fleet["aggregates"] if target and target["name"] in a["hosts"]]
    aggs = [a["name"] for a in fleet["aggregates"]]
    if rng.random() < 0.25:
        member_of: list = []
        for _ in range(rng.randint(1, 2)):
            pool = mine if mine and rng.random() < 0.7 else aggs
            chosen = rng.sample(pool, rng.randint(1, len(pool)))
            if rng.random() < 0.2:
                member_of.append("!" + rng.choice(aggs))
            else:
                member_of.append(chosen if len(chosen) > 1 else chosen[0])
        request["member_of"] = member_of
    return request


def make_cases(seed: int, requests: int, per_fleet: int = 25):
    """(fleet, [requests]) pairs: ``requests`` requests in all."""
    rng = random.Random(seed)
    out = []
    index = 0
    left = requests
    while left > 0:
        fleet = make_fleet(rng, index)
        n = min(per_fleet, left)
        out.append((fleet, [make_request(rng, fleet) for _ in range(n)]))
        left -= n
        index += 1
    return out


def clone(value):
    return copy.deepcopy(value)
