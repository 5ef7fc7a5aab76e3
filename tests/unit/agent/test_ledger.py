"""What berth-agent reports as the node's ledger: traits, inventories and child
providers, and that Berth's own validation takes them as sent."""
from __future__ import annotations

import pytest
import yaml

from db.inventory import Inventory
from scheduler import exception, fleet, host_traits
from scheduler.agent import host, mdev
from scheduler.agent import provider_config as pc
from tests.unit.agent import fake_host

#: gpu_host's flags as /proc/cpuinfo spells them (aes, pni, pclmulqdq, fma, bmi1,
#: sha_ni, avx512_vnni...), as traits.
GPU_HOST_CPU_TRAITS = [
    "HW_CPU_X86_ABM", "HW_CPU_X86_AESNI", "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2",
    "HW_CPU_X86_AVX512BITALG", "HW_CPU_X86_AVX512BW", "HW_CPU_X86_AVX512CD",
    "HW_CPU_X86_AVX512DQ", "HW_CPU_X86_AVX512F", "HW_CPU_X86_AVX512GFNI",
    "HW_CPU_X86_AVX512IFMA", "HW_CPU_X86_AVX512VAES", "HW_CPU_X86_AVX512VBMI",
    "HW_CPU_X86_AVX512VBMI2", "HW_CPU_X86_AVX512VL", "HW_CPU_X86_AVX512VNNI",
    "HW_CPU_X86_AVX512VPCLMULQDQ", "HW_CPU_X86_AVX512VPOPCNTDQ", "HW_CPU_X86_BMI",
    "HW_CPU_X86_BMI2", "HW_CPU_X86_CLMUL", "HW_CPU_X86_F16C", "HW_CPU_X86_FMA3",
    "HW_CPU_X86_INTEL_VMX", "HW_CPU_X86_MMX", "HW_CPU_X86_PDPE1GB", "HW_CPU_X86_SHA",
    "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2", "HW_CPU_X86_SSE3", "HW_CPU_X86_SSE41",
    "HW_CPU_X86_SSE42", "HW_CPU_X86_SSSE3", "HW_CPU_X86_VMX"]

PROVIDER_YAML = fake_host.provider_yaml(
    windows={"total": 8, "reserved": 1, "allocation_ratio": 2.0}, gpu="gpu-1_pci_0000_5e_00_0",
    gpu_adds={"inventories": {"additional": [{"CUSTOM_GPU_MEMORY_GB": {"total": 16}}]},
              "traits": {"additional": ["CUSTOM_LOW_LATENCY"]}})


def _settings(tmp_path=None, provider_yaml: str | None = None,
              vgpu_types=(), **kw) -> host.Settings:
    configs = pc.ProviderConfigs()
    if provider_yaml is not None:
        (tmp_path / "gpu.yaml").write_text(provider_yaml)
        configs = pc.load_directory(str(tmp_path))
    return fake_host.settings("gpu-1", vgpu_types=tuple(vgpu_types),
                              provider_configs=configs, config_warnings=configs.warnings,
                              **kw)


def test_cpu_flags_and_smt_are_the_nodes_traits():
    report = host.build_report(fake_host.facts("gpu_host"), _settings())
    assert report.node["traits"] == ["HW_CPU_HYPERTHREADING"] + GPU_HOST_CPU_TRAITS
    assert "inventories" not in report.node and "providers" not in report.node
    # Berth keeps them as sent.
    assert fleet.parse_host(report.node).traits == set(report.node["traits"])


def test_smt_is_the_hosts_whichever_cpus_the_guests_get():
    """One thread of each core for the guests: the cells list no siblings (Berth
    could not tell), but the host does run two threads per core."""
    report = host.build_report(fake_host.facts("gpu_host"),
                               _settings(shared=frozenset({0, 1, 2, 3})))
    cell = report.node["numa_topology"]["cells"][0]
    assert cell["cpuset"] == [0, 1, 2, 3] and cell["siblings"] == []
    assert host_traits.HYPERTHREADING not in host_traits.derived(
        report.node["cpu_info"], report.node["numa_topology"])
    assert host_traits.HYPERTHREADING in report.node["traits"]
    assert host_traits.HYPERTHREADING in fleet.parse_host(report.node).traits
    # Without SMT on the host: no trait.
    small = host.build_report(fake_host.facts("small_no_numa"), _settings())
    assert host_traits.HYPERTHREADING not in small.node["traits"]


def test_vgpus_and_provider_config_in_the_report(tmp_path):
    t4 = mdev.VgpuType("nvidia-223", traits=frozenset({"CUSTOM_T4"}))
    igpu = mdev.VgpuType("i915-GVTg_V5_4", addresses=("0000:00:02.0",))
    report = host.build_report(fake_host.facts("gpu_host"),
                               _settings(tmp_path, PROVIDER_YAML, [t4, igpu]))
    node = report.node
    assert node["traits"] == sorted(["CUSTOM_RACK_A", "HW_CPU_HYPERTHREADING",
                                     *GPU_HOST_CPU_TRAITS])
    assert node["inventories"] == {"CUSTOM_LICENSED_WINDOWS": {
        "total": 8, "reserved": 1, "min_unit": 1, "max_unit": 8, "step_size": 1,
        "allocation_ratio": 2.0}}

    def gpu(address):
        name = f"gpu-1_pci_{address.replace(':', '_').replace('.', '_')}"
        return {"name": name, "uuid": mdev.provider_uuid(name)}
    assert node["providers"] == [
        dict(gpu("0000:00:02.0"), traits=["CUSTOM_VGPU_I915_GVTG_V5_4"],
             inventories={"VGPU": {"total": 2}}),
        dict(gpu("0000:3b:00.0"), traits=["CUSTOM_T4", "CUSTOM_VGPU_NVIDIA_223"],
             inventories={"VGPU": {"total": 8}}),
        # 6 available + the 2 already created; the operator's file adds to it.
        dict(gpu("0000:5e:00.0"),
             traits=["CUSTOM_LOW_LATENCY", "CUSTOM_T4", "CUSTOM_VGPU_NVIDIA_223"],
             inventories={"VGPU": {"total": 8},
                          "CUSTOM_GPU_MEMORY_GB": Inventory(16, max_unit=16).to_primitive()})]
    assert report.warnings == []
    assert [g.address for g in report.gpus] == ["0000:00:02.0", "0000:3b:00.0",
                                                "0000:5e:00.0"]
    assert sorted(report.configured) == ["gpu-1", "gpu-1_pci_0000_5e_00_0"]

    # What Berth makes of it: the same ledger.
    record = fleet.parse_host(node)
    assert record.inventories["CUSTOM_LICENSED_WINDOWS"] == Inventory(
        total=8, reserved=1, max_unit=8, allocation_ratio=2.0)
    assert {"VCPU", "MEMORY_MB", "DISK_GB"} <= set(record.inventories)
    by_name = {p.name: p for p in record.providers}
    split = by_name["gpu-1_pci_0000_5e_00_0"]
    assert split.parent is None and split.uuid == mdev.provider_uuid(split.name)
    assert split.inventories == {"VGPU": Inventory(8, max_unit=8),
                                 "CUSTOM_GPU_MEMORY_GB": Inventory(16, max_unit=16)}
    assert split.traits == {"CUSTOM_LOW_LATENCY", "CUSTOM_T4", "CUSTOM_VGPU_NVIDIA_223"}


def test_a_gpu_given_whole_and_as_vgpus_is_named():
    report = host.build_report(
        fake_host.facts("gpu_host"),
        _settings(vgpu_types=[mdev.VgpuType("nvidia-222")],
                  specs=['{"vendor_id": "10de", "product_id": "1eb8"}']))
    assert [d["address"] for d in report.pci_devices] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert report.warnings[1:] == [
        f"GPU {a} exposes vGPUs and is also a passthrough device ([pci] device_spec): a "
        f"guest given it whole would use the vGPUs' capacity"
        for a in ("0000:3b:00.0", "0000:5e:00.0")]


def test_configuration_warnings_are_the_reports(tmp_path):
    doc = yaml.safe_load(PROVIDER_YAML)
    doc["providers"].append({"identification": {"name": "gpu-1_pci_0000_af_00_0"},
                             "traits": {"additional": ["CUSTOM_X"]}})
    text = yaml.safe_dump(doc)
    report = host.build_report(fake_host.facts("gpu_host"), _settings(tmp_path, text))
    # No vGPU type enabled: the GPU the file names is no provider of this node.
    assert report.warnings == [
        f"{tmp_path}/gpu.yaml: providers[1]: node gpu-1 has no provider with name "
        f"gpu-1_pci_0000_5e_00_0; ignored",
        f"{tmp_path}/gpu.yaml: providers[2]: node gpu-1 has no provider with name "
        f"gpu-1_pci_0000_af_00_0; ignored"]
    assert report.node["traits"][0] == "CUSTOM_RACK_A"


# -- from the configuration ------------------------------------------------------------------

def _use_tree(conf_override, tmp_path, name="gpu_host"):
    base = f"{fake_host.TREES}/{name}"
    conf_override("sysfs_root", f"{base}/sys", "agent")
    conf_override("procfs_root", f"{base}/proc", "agent")
    conf_override("instances_path", str(tmp_path), "agent")
    conf_override("host", "gpu-1", "agent")


def test_report_from_conf_reads_vgpu_types_and_provider_configs(conf_override, tmp_path):
    _use_tree(conf_override, tmp_path)
    configs = tmp_path / "provider_config"
    configs.mkdir()
    (configs / "gpu.yaml").write_text(PROVIDER_YAML)
    conf_override("provider_config_location", str(configs), "agent")
    conf_override("enabled_vgpu_types", ["nvidia-223"], "agent")
    report = host.report_from_conf()
    assert [(p["name"], p["inventories"]["VGPU"]["total"]) for p in report.node["providers"]] \
        == [("gpu-1_pci_0000_3b_00_0", 8), ("gpu-1_pci_0000_5e_00_0", 8)]
    assert "CUSTOM_LICENSED_WINDOWS" in report.node["inventories"]
    # Settings read once (as the agent does at start) are used as given.
    settings = host.settings_from_conf()
    (configs / "gpu.yaml").write_text("not: [yaml")
    assert host.report_from_conf(settings=settings).node == report.node
    with pytest.raises(pc.ProviderConfigError):
        host.report_from_conf()


def test_a_bad_provider_config_stops_the_settings(conf_override, tmp_path):
    (tmp_path / "a.yaml").write_text("meta: {schema_version: '1.0'}\nproviders:\n"
                                     "  - identification: {name: gpu-1}\n"
                                     "    traits: {additional: [HW_CPU_X86_AVX2]}\n")
    conf_override("provider_config_location", str(tmp_path), "agent")
    with pytest.raises(exception.InvalidRequest) as e:
        host.settings_from_conf()
    assert e.value.field == f"{tmp_path}/a.yaml: providers[0].traits.additional[0]"
    assert "standard trait" in e.value.reason
