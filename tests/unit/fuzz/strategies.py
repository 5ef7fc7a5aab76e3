"""Payload generators: mostly well-formed, with hostile values mixed in at every
level (wrong types, huge and non-finite numbers, control characters, deep and
wide values), so that both the validators and the code behind them are reached."""
from __future__ import annotations

import string

from hypothesis import strategies as st

UUIDS = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(6)]

NASTY_TEXT = st.sampled_from([
    "", " ", "\n", "x\x00", "\x1b[31m", "\x85", "²", "٣", "1e999", "inf", "nan", "-0",
    "9" * 40, "0-10000000", "^0-99999999999", "a" * 300, "0x10", "1_000", " 2 ", "é",
])
TEXT = st.one_of(st.text(max_size=20), NASTY_TEXT,
                 st.text(alphabet=string.ascii_lowercase + string.digits + "-_.:,^",
                         max_size=12))
INTS = st.one_of(st.integers(-3, 70), st.sampled_from([
    0, 1, 4096, 4097, 2 ** 31, 2 ** 40, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, -(2 ** 63) - 1,
    10 ** 30]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([1e308, -1e308, 5e-324, 0.0, -0.0, 1000.0, 1000.5]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JUNK = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)


class _Maybe:
    """``maybe(strategy)``: in a clean payload the strategy itself; in a hostile one
    any junk value instead, about one time in ``p_junk`` per field."""

    hostile = True

    def __call__(self, strategy, junk=JUNK, p_junk: int = 12):
        if not self.hostile:
            return strategy
        return st.one_of(*([strategy] * (p_junk - 1)), junk)


maybe = _Maybe()


def cpu_list(n: int = 8):
    token = st.one_of(st.integers(-1, n + 2).map(str),
                      st.tuples(st.integers(0, n + 1), st.integers(0, n + 1))
                      .map(lambda t: f"{t[0]}-{t[1]}"),
                      st.integers(0, n).map(lambda i: f"^{i}"))
    return st.one_of(st.lists(token, min_size=1, max_size=5).map(",".join), NASTY_TEXT)


EXTRA_SPEC_VALUES = {
    "hw:numa_nodes": st.one_of(st.integers(-1, 5).map(str), NASTY_TEXT),
    "hw:numa_cpus.0": cpu_list(), "hw:numa_cpus.1": cpu_list(),
    "hw:numa_mem.0": st.one_of(st.integers(-1, 9000).map(str), NASTY_TEXT),
    "hw:numa_mem.1": st.one_of(st.integers(-1, 9000).map(str), NASTY_TEXT),
    "hw:cpu_policy": st.sampled_from(["shared", "dedicated", "mixed", "Dedicated", "x"]),
    "hw:cpu_dedicated_mask": cpu_list(),
    "hw:cpu_thread_policy": st.sampled_from(["prefer", "isolate", "require", "y"]),
    "hw:mem_page_size": st.sampled_from(["small", "large", "any", "2048", "2MB", "1GB",
                                         "0", "-4", "7kb", "1e999"]),
    "hw:emulator_threads_policy": st.sampled_from(["share", "isolate", "z"]),
    "hw:pci_numa_affinity_policy": st.sampled_from(["legacy", "required", "preferred",
                                                    "socket", "bad"]),
    "pci_passthrough:alias": st.one_of(
        st.lists(st.sampled_from(["nic", "nic:2", "nic:0", "gpu", "nic:x", "nic:99999999"]),
                 min_size=1, max_size=4).map(",".join),
        st.integers(1, 200).map(lambda n: ",".join(["nic:1"] * n))),
    "capabilities:vcpus": st.sampled_from([">= 2", "<= 4", "s== x", "<in> a", "== nan"]),
    "aggregate_instance_extra_specs:ssd": st.sampled_from(["true", "<in> t", "s!= x"]),
}
IMAGE_PROPS = {
    "hw_numa_nodes": st.integers(-1, 3).map(str),
    "hw_cpu_policy": st.sampled_from(["shared", "dedicated", "mixed"]),
    "hw_mem_page_size": st.sampled_from(["small", "large", "2MB"]),
    "hw_architecture": st.sampled_from(["x86_64", "aarch64", "bogus"]),
    "img_hv_type": st.sampled_from(["kvm", "qemu", "xen"]),
}


def _build(hostile: bool) -> dict:
    maybe.hostile = hostile

    def some_of(table: dict):
        return st.fixed_dictionaries({}, optional={k: maybe(v, TEXT) for k, v in table.items()})


    FLAVOR = st.fixed_dictionaries(
        {"vcpus": maybe(st.integers(1, 8), INTS), "memory_mb": maybe(st.integers(1, 9000), INTS),
         "root_gb": maybe(st.integers(0, 50), INTS)},
        optional={"ephemeral_gb": maybe(st.integers(0, 5), INTS),
                  "swap": maybe(st.integers(0, 512), INTS), "name": maybe(TEXT),
                  "extra_specs": maybe(some_of(EXTRA_SPEC_VALUES),
                                       st.dictionaries(TEXT, SCALARS, max_size=3))})
    GROUP = st.fixed_dictionaries(
        {"uuid": maybe(st.sampled_from(UUIDS)),
         "policy": maybe(st.sampled_from(["affinity", "anti-affinity", "soft-affinity",
                                          "soft-anti-affinity"]))},
        optional={"rules": maybe(st.fixed_dictionaries({"max_server_per_host": maybe(
            st.one_of(st.integers(0, 3), NASTY_TEXT), INTS)}))})
    PCI_REQUESTS = st.lists(st.fixed_dictionaries(
        {"count": maybe(st.integers(0, 3), INTS),
         "spec": maybe(st.lists(st.fixed_dictionaries({}, optional={
             "vendor_id": st.sampled_from(["8086", "10de", "zz"]),
             "product_id": st.sampled_from(["154c", "1572", ""])}), max_size=2))}), max_size=3)
    HOST_NAMES = st.sampled_from(["c0", "c1", "c2", "c3", "nope", "c1\n", ""])

    REQUEST_SPEC = st.fixed_dictionaries(
        {"flavor": maybe(FLAVOR, JUNK, 12)},
        optional={
            "num_instances": maybe(st.integers(1, 4), INTS),
            "instance_uuids": maybe(st.lists(st.sampled_from(UUIDS + ["x"]), max_size=4)),
            "project_id": maybe(TEXT), "user_id": maybe(TEXT),
            "image": maybe(st.fixed_dictionaries({}, optional={
                "id": TEXT, "properties": maybe(some_of(IMAGE_PROPS))})),
            "availability_zone": maybe(st.sampled_from(["az1", "az2", "none", "az1\x00"])),
            "scheduler_hints": maybe(st.fixed_dictionaries({}, optional={
                "same_host": st.lists(st.sampled_from(UUIDS + ["x"]), max_size=2),
                "different_host": st.lists(st.sampled_from(UUIDS), max_size=2),
                "group": st.sampled_from(UUIDS), "other": SCALARS})),
            "instance_group": maybe(GROUP),
            "pci_requests": maybe(PCI_REQUESTS),
            "force_hosts": maybe(st.lists(HOST_NAMES, max_size=2)),
            "force_nodes": maybe(st.lists(HOST_NAMES, max_size=2)),
            "ignore_hosts": maybe(st.lists(HOST_NAMES, max_size=2)),
            **({"bogus": JUNK} if hostile else {}),
        })


    NUMA_CELL = st.fixed_dictionaries(
        {"id": maybe(st.integers(0, 2), INTS),
         "cpuset": maybe(st.lists(st.integers(0, 7), max_size=4, unique=True)),
         "memory_mb": maybe(st.integers(1, 16384), INTS)},
        optional={"pcpuset": maybe(st.lists(st.integers(8, 15), max_size=4, unique=True)),
                  "socket": maybe(st.integers(0, 1)),
                  "siblings": maybe(st.lists(st.lists(st.integers(0, 15), max_size=2),
                                             max_size=2)),
                  "mempages": maybe(st.lists(st.fixed_dictionaries(
                      {"size_kb": st.sampled_from([4, 2048, 1048576, 3, 0]),
                       "total": maybe(st.integers(0, 5000), INTS)}), max_size=2))})
    PCI_DEVICE = st.fixed_dictionaries(
        {"address": st.sampled_from(["0000:81:00.0", "0000:81:00.1", "0000:81:00.2", "bad",
                                     "0000:81:00.0\n"]),
         "vendor_id": st.sampled_from(["8086", "10de", "zzzz"]),
         "product_id": st.sampled_from(["154c", "1572"])},
        optional={"dev_type": st.sampled_from(["type-PF", "type-VF", "type-PCI", "type-X"]),
                  "parent_addr": st.sampled_from(["0000:81:00.0", "0000:82:00.0"]),
                  "numa_node": maybe(st.integers(-1, 2)),
                  "physical_network": maybe(TEXT)})
    HOST = st.fixed_dictionaries(
        {"host": maybe(st.sampled_from(["c0", "c1", "fz-a", "fz-b"]), TEXT, 6),
         "vcpus": maybe(st.integers(1, 64), INTS), "memory_mb": maybe(st.integers(1, 65536), INTS),
         "local_gb": maybe(st.integers(0, 500), INTS)},
        optional={
            "node": maybe(st.sampled_from(["c0", "c1", "fz-a"]), TEXT, 4),
            "cpu_allocation_ratio": maybe(st.floats(0.1, 16), FLOATS, 3),
            "ram_allocation_ratio": maybe(st.floats(0.1, 2), FLOATS, 3),
            "disk_allocation_ratio": maybe(st.floats(0.1, 2), FLOATS, 3),
            "reserved_host_cpus": maybe(st.integers(0, 4), INTS),
            "reserved_host_memory_mb": maybe(st.integers(0, 4096), INTS),
            "reserved_host_disk_mb": maybe(st.integers(0, 4096), INTS),
            "hypervisor_type": maybe(st.sampled_from(["QEMU", "kvm"]), TEXT),
            "hypervisor_version": maybe(st.integers(0, 10 ** 7), INTS),
            "host_ip": maybe(st.sampled_from(["10.0.0.1", "::1", "300.1.1.1"]), TEXT),
            "stats": maybe(st.dictionaries(TEXT, SCALARS, max_size=3)),
            "metrics": maybe(st.dictionaries(TEXT, st.one_of(INTS, FLOATS), max_size=3)),
            "disabled": maybe(st.booleans()), "disabled_reason": maybe(TEXT),
            "cpu_info": maybe(st.dictionaries(TEXT, JUNK, max_size=3)),
            "numa_topology": maybe(st.fixed_dictionaries({"cells": st.lists(NUMA_CELL,
                                                                            max_size=2)})),
            "pci_devices": maybe(st.lists(PCI_DEVICE, max_size=3)),
            **({"junk": JUNK} if hostile else {}),
        })
    METADATA = st.dictionaries(
        st.one_of(st.sampled_from(["cpu_allocation_ratio", "ram_allocation_ratio",
                                   "max_io_ops_per_host", "max_instances_per_host",
                                   "ram_weight_multiplier", "availability_zone", "ssd"]), TEXT),
        st.one_of(st.none(), SCALARS, st.sampled_from(["inf", "nan", "1e999", "2.5", "-1", "8"])),
        max_size=3)
    AGGREGATE = st.fixed_dictionaries(
        {"name": maybe(st.sampled_from(["a0", "a1", "fz"]), TEXT, 4)},
        optional={"availability_zone": maybe(st.sampled_from(["az1", "az2"]), TEXT, 4),
                  "hosts": maybe(st.lists(st.sampled_from(["fz-a", "fz-b", "zz"]), max_size=3)),
                  "metadata": maybe(METADATA)})
    FLEET = st.fixed_dictionaries(
        {"hosts": maybe(st.lists(HOST, max_size=3), JUNK, 12)},
        optional={"aggregates": maybe(st.lists(AGGREGATE, max_size=2)),
                  **({"other": JUNK} if hostile else {})})

    return {name: value for name, value in locals().items() if name.isupper()}


_CLEAN, _HOSTILE = _build(False), _build(True)
maybe.hostile = True


def payloads(name: str):
    """Half clean payloads (which reach placement, claims and writes), half hostile."""
    return st.one_of(_CLEAN[name], _HOSTILE[name])


REQUEST_SPEC = payloads("REQUEST_SPEC")
HOST = payloads("HOST")
PCI_DEVICE = payloads("PCI_DEVICE")
METADATA = payloads("METADATA")
FLEET = payloads("FLEET")
HOST_NAMES = _HOSTILE["HOST_NAMES"]
