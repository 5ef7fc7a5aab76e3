"""Discovery over the fake kernel trees: exactly what each host has."""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from scheduler import exception
from scheduler.agent import cpus, host, kernel, memory, pci, platform
from tests.unit.agent import fake_host

VF_SPEC = '{"vendor_id": "8086", "product_id": "154c", "physical_network": "physnet1"}'
GPU_SPEC = '{"address": "0000:3b:00.*", "kind": "gpu", "trusted": true}'
PF_SPEC = '{"vendor_id": "8086", "product_id": "1572", "physical_network": "physnet1"}'

INTEL_FLAGS = ["apic", "avx", "avx2", "cx8", "de", "fpu", "ht", "lm", "mce", "msr", "pae",
               "pse", "sse4_2", "tsc", "vme", "vmx"]


# -- the kernel files, one reader at a time ------------------------------------------------

@pytest.mark.parametrize("text, cpus_", [
    ("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}), ("0-7,^2,^5-6", {0, 1, 3, 4, 7}),
    ("5", {5}), ("", set()), (" 0,2 ", {0, 2})])
def test_cpu_lists(text, cpus_):
    assert kernel.parse_cpu_list(text, "f") == frozenset(cpus_)


def test_two_socket_smt_cpus():
    facts = cpus.discover_cpus(fake_host.tree("two_socket_smt"))
    assert facts.online == frozenset(range(16)) and facts.offline == frozenset()
    assert facts.has_numa and facts.nodes == {0: frozenset({0, 1, 2, 3, 8, 9, 10, 11}),
                                              1: frozenset({4, 5, 6, 7, 12, 13, 14, 15})}
    assert facts.sockets() == [0, 1] and facts.threads_per_core() == 2
    by_id = {c.id: c for c in facts.cpus}
    assert by_id[0] == cpus.Cpu(id=0, socket=0, node=0, siblings=frozenset({0, 8}))
    assert by_id[13] == cpus.Cpu(id=13, socket=1, node=1, siblings=frozenset({5, 13}))


def test_two_socket_smt_memory_and_huge_pages():
    facts = memory.discover_memory(fake_host.tree("two_socket_smt"))
    assert facts.total_kb == 134217728
    assert facts.nodes[0].total_kb == 67108864 and facts.nodes[0].free_kb == 40000000
    assert facts.nodes[0].hugepages == (memory.HugePages(2048, 1024, 1000),
                                        memory.HugePages(1048576, 4, 4))
    assert facts.nodes[1].hugepages == (memory.HugePages(2048, 512, 512),
                                        memory.HugePages(1048576, 0, 0))
    assert facts.nodes[0].hugepage_kb == 1024 * 2048 + 4 * 1048576


def test_two_socket_smt_pci_bus():
    facts = {f.address: f for f in pci.scan_devices(fake_host.tree("two_socket_smt"))}
    assert sorted(facts) == ["0000:00:1f.2", "0000:3b:00.0", "0000:81:00.0", "0000:81:00.1",
                             "0000:81:02.0", "0000:81:02.1", "0000:81:02.2"]
    pf = facts["0000:81:00.0"]
    assert (pf.dev_type, pf.total_vfs, pf.vfs, pf.numa_node, pf.class_code) == (
        "type-PF", 4, ("0000:81:02.0", "0000:81:02.1", "0000:81:02.2"), 1, "020000")
    assert facts["0000:81:00.1"].dev_type == "type-PF" and facts["0000:81:00.1"].vfs == ()
    vf = facts["0000:81:02.1"]
    assert (vf.dev_type, vf.parent_addr, vf.vendor_id, vf.product_id) == (
        "type-VF", "0000:81:00.0", "8086", "154c")
    assert facts["0000:00:1f.2"].numa_node is None          # numa_node -1
    assert facts["0000:3b:00.0"].dev_type == "type-PCI"


def test_cpu_model_from_cpuinfo():
    model = platform.discover_cpu_model(fake_host.tree("two_socket_smt"))
    assert model == platform.CpuModel(arch="x86_64", vendor="Intel",
                                      model="Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz",
                                      features=tuple(INTEL_FLAGS))
    amd = platform.discover_cpu_model(fake_host.tree("small_no_numa"))
    assert (amd.arch, amd.vendor, amd.model) == ("x86_64", "AMD",
                                                 "AMD EPYC 7302P 16-Core Processor")


def test_cpu_model_on_arm(tmp_path):
    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd aes crc32 atomics\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\n\nprocessor\t: 1\n")
    model = platform.discover_cpu_model(kernel.KernelTree(str(tmp_path), str(tmp_path), 4))
    assert model == platform.CpuModel(arch="aarch64", vendor="ARM", model=None,
                                      features=("aes", "asimd", "atomics", "crc32", "fp"))


def test_disk_from_statvfs():
    disk = platform.discover_disk("/instances", statvfs=lambda path: fake_host.FakeStatvfs)
    assert disk == platform.DiskFacts(path="/instances", total_gb=500, free_gb=200)


def test_missing_instances_path_is_named(tmp_path):
    with pytest.raises(kernel.KernelTreeError, match="no-such-dir"):
        platform.discover_disk(str(tmp_path / "no-such-dir"))


# -- whole reports ---------------------------------------------------------------------------

def test_two_socket_smt_report_with_pinning_and_sriov():
    s = fake_host.settings(dedicated=frozenset({4, 5, 6, 7, 12, 13, 14, 15}),
                           shared=frozenset({1, 2, 3, 9, 10, 11}),
                           reserved_host_memory_mb=4096, reserved_host_cpus=1,
                           cpu_allocation_ratio=2.0, specs=[VF_SPEC, GPU_SPEC],
                           hypervisor_version=8002000)
    report = host.build_report(fake_host.facts("two_socket_smt"), s)
    assert report.node == {
        "host": "compute-1", "node": "compute-1", "vcpus": 14, "memory_mb": 131072,
        "local_gb": 500, "cpu_allocation_ratio": 2.0, "ram_allocation_ratio": 1.0,
        "disk_allocation_ratio": 1.0, "reserved_host_cpus": 1,
        "reserved_host_memory_mb": 4096, "reserved_host_disk_mb": 0,
        "hypervisor_type": "QEMU", "hypervisor_version": 8002000,
        "cpu_info": {"arch": "x86_64", "vendor": "Intel",
                     "model": "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz",
                     "features": INTEL_FLAGS,
                     "topology": {"sockets": 2, "cores": 4, "threads": 2}},
        "supported_instances": [["x86_64", "kvm", "hvm"]],
        # The host's CPU flags and SMT as traits (vmx: the generic and Intel's).
        "traits": ["HW_CPU_HYPERTHREADING", "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2",
                   "HW_CPU_X86_INTEL_VMX", "HW_CPU_X86_SSE42", "HW_CPU_X86_VMX"],
        "numa_topology": {"cells": [
            {"id": 0, "socket": 0, "cpuset": [1, 2, 3, 9, 10, 11], "pcpuset": [],
             "siblings": [[1, 9], [2, 10], [3, 11]], "memory_mb": 65536,
             "mempages": [{"size_kb": 4, "total": (67108864 - 6291456) // 4},
                          {"size_kb": 2048, "total": 1024},
                          {"size_kb": 1048576, "total": 4}]},
            {"id": 1, "socket": 1, "cpuset": [], "pcpuset": [4, 5, 6, 7, 12, 13, 14, 15],
             "siblings": [[4, 12], [5, 13], [6, 14], [7, 15]], "memory_mb": 65536,
             "mempages": [{"size_kb": 4, "total": (67108864 - 1048576) // 4},
                          {"size_kb": 2048, "total": 512},
                          {"size_kb": 1048576, "total": 0}]}]},
    }
    vf = {"vendor_id": "8086", "product_id": "154c", "dev_type": "type-VF",
          "parent_addr": "0000:81:00.0", "numa_node": 1, "physical_network": "physnet1"}
    assert report.pci_devices == [
        {"address": "0000:3b:00.0", "vendor_id": "10de", "product_id": "1eb8",
         "dev_type": "type-PCI", "parent_addr": None, "numa_node": 0,
         "physical_network": None, "tags": {"kind": "gpu", "trusted": "true"}},
        # No spec matches the PF, but its VFs need it listed: never handed out.
        {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
         "dev_type": "type-PF", "parent_addr": None, "numa_node": 1,
         "physical_network": None, "status": "unavailable"},
        {"address": "0000:81:02.0", **vf}, {"address": "0000:81:02.1", **vf},
        {"address": "0000:81:02.2", **vf}]
    assert dict(report.devices[0].tags) == {"kind": "gpu", "trusted": "true"}
    # CPU 0 and 8 are in neither set: the host keeps them, nothing to warn about.
    assert report.warnings == []


def test_two_socket_smt_all_shared_with_pf_spec():
    report = host.build_report(fake_host.facts("two_socket_smt"),
                               fake_host.settings(specs=[PF_SPEC, VF_SPEC]))
    assert report.node["vcpus"] == 16
    cells = report.node["numa_topology"]["cells"]
    assert [c["cpuset"] for c in cells] == [[0, 1, 2, 3, 8, 9, 10, 11],
                                            [4, 5, 6, 7, 12, 13, 14, 15]]
    assert [c["pcpuset"] for c in cells] == [[], []]
    assert [(d["address"], d["dev_type"], d.get("status", "available"), d["physical_network"])
            for d in report.pci_devices] == [
        ("0000:81:00.0", "type-PF", "available", "physnet1"),
        ("0000:81:00.1", "type-PF", "available", "physnet1"),
        ("0000:81:02.0", "type-VF", "available", "physnet1"),
        ("0000:81:02.1", "type-VF", "available", "physnet1"),
        ("0000:81:02.2", "type-VF", "available", "physnet1")]


def test_only_dedicated_leaves_the_rest_to_the_host():
    report = host.build_report(fake_host.facts("two_socket_smt"),
                               fake_host.settings(dedicated=frozenset({2, 3, 10, 11})))
    cells = report.node["numa_topology"]["cells"]
    # Node 1 has no guest CPUs: it is not a cell (Berth requires CPUs per cell).
    assert [(c["id"], c["cpuset"], c["pcpuset"], c["siblings"]) for c in cells] == [
        (0, [], [2, 3, 10, 11], [[2, 10], [3, 11]])]
    assert report.node["vcpus"] == 4
    assert report.warnings == ["NUMA node 1 has no guest CPUs; not reported as a cell"]


def test_small_host_without_numa():
    report = host.build_report(fake_host.facts("small_no_numa"), fake_host.settings("small"))
    node = dict(report.node)
    assert node.pop("cpu_info") == {
        "arch": "x86_64", "vendor": "AMD", "model": "AMD EPYC 7302P 16-Core Processor",
        "features": ["avx2", "de", "fpu", "lm", "msr", "pae", "pse", "sse4_2", "svm", "tsc",
                     "vme"],
        "topology": {"sockets": 1, "cores": 4, "threads": 1}}
    assert node == {
        "host": "small", "node": "small", "vcpus": 4, "memory_mb": 8167004 // 1024,
        "local_gb": 500, "cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
        "disk_allocation_ratio": 1.0, "reserved_host_cpus": 0,
        "reserved_host_memory_mb": 0, "reserved_host_disk_mb": 0,
        "hypervisor_type": "QEMU", "hypervisor_version": None,
        "supported_instances": [["x86_64", "kvm", "hvm"]],
        # One thread per core: no HW_CPU_HYPERTHREADING; svm: generic and AMD's.
        "traits": ["HW_CPU_X86_AMD_SVM", "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42",
                   "HW_CPU_X86_SVM"],
        # No node directory: one cell with all the CPUs, the host's memory and the
        # huge pages of /sys/kernel/mm/hugepages.
        "numa_topology": {"cells": [
            {"id": 0, "socket": 0, "cpuset": [0, 1, 2, 3], "pcpuset": [], "siblings": [],
             "memory_mb": 8167004 // 1024,
             "mempages": [{"size_kb": 4, "total": 8167004 // 4},
                          {"size_kb": 2048, "total": 0}]}]},
    }
    assert report.pci_devices == [] and report.warnings == []
    assert not report.facts.cpus.has_numa


def test_offline_cpus_are_not_reported():
    facts = fake_host.facts("offline_cpus")
    assert facts.cpus.online == frozenset(range(6))
    assert facts.cpus.offline == frozenset({6, 7})
    report = host.build_report(facts, fake_host.settings(dedicated=frozenset(range(2, 8)),
                                                         shared=frozenset({0, 1})))
    assert report.node["vcpus"] == 6
    assert report.node["memory_mb"] == 20480
    assert report.node["numa_topology"] == {"cells": [
        {"id": 0, "socket": 0, "cpuset": [0, 1], "pcpuset": [2, 3, 4, 5],
         "siblings": [[0, 1], [2, 3], [4, 5]], "memory_mb": 16384,
         "mempages": [{"size_kb": 4, "total": 16777216 // 4}, {"size_kb": 2048, "total": 0}]}]}
    assert report.warnings == [
        "[compute] cpu_dedicated_set: CPUs 6,7 are offline; not reported",
        "NUMA node 1 has no guest CPUs; not reported as a cell"]


def test_cpus_that_do_not_exist_are_named():
    report = host.build_report(fake_host.facts("small_no_numa"),
                               fake_host.settings(shared=frozenset({0, 1, 9})))
    assert report.node["vcpus"] == 2
    assert report.warnings == ["[compute] cpu_shared_set: CPUs 9 are offline or absent; "
                               "not reported"]


def test_no_guest_cpu_at_all_is_refused_locally():
    with pytest.raises(exception.InvalidRequest) as e:
        host.build_report(fake_host.facts("small_no_numa"),
                          fake_host.settings(shared=frozenset({20})))
    assert e.value.field.endswith("vcpus")


# -- configuration errors name the option ----------------------------------------------------

@pytest.mark.parametrize("group, option, value, field", [
    ("compute", "cpu_dedicated_set", "0-x", "compute.cpu_dedicated_set"),
    ("compute", "cpu_shared_set", "3-1", "compute.cpu_shared_set"),
])
def test_bad_cpu_sets(conf_override, group, option, value, field):
    conf_override(option, value, group)
    with pytest.raises(exception.InvalidRequest) as e:
        host.settings_from_conf()
    assert e.value.field == field


def test_overlapping_cpu_sets(conf_override):
    conf_override("cpu_dedicated_set", "0-3", "compute")
    conf_override("cpu_shared_set", "3-5", "compute")
    with pytest.raises(exception.InvalidRequest) as e:
        host.settings_from_conf()
    assert (e.value.field, e.value.reason) == ("compute.cpu_shared_set",
                                               "CPUs 3 are also in cpu_dedicated_set")


def test_cpu_sets_from_config_use_nova_syntax(conf_override):
    conf_override("cpu_dedicated_set", "4-15,^8", "compute")
    conf_override("cpu_shared_set", "0-3", "compute")
    s = host.settings_from_conf()
    assert s.dedicated == frozenset(set(range(4, 16)) - {8})
    assert s.shared == frozenset(range(4))


@pytest.mark.parametrize("spec, field", [
    ("{not json", "pci.device_spec[0]"),
    ('{"vendor_id": "80861"}', "pci.device_spec[0].vendor_id"),
    ('{"address": "00/81"}', "pci.device_spec[0].address"),
    ('{"physical_network": ""}', "pci.device_spec[0].physical_network"),
    ('[{"vendor_id": "8086"}, {"team": ["a"]}]', "pci.device_spec[0][1].team"),
    ('{"vendor_id": "8086", "trusted": "yes\\u001b[2J"}', "pci.device_spec[0].trusted"),
    ('{"vendor_id": "8086", "dev_type": "type-PF"}', "pci.device_spec[0].dev_type"),
    ('{"vendor_id": "8086", "bad key": "x"}', "pci.device_spec[0].bad key"),
    ("[]", None), ("{}", "pci.device_spec[0]"),
])
def test_bad_device_specs(spec, field):
    if field is None:
        assert pci.parse_device_specs([spec]) == []
        return
    with pytest.raises(exception.InvalidRequest) as e:
        pci.parse_device_specs([spec])
    assert e.value.field == field


def test_device_spec_globs():
    spec = pci.parse_device_specs(['{"vendor_id": "8086", "product_id": "15*", '
                                   '"address": "0000:81:0[0-1].*"}'])[0]
    assert spec.matches("0000:81:00.1", "8086", "1572")
    assert spec.matches("0000:81:01.0", "8086", "154c")
    assert not spec.matches("0000:81:02.0", "8086", "154c")
    assert not spec.matches("0000:81:00.0", "10de", "1572")


@pytest.mark.parametrize("option, field", [("procfs_root", "agent.procfs_root"),
                                           ("instances_path", "agent.instances_path")])
def test_unreadable_roots_name_the_option(conf_override, tmp_path, option, field):
    base = f"{fake_host.TREES}/small_no_numa"
    conf_override("sysfs_root", f"{base}/sys", "agent")
    conf_override("procfs_root", f"{base}/proc", "agent")
    conf_override("instances_path", str(tmp_path), "agent")
    conf_override(option, str(tmp_path / "missing"), "agent")
    with pytest.raises(exception.InvalidRequest) as e:
        host.report_from_conf()
    assert e.value.field == field


def test_device_spec_tags_are_reported_and_pass_berths_checks():
    spec = ('{"vendor_id": "8086", "product_id": "154c", "address": "0000:81:02.[01]", '
            '"physical_network": "physnet1", "trusted": true, "vlan": 100}')
    report = host.build_report(fake_host.facts("two_socket_smt"),
                               fake_host.settings(specs=[spec, VF_SPEC]))
    tags = {d["address"]: d.get("tags") for d in report.pci_devices}
    # The first matching spec wins: 02.2 gets the untagged VF_SPEC.
    assert tags == {"0000:81:00.0": None,
                    "0000:81:02.0": {"trusted": "true", "vlan": "100"},
                    "0000:81:02.1": {"trusted": "true", "vlan": "100"},
                    "0000:81:02.2": None}
    from scheduler import fleet
    parsed = fleet.parse_pci_devices(report.pci_devices)
    assert [d.tags for d in parsed] == [(), (("trusted", "true"), ("vlan", "100")),
                                        (("trusted", "true"), ("vlan", "100")), ()]


@pytest.mark.parametrize("text, version", [
    ("QEMU emulator version 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1.4)\nCopyright (c) 2003-2023",
     8002002),
    ("QEMU emulator version 10.0.0", 10000000),
    ("QEMU emulator version 6.2", 6002000),
    ("qemu-kvm: unknown option", None), ("", None), ("version 1.1000.0", None),
])
def test_qemu_version_as_libvirt_gives_it(text, version):
    assert platform.parse_qemu_version(text) == version


def test_detection_takes_the_first_binary_that_exists():
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "QEMU emulator version 9.0.1\n", "")

    found = platform.detect_hypervisor_version(
        platform.qemu_candidates("aarch64"), run=run,
        which=lambda name: "/usr/bin/qemu-kvm" if name == "qemu-kvm" else None)
    assert found == platform.HypervisorVersion(9000001, "/usr/bin/qemu-kvm --version")
    assert calls == [["/usr/bin/qemu-kvm", "--version"]]
    none = platform.detect_hypervisor_version(["qemu-system-x86_64"], run=run,
                                              which=lambda name: None)
    assert none.version is None and none.warning is None

    def hangs(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"])
    slow = platform.detect_hypervisor_version(["qemu"], run=hangs, which=lambda n: "/q")
    assert slow.version is None and "timed out" in slow.warning


def test_a_detected_version_wins_over_the_option():
    facts = host.discover(fake_host.tree("small_no_numa"), "/instances",
                          statvfs=lambda path: fake_host.FakeStatvfs,
                          hypervisor=lambda arch: platform.HypervisorVersion(
                              9002000, f"qemu-system-{arch} --version"))
    report = host.build_report(facts, fake_host.settings("small", hypervisor_version=1))
    assert report.node["hypervisor_version"] == 9002000
    assert report.hypervisor_version_source == "qemu-system-x86_64 --version"
    undetected = dataclasses.replace(facts, hypervisor=platform.HypervisorVersion(None, "x"))
    assert host.build_report(undetected, fake_host.settings(
        "small", hypervisor_version=1)).node["hypervisor_version"] == 1
