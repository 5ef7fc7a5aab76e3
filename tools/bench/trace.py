"""A seeded mixed request trace for a generated fleet, as JSONL.

Each line is one operation with the kind it was drawn as:
``{"i": 7, "kind": "pinned-isolate", "op": "select", "spec": {...}}`` where ``spec``
is the ``select_destinations`` payload exactly as a client sends it over RPC
(doc/source/reference/file-formats.rst, ``scheduler/request_spec.py``), always with its
``instance_uuids``; or ``{"i": 8, "kind": "release", "op": "release",
"instance_uuid": "..."}`` (a trace instance placed earlier, or an instance the
fleet already had). Kinds (``KINDS``): plain flavors, image properties, pinned CPUs
with every thread policy, the mixed policy, page sizes, two guest NUMA cells, SR-IOV
VFs and GPUs through aliases with NUMA policies, server groups (hard and soft, on
the fleet's existing groups and new ones, anti-affinity sometimes with
``max_server_per_host``), multi-create, same/different-host hints,
force/ignore hosts, availability zones, and releases. Other kinds also get a zone
or image properties now and then, as real requests do.
"""
from __future__ import annotations

import json
import random
import uuid as uuidlib
from collections.abc import Iterable
from typing import Any

from tools.bench import fleet as bench_fleet

# [pci] alias entries the realistic configuration uses.
PCI_ALIASES = (
    {"name": "vf", "vendor_id": bench_fleet.VENDOR, "product_id": bench_fleet.VF_PRODUCT,
     "device_type": "type-VF", "numa_policy": "required"},
    {"name": "vf-any", "vendor_id": bench_fleet.VENDOR, "product_id": bench_fleet.VF_PRODUCT,
     "device_type": "type-VF", "numa_policy": "preferred"},
    {"name": "gpu", "vendor_id": bench_fleet.GPU_VENDOR,
     "product_id": bench_fleet.GPU_PRODUCT, "device_type": "type-PCI",
     "numa_policy": "legacy"},
)

# kind -> relative weight in the trace.
KINDS: dict[str, float] = {
    "plain": 16, "image": 7, "pinned-prefer": 4, "pinned-isolate": 4, "pinned-require": 4,
    "mixed": 4, "pages": 6, "numa2": 4, "pci-vf": 7, "gpu": 2,
    "group-affinity": 3, "group-anti-affinity": 4, "group-soft": 3, "multi": 5,
    "same-host": 2, "different-host": 3, "force-hosts": 2, "ignore-hosts": 2, "az": 5,
    "release": 13,
}

_SMALL = ({"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20},
          {"name": "m1.medium", "vcpus": 2, "memory_mb": 4096, "root_gb": 40},
          {"name": "m1.large", "vcpus": 4, "memory_mb": 8192, "root_gb": 80},
          {"name": "m1.xlarge", "vcpus": 8, "memory_mb": 16384, "root_gb": 160},
          {"name": "r1.2xlarge", "vcpus": 8, "memory_mb": 65536, "root_gb": 100},
          {"name": "r1.huge", "vcpus": 32, "memory_mb": 524288, "root_gb": 200})
_IMAGES = ({"hw_architecture": "x86_64"}, {"hw_architecture": "x86_64", "img_hv_type": "kvm"},
           {"hw_architecture": "i686"}, {"hw_architecture": "aarch64"},
           {"img_hv_requested_version": ">=6.0"}, {"img_hv_type": "qemu",
                                                   "hw_vm_mode": "hvm"},
           {"img_hv_requested_version": "<6.0", "hw_architecture": "x86_64"})

#: The project of every server group of a bench fleet and of the requests that
#: name one (groups are their project's own).
GROUP_PROJECT = "bench"


def _uuid(rng: random.Random) -> str:
    return str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


class _Gen:
    def __init__(self, rng: random.Random, fleet: bench_fleet.BenchFleet) -> None:
        self.rng = rng
        self.hosts = [n["host"] for n in fleet.nodes]
        self.existing = [c["instance_uuid"] for c in fleet.consumers
                         if not c["instance_group"]]
        self.groups = {policy: [u for u, g in fleet.groups.items() if g["policy"] == policy]
                       for policy in bench_fleet.GROUP_POLICIES}
        self.max_per_host = {u: g["max_server_per_host"] for u, g in fleet.groups.items()
                             if g["max_server_per_host"]}
        self.issued: list[str] = []           # trace instances, not yet released
        self.released: set[str] = set()

    def flavor(self, **over) -> dict:
        f = dict(self.rng.choice(_SMALL[:5]))
        f.update(over)
        f.setdefault("extra_specs", {})
        return f

    def pinned_flavor(self, thread_policy: str | None = None, page: str | None = None) -> dict:
        vcpus = self.rng.choice((2, 4, 8))
        specs = {"hw:cpu_policy": "dedicated"}
        if thread_policy:
            specs["hw:cpu_thread_policy"] = thread_policy
        specs["hw:mem_page_size"] = page or self.rng.choice(("large", "2MB", "1GB", "small"))
        return {"name": f"pin.{vcpus}", "vcpus": vcpus, "memory_mb": vcpus * 2048,
                "root_gb": 40, "extra_specs": specs}

    def group(self, policy: str) -> dict:
        """One of the fleet's groups of this policy (members already placed) or,
        one time in three, a new one; an anti-affinity group's
        ``max_server_per_host`` rule goes with every request of that group."""
        rng = self.rng
        pool = self.groups[policy]
        if pool and rng.random() < 0.67:
            uuid = rng.choice(pool)
        else:
            uuid = _uuid(rng)
            pool.append(uuid)
            if policy == "anti-affinity" and rng.random() < 0.3:
                self.max_per_host[uuid] = 2
        out: dict[str, Any] = {"uuid": uuid, "policy": policy}
        if uuid in self.max_per_host:
            out["rules"] = {"max_server_per_host": self.max_per_host[uuid]}
        return out

    def spec(self, kind: str) -> dict:
        rng = self.rng
        req: dict[str, Any] = {"project_id": f"p{rng.randrange(50)}", "user_id": "bench"}
        flavor = self.flavor()
        n = 1
        if kind == "plain":
            pass
        elif kind == "image":
            req["image"] = {"id": _uuid(rng), "properties": dict(rng.choice(_IMAGES))}
        elif kind.startswith("pinned-"):
            flavor = self.pinned_flavor(kind.split("-", 1)[1])
        elif kind == "mixed":
            vcpus = rng.choice((4, 8))
            flavor = {"name": f"mixed.{vcpus}", "vcpus": vcpus, "memory_mb": vcpus * 2048,
                      "root_gb": 40, "extra_specs": {"hw:cpu_policy": "mixed",
                                                     "hw:cpu_dedicated_mask": "^0-1"}}
            if rng.random() < 0.5:
                flavor["extra_specs"]["hw:mem_page_size"] = "2MB"
        elif kind == "pages":
            flavor["extra_specs"]["hw:mem_page_size"] = rng.choice(
                ("small", "large", "2MB", "1GB", "any"))
            if rng.random() < 0.3:
                flavor["extra_specs"]["hw:numa_nodes"] = "1"
        elif kind == "numa2":
            flavor = self.flavor(vcpus=rng.choice((4, 8)), memory_mb=rng.choice((8192, 16384)))
            flavor["extra_specs"]["hw:numa_nodes"] = "2"
            if rng.random() < 0.5:
                flavor["extra_specs"].update({"hw:cpu_policy": "dedicated",
                                              "hw:mem_page_size": "large"})
        elif kind == "pci-vf":
            flavor = self.pinned_flavor(rng.choice((None, "prefer")), "large")
            alias = rng.choice(("vf", "vf-any"))
            flavor["extra_specs"]["pci_passthrough:alias"] = f"{alias}:{rng.choice((1, 1, 2))}"
            if rng.random() < 0.4:
                flavor["extra_specs"]["hw:pci_numa_affinity_policy"] = rng.choice(
                    ("required", "preferred", "legacy"))
        elif kind == "gpu":
            flavor = self.flavor(vcpus=8, memory_mb=32768)
            flavor["extra_specs"]["pci_passthrough:alias"] = "gpu:1"
            if rng.random() < 0.5:
                flavor["extra_specs"]["hw:pci_numa_affinity_policy"] = "preferred"
        elif kind.startswith("group-"):
            policy = {"group-affinity": "affinity", "group-anti-affinity": "anti-affinity",
                      "group-soft": rng.choice(("soft-affinity", "soft-anti-affinity"))}[kind]
            req["instance_group"] = self.group(policy)
            req["project_id"] = GROUP_PROJECT      # a group is its project's own
            n = rng.choice((1, 1, 2, 3))
        elif kind == "multi":
            n = rng.choice((2, 3, 5, 10))
            flavor = dict(rng.choice(_SMALL[:3]), extra_specs={})
        elif kind in ("same-host", "different-host"):
            pool = self.existing if not self.issued or rng.random() < 0.7 else self.issued
            named = rng.sample(pool, min(len(pool), rng.choice((1, 2))))
            req["scheduler_hints"] = {kind.replace("-", "_"): named}
        elif kind == "force-hosts":
            req["force_hosts"] = rng.sample(self.hosts, min(len(self.hosts),
                                                            rng.randint(1, 3)))
        elif kind == "ignore-hosts":
            req["ignore_hosts"] = rng.sample(self.hosts, min(len(self.hosts),
                                                             rng.randint(5, 20)))
        elif kind == "az":
            req["availability_zone"] = rng.choice(bench_fleet.AZS)
            if rng.random() < 0.1:
                flavor = dict(_SMALL[5], extra_specs={})    # often nowhere in the zone
        else:
            raise ValueError(f"unknown kind {kind!r}")
        # Features real requests carry on top of their main one.
        if kind != "az" and "force_hosts" not in req and rng.random() < 0.15:
            req["availability_zone"] = rng.choice(bench_fleet.AZS)
        if "image" not in req and rng.random() < 0.2:
            req["image"] = {"id": _uuid(rng), "properties": dict(rng.choice(_IMAGES[:2]))}
        if kind == "plain" and rng.random() < 0.15:
            flavor["extra_specs"][rng.choice(("ssd", "aggregate_instance_extra_specs:ssd"))] \
                = "true"
        req["flavor"] = flavor
        req["num_instances"] = n
        req["instance_uuids"] = [_uuid(rng) for _ in range(n)]
        self.issued.extend(req["instance_uuids"])
        return req

    def release(self) -> str | None:
        rng = self.rng
        if self.existing and (not self.issued or rng.random() < 0.3):
            uuid = self.existing.pop(rng.randrange(len(self.existing)))
        elif self.issued:
            uuid = self.issued.pop(rng.randrange(len(self.issued)))
        else:
            return None
        self.released.add(uuid)
        return uuid


def generate_trace(fleet: bench_fleet.BenchFleet, size: int, seed: int = 7,
                   min_per_kind: int = 1) -> list[dict]:
    """``size`` operations; each kind appears at least ``min_per_kind`` times when
    ``size`` allows (the first ``len(KINDS)`` operations are one of each, shuffled)."""
    rng = random.Random(seed)
    gen = _Gen(rng, fleet)
    names, weights = list(KINDS), list(KINDS.values())
    forced = [k for k in names for _ in range(min_per_kind)][:size]
    rng.shuffle(forced)
    # releases need something placed first: move the forced releases to the end
    forced.sort(key=lambda k: k == "release")
    ops = []
    for i in range(size):
        kind = forced[i] if i < len(forced) else rng.choices(names, weights)[0]
        if kind == "release":
            uuid = gen.release()
            if uuid is None:
                kind = "plain"
            else:
                ops.append({"i": i, "kind": kind, "op": "release", "instance_uuid": uuid})
                continue
        ops.append({"i": i, "kind": kind, "op": "select", "spec": gen.spec(kind)})
    return ops


def dump(ops: Iterable[dict], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for op in ops:
            f.write(json.dumps(op, sort_keys=True) + "\n")


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def group_policies(fleet: bench_fleet.BenchFleet, ops: Iterable[dict]
                   ) -> dict[str, tuple[str, int | None]]:
    """group uuid -> (policy, max_server_per_host) for the fleet's and the trace's groups."""
    out = {u: (g["policy"], g["max_server_per_host"]) for u, g in fleet.groups.items()}
    for op in ops:
        group = op.get("spec", {}).get("instance_group")
        if group and group["uuid"] not in out:
            out[group["uuid"]] = (group["policy"],
                                  (group.get("rules") or {}).get("max_server_per_host"))
    return out
