"""Seeded random filter cases for the Nova parity check of the filter catalogue.

Plain data only (no Nova import, no Berth import), so the generator is tested
with the unit tests. A case is one request and a few hosts, for one filter::

    {"id": 7, "filter": "ImagePropertiesFilter",
     "conf": {"filter_scheduler": {"max_io_ops_per_host": 8}},
     "request": {...the request spec format (doc/source/reference/file-formats.rst)...},
     "group": {"members": [uuid, ...], "hosts": [host, ...]} or None,
     "hosts": [{"host": "h0", ..., "aggregates": [{metadata}, ...]}, ...]}

Each (request, host) pair is one compared answer. Values are edge-heavy: upper
and lower case, blanks around values, empty names, numeric strings (``04``,
``4.0``), version strings Python's packaging reads (``v8``, ``8.2rc1``,
``1.0.post1``), unicode, missing keys, odd operators. Hosts look like what a
Nova compute reports: its ``supported_instances`` use names Nova knows (in any
case), metrics use Nova's metric names, heartbeats are seconds before (or
after) the check, away from the ``service_down_time`` edge by more than the
time a run takes.
"""
from __future__ import annotations

import random
import uuid as uuidlib

FILTERS = (
    "AllHostsFilter", "ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
    "AggregateInstanceExtraSpecsFilter", "AggregateImagePropertiesIsolation",
    "AggregateMultiTenancyIsolation", "AggregateTypeAffinityFilter", "IsolatedHostsFilter",
    "JsonFilter", "MetricsFilter", "NumInstancesFilter", "AggregateNumInstancesFilter",
    "IoOpsFilter", "AggregateIoOpsFilter", "SimpleCIDRAffinityFilter", "SameHostFilter",
    "DifferentHostFilter", "ServerGroupAffinityFilter", "ServerGroupAntiAffinityFilter",
    "PciPassthroughFilter",
)
WEIGHERS = ("RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "NumInstancesWeigher",
            "HypervisorVersionWeigher", "BuildFailureWeigher", "MetricsWeigher")

HOSTS_PER_CASE = 6

_ARCHES = ("x86_64", "X86_64", "i686", "i386", "aarch64", "AArch64", "ppc64le")
_HV_TYPES = ("kvm", "KVM", "qemu", "QEMU", "xen", "Xen", "lxc")
_VM_MODES = ("hvm", "HVM", "xen", "exe")
_SUPPORTED = ([], [["x86_64", "kvm", "hvm"]], [["X86_64", "KVM", "hvm"]],
              [["i686", "qemu", "hvm"], ["x86_64", "qemu", "hvm"]], [["aarch64", "kvm", "hvm"]],
              [["x86_64", "xen", "xen"], ["x86_64", "xen", "hvm"]], [["AMD64", "kvm", "HVM"]])
_VERSIONS = (0, 1000000, 6000000, 7002000, 8002000, 8002001, 8000000, 9000000, 1000001)
_CPU_INFOS = ({}, {"arch": "x86_64", "vendor": "Intel", "features": ["avx2", "sse4_2"],
                   "maxphysaddr": {"mode": "passthrough", "bits": 46}},
              {"arch": "x86_64", "vendor": "intel", "features": ["sse4_2"]},
              {"arch": "aarch64"}, {"vendor": "AMD", "maxphysaddr": {"bits": 39}},
              {"maxphysaddr": {"mode": "emulate", "bits": 52}, "topology": {"cores": 8}})
_STATS = {"tier": ("gold", "Gold", " gold", "silver"), "ssd": ("true", "True", "1"),
          "num": ("4", "04", "4.0", "x", "-1"), "gpu": ('{"model": "a100"}', "none"),
          "zöne": ("nörd", "ä")}
_METRICS = ("cpu.percent", "cpu.frequency", "cpu.user.percent")
_IPS = ("10.0.0.5", "10.0.1.20", "10.0.0.130", "192.168.1.1", "10.1.0.5")
_AGG_KEYS = {
    "ssd": ("true", "true, nvme", "True", "", " true "),
    "gpu": ("a100", "4", "04"),
    "filter_tenant_id": ("p1", "p1,p2", " p2 ", "P1"),
    "filter_tenant_id_2": ("p3", ""),
    "instance_type": ("m1.small", "m1.small, m1.large", "M1.SMALL", " m1.tiny"),
    "os_distro": ("ubuntu", "Ubuntu, debian", "windows", "ubuntu,windows"),
    "hw_vm_mode": ("hvm", "hv", "xen"),
    "os_type": ("linux", "Linux", "windows"),
    "hw_disk_bus": ("virtio", "scsi"),
    "ns.os_distro": ("ubuntu",),
    "max_io_ops_per_host": ("4", "x", " 6", "-1", "0"),
    "max_instances_per_host": ("3", "04", "-1", "x", "50"),
    "custom_prop": ("a", "b"),
}
_OPS = ("", "s== ", "s!= ", "<in> ", "= ", "== ", "!= ", ">= ", "<= ", "s>= ", "s< ",
        "<or> ", "<all-in> ", "<or> gold <or> ")
_WORDS = ("QEMU", "qemu", "gold", "Gold", "4", "04", "4.0", "8002000", "Intel", "avx2",
          "true", "nörd", "", " ", "x", "46", "40", "a100", "nvme", "ubuntu")

_CAP_KEYS = ("capabilities:hypervisor_type", "capabilities:hypervisor_version",
             "capabilities:cpu_info:vendor", "capabilities:cpu_info:features",
             "capabilities:cpu_info:maxphysaddr:bits", "capabilities:cpu_info:topology:cores",
             "capabilities:stats:tier", "capabilities:tier", "capabilities:num",
             "capabilities:gpu:model", "capabilities:zöne", "capabilities:", "capabilities::",
             "capabilities:cpu_info:", "capabilities:vcpus", "capabilities:host_ip",
             "capabilities:nope", "tier", "num", "hypervisor_type", "nope", "hw:maxphysaddr_bits",
             "aggregate_instance_extra_specs:ssd", "resources:VCPU")
_AGG_SPEC_KEYS = ("ssd", "aggregate_instance_extra_specs:ssd", "gpu",
                  "aggregate_instance_extra_specs:gpu", "aggregate_instance_extra_specs:",
                  "aggregate_instance_extra_specs:os_distro", "capabilities:ssd", "nope",
                  "aggregate_instance_extra_specs:nope", "trait:CUSTOM_X")

_IMAGE_VALUES = {
    "hw_architecture": _ARCHES + ("amd64", "x86_32"),
    "architecture": _ARCHES,
    "img_hv_type": _HV_TYPES + ("xapi",),
    "hypervisor_type": _HV_TYPES,
    "hw_vm_mode": _VM_MODES + ("hv", "pv"),
    "vm_mode": _VM_MODES,
    "img_hv_requested_version": (">=8", ">=v8", "==8.2rc1", ">8.2rc1", ">1.0.post1",
                                 "<9, >=8.0", ">= 8.2.0", "!=7.2", ">=1!0", "<8.2.0.dev1",
                                 " >= 8 ", "<V8.2", ">=7.2,<8.2.1", ">6.0.0a1"),
    "hypervisor_version_requires": (">=8", "<8.2rc1", ">=7.2"),
    "hw_maxphysaddr_bits": ("40", "46", "48"),
}
_ISOLATION_PROPS = {"os_distro": ("ubuntu", "debian", "windows", "Ubuntu"),
                    "hw_vm_mode": ("hvm", "xen", "hv", "HVM"),
                    "os_type": ("linux", "windows", "Linux"),
                    "hw_disk_bus": ("virtio", "scsi", "ide"), "custom_prop": ("a", "c"),
                    "ns.os_distro": ("ubuntu", "debian")}

_QUERIES = (
    '[">=", "$free_ram_mb", {n}]', '["<", "$free_disk_mb", {n}]', '["=", "$vcpus_used", {k}]',
    '["in", "$hypervisor_type", "QEMU", "Xen"]', '["not", ["=", "$host", "h1"]]',
    '["and", [">=", "$free_ram_mb", {n}], ["<=", "$num_instances", {k}]]',
    '["or", ["=", "$stats.tier", "gold"], [">", "$num_io_ops", {k}]]',
    '["=", "$cpu_info.vendor", "Intel"]', '[">=", "$hypervisor_version", 8000000]',
    '["=", "$host_ip", "10.0.0.5"]', '["<", "$stats.num", 5]',
    '[">", "$metrics.cpu.percent", 50]', '["=", "$stats.nope", "x"]',
    '["in", "$host", "h0", "h2", "h4"]', '["and"]', '["or"]', '["not"]',
)


def make_cases(seed: int, count_per_filter: int) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count_per_filter):
        for name in FILTERS:
            cases.append(make_case(rng, len(cases), name))
    return cases


def make_case(rng: random.Random, case_id: int, name: str) -> dict:
    pool = [str(uuidlib.UUID(int=rng.getrandbits(128), version=4)) for _ in range(8)]
    hosts = [_host(rng, i, pool) for i in range(HOSTS_PER_CASE)]
    case = {"id": case_id, "filter": name, "conf": {}, "group": None, "hosts": hosts,
            "request": {"flavor": {"vcpus": rng.choice([1, 2, 4]),
                                   "memory_mb": rng.choice([512, 2048]),
                                   "root_gb": rng.choice([1, 10]), "extra_specs": {}}}}
    _REQUESTS[name](rng, case, pool)
    return case


def _host(rng, i: int, pool: list[str]) -> dict:
    vcpus = rng.choice([4, 8, 16])
    memory_mb = rng.choice([4096, 8192, 16384])
    local_gb = rng.choice([20, 100])
    stats = {k: rng.choice(v) for k, v in _STATS.items() if rng.random() < 0.4}
    metrics = {m: rng.choice([0, 5.0, 40, 80.5]) for m in _METRICS if rng.random() < 0.7}
    aggregates = []
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        keys = rng.sample(sorted(_AGG_KEYS), rng.randint(1, 3))
        aggregates.append({k: rng.choice(_AGG_KEYS[k]) for k in keys})
    mine = [u for j, u in enumerate(pool) if j % HOSTS_PER_CASE == i and rng.random() < 0.6]
    return {
        "host": f"h{i}", "vcpus": vcpus, "memory_mb": memory_mb, "local_gb": local_gb,
        "vcpus_used": rng.randint(0, vcpus), "memory_mb_used": rng.choice([0, 512, 2048, 4096]),
        "local_gb_used": rng.choice([0, 5, 10]),
        "hypervisor_type": rng.choice(["QEMU", "QEMU", "qemu", "Xen"]),
        "hypervisor_version": rng.choice(_VERSIONS),
        "cpu_info": rng.choice(_CPU_INFOS), "supported_instances": rng.choice(_SUPPORTED),
        "stats": stats, "metrics": metrics, "host_ip": rng.choice(_IPS),
        "num_io_ops": rng.choice([0, 1, 4, 7, 8, 9]), "num_instances": len(mine) +
        rng.choice([0, 2, 3, 49, 50]), "failed_builds": rng.choice([0, 0, 0, 1, 3]),
        "disabled": rng.random() < 0.15,
        # seconds since the last heartbeat (negative: in the future)
        "heartbeat_age": rng.choice([0, 5, 20, 50, 75, 200, 4000, -200, -4000]),
        "instances": mine, "aggregates": aggregates,
        "pci": _pci_pools(rng),
    }


def _pci_pools(rng) -> list[dict]:
    pools = []
    for _ in range(rng.choice([0, 1, 2])):
        pools.append({"vendor_id": "8086", "product_id": rng.choice(["154c", "1572"]),
                      "dev_type": "type-VF", "numa_node": None,
                      "physical_network": rng.choice(["physnet1", "PhysNet1", "physnet2",
                                                      None]),
                      "count": rng.choice([1, 2, 4])})
    return pools


def _requirement(rng) -> str:
    op = rng.choice(_OPS)
    if op == "<or> ":
        return op + rng.choice(_WORDS).strip() + " <or> " + rng.choice(_WORDS).strip()
    if op == "<all-in> ":
        return op + " ".join(rng.sample(["avx2", "sse4_2", "gold", "Q"], 2))
    return (op + rng.choice(_WORDS)) if op else rng.choice(_WORDS)


def _specs(rng, keys, n_max=3) -> dict:
    out = {}
    for key in rng.sample(keys, rng.randint(1, n_max)):
        out[key] = rng.choice(["40", "46", "48"]) if key == "hw:maxphysaddr_bits" \
            else _requirement(rng)
    return out


# -- per-filter requests --------------------------------------------------------------

def _none(rng, case, pool):
    pass


def _compute(rng, case, pool):
    case["conf"] = {"DEFAULT": {"service_down_time": rng.choice([60, 60, 30, 120])}}


def _capabilities(rng, case, pool):
    case["request"]["flavor"]["extra_specs"] = _specs(rng, list(_CAP_KEYS))


def _image_props(rng, case, pool):
    props = {}
    for key in rng.sample(sorted(_IMAGE_VALUES), rng.randint(1, 3)):
        props[key] = rng.choice(_IMAGE_VALUES[key])
    if rng.random() < 0.2:
        props["os_distro"] = "ubuntu"
    case["request"]["image"] = {"properties": props}


def _agg_extra_specs(rng, case, pool):
    case["request"]["flavor"]["extra_specs"] = _specs(rng, list(_AGG_SPEC_KEYS))


def _isolation(rng, case, pool):
    props = {k: rng.choice(v) for k, v in _ISOLATION_PROPS.items() if rng.random() < 0.5}
    case["request"]["image"] = {"properties": props}
    if rng.random() < 0.3:
        case["conf"] = {"filter_scheduler": {
            "aggregate_image_properties_isolation_namespace": "ns",
            "aggregate_image_properties_isolation_separator": "."}}


def _tenancy(rng, case, pool):
    project = rng.choice(["p1", "p2", "p3", "P1", "p9", None])
    if project is not None:
        case["request"]["project_id"] = project


def _type_affinity(rng, case, pool):
    case["request"]["flavor"]["name"] = rng.choice(["m1.small", "m1.large", "M1.SMALL",
                                                    "m1.tiny", "m1.nano"])


def _isolated_hosts(rng, case, pool):
    images = ["img-a", "img-b", "img-c"]
    case["request"]["image"] = {"id": rng.choice(images), "properties": {}}
    case["conf"] = {"filter_scheduler": {
        "isolated_images": rng.sample(images, rng.randint(0, 2)),
        "isolated_hosts": [f"h{i}" for i in rng.sample(range(HOSTS_PER_CASE), 2)],
        "restrict_isolated_hosts_to_isolated_images": rng.random() < 0.5}}


def _json(rng, case, pool):
    query = rng.choice(_QUERIES).format(n=rng.choice([0, 1024, 4096, 8192, 20000]),
                                        k=rng.choice([0, 1, 2, 5]))
    case["request"]["scheduler_hints"] = {"query": query}


def _metrics(rng, case, pool):
    setting = [f"{m}={rng.choice(['1.0', '-1', '2.5'])}"
               for m in rng.sample(_METRICS, rng.randint(0, 2))]
    case["conf"] = {"metrics": {"weight_setting": setting}}


def _num_instances(rng, case, pool):
    case["conf"] = {"filter_scheduler": {"max_instances_per_host": rng.choice([50, 3, 1])}}


def _io_ops(rng, case, pool):
    case["conf"] = {"filter_scheduler": {"max_io_ops_per_host": rng.choice([8, 4, 1])}}


def _cidr(rng, case, pool):
    hints = {"build_near_host_ip": rng.choice(["10.0.0.5", "10.0.1.7", "192.168.1.200",
                                               "10.1.0.1", " 10.0.0.9", "10.0.0.9 ",
                                               "10.0.0.300"])}
    cidr = rng.choice([None, "/24", "/16", "/23", "/32", "/8", "/0"])
    if cidr is not None:
        hints["cidr"] = cidr
    case["request"]["scheduler_hints"] = hints


def _same_host(rng, case, pool, hint="same_host"):
    chosen = rng.sample(pool, rng.randint(1, 3))
    case["request"]["scheduler_hints"] = {hint: chosen}


def _different_host(rng, case, pool):
    _same_host(rng, case, pool, "different_host")


def _group(rng, case, pool, policy):
    members = rng.sample(pool, rng.randint(0, 4))
    hosts = sorted({h["host"] for h in case["hosts"] for u in h["instances"] if u in members})
    group = {"uuid": str(uuidlib.UUID(int=rng.getrandbits(128), version=4)),
             "policy": rng.choice([policy, policy, "soft-" + policy])}
    if group["policy"] == "anti-affinity" and rng.random() < 0.4:
        group["rules"] = {"max_server_per_host": rng.choice([1, 2, 3])}
    case["request"]["instance_group"] = group
    case["group"] = {"members": members, "hosts": hosts}


def _affinity(rng, case, pool):
    _group(rng, case, pool, "affinity")


def _anti_affinity(rng, case, pool):
    _group(rng, case, pool, "anti-affinity")


def _pci(rng, case, pool):
    spec = {"vendor_id": "8086", "product_id": rng.choice(["154c", "1572"])}
    if rng.random() < 0.7:
        spec["physical_network"] = rng.choice(["physnet1", "PHYSNET1", "PhysNet1", "physnet2"])
    case["request"]["pci_requests"] = [{"count": rng.choice([1, 2, 3]), "spec": [spec]}]


_REQUESTS = {
    "AllHostsFilter": _none, "ComputeFilter": _compute,
    "ComputeCapabilitiesFilter": _capabilities, "ImagePropertiesFilter": _image_props,
    "AggregateInstanceExtraSpecsFilter": _agg_extra_specs,
    "AggregateImagePropertiesIsolation": _isolation,
    "AggregateMultiTenancyIsolation": _tenancy, "AggregateTypeAffinityFilter": _type_affinity,
    "IsolatedHostsFilter": _isolated_hosts, "JsonFilter": _json, "MetricsFilter": _metrics,
    "NumInstancesFilter": _num_instances, "AggregateNumInstancesFilter": _num_instances,
    "IoOpsFilter": _io_ops, "AggregateIoOpsFilter": _io_ops,
    "SimpleCIDRAffinityFilter": _cidr, "SameHostFilter": _same_host,
    "DifferentHostFilter": _different_host, "ServerGroupAffinityFilter": _affinity,
    "ServerGroupAntiAffinityFilter": _anti_affinity, "PciPassthroughFilter": _pci,
}


def make_weigher_cases(seed: int, count: int) -> list[dict]:
    """``count`` fleets of 30 hosts (weighed by every weigher in WEIGHERS)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        pool = [str(uuidlib.UUID(int=rng.getrandbits(128), version=4)) for _ in range(8)]
        hosts = [_host(rng, j, pool) for j in range(30)]
        for j, host in enumerate(hosts):
            host["host"] = f"w{j}"
            host["metrics"] = {m: rng.choice([0, 5.0, 40, 80.5, 99]) for m in _METRICS}
            host["cpu_allocation_ratio"] = rng.choice([1.0, 2.0, 4.0, 16.0])
        out.append({"id": i, "hosts": hosts,
                    "request": {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}},
                    "conf": {"metrics": {"weight_setting": ["cpu.percent=-1.0",
                                                            "cpu.frequency=0.01"]}}})
    return out
