"""``berth-agent --once --dry-run`` prints the report and sends nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from scheduler.agent import host
from tests.unit.agent import fake_host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _config(tmp_path, tree="two_socket_smt", extra=""):
    path = tmp_path / "agent.conf"
    base = os.path.join(fake_host.TREES, tree)
    path.write_text(f"""[DEFAULT]
# Nothing listens here: a dry run must not try to send.
transport_url = rabbit://guest:guest@127.0.0.1:9/
[agent]
host = compute-7
sysfs_root = {base}/sys
procfs_root = {base}/proc
instances_path = {tmp_path}
# Tests never depend on this machine's QEMU.
detect_hypervisor_version = false
hypervisor_version = 7002000
[compute]
cpu_dedicated_set = 4-7,12-15
cpu_shared_set = 0-3,8-11,^0,^8
reserved_host_memory_mb = 2048
[pci]
device_spec = {{"vendor_id": "8086", "product_id": "154c", "physical_network": "physnet1"}}
{extra}""")
    return str(path)


def _agent(*args):
    return subprocess.run([sys.executable, "-m", "scheduler.cmd.agent", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_dry_run_json_is_the_report(tmp_path):
    out = _agent("--once", "--dry-run", "--json", "--config-file", _config(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    st = os.statvfs(tmp_path)
    assert data["node"]["local_gb"] == st.f_blocks * st.f_frsize // fake_host.GiB
    expected = host.build_report(
        fake_host.facts("two_socket_smt"),
        fake_host.settings("compute-7", dedicated=frozenset({4, 5, 6, 7, 12, 13, 14, 15}),
                           shared=frozenset({1, 2, 3, 9, 10, 11}),
                           reserved_host_memory_mb=2048, hypervisor_version=7002000,
                           specs=['{"vendor_id": "8086", "product_id": "154c", '
                                  '"physical_network": "physnet1"}']))
    assert data["node"] == dict(expected.node, local_gb=data["node"]["local_gb"])
    assert data["pci_devices"] == expected.pci_devices
    assert data["warnings"] == []


def test_dry_run_table(tmp_path):
    out = _agent("--dry-run", "--config-file", _config(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "host compute-7  node compute-7  (dry run: nothing sent)"
    assert "vcpus 14 (online 0-15, offline -; reserved 0; ratio 4)" in lines
    assert "hypervisor QEMU 7002000 (from [agent] hypervisor_version); " \
           "supported [['x86_64', 'kvm', 'hvm']]" in lines
    cell1 = next(line for line in lines if line.startswith("1 "))
    assert cell1.split()[:5] == ["1", "1", "-", "4-7,12-15", "4,12"]
    assert "2048kB:512(512" in cell1
    vfs = [line.split() for line in lines if line.startswith("0000:81:02.")]
    assert [v[:4] for v in vfs] == [[f"0000:81:02.{i}", "8086:154c", "020000", "type-VF"]
                                    for i in range(3)]


def test_bad_option_exits_2_naming_it(tmp_path):
    # A later [compute] section overrides the first: CPU 4 is now in both sets.
    out = _agent("--dry-run", "--config-file",
                 _config(tmp_path, extra="[compute]\ncpu_shared_set = 4\n"))
    assert out.returncode == 2
    assert out.stdout == ""
    assert "compute.cpu_shared_set" in out.stderr and "also in cpu_dedicated_set" in out.stderr


def test_once_without_a_broker_fails_cleanly(tmp_path):
    out = _agent("--once", "--config-file", _config(tmp_path))
    assert out.returncode == 1
    assert out.stderr.startswith("berth-agent: cannot reach the message broker at "
                                 "127.0.0.1:9"), out.stderr
    assert "Traceback" not in out.stderr


def _fake_qemu(tmp_path, output="QEMU emulator version 9.1.2 (Debian 1:9.1.2+ds-1)",
               rc=0):
    qemu = tmp_path / "qemu-system-x86_64"
    qemu.write_text(f"#!/bin/sh\necho '{output}'\nexit {rc}\n")
    qemu.chmod(0o755)
    return qemu


def test_dry_run_detects_qemus_version(tmp_path):
    qemu = _fake_qemu(tmp_path)
    out = _agent("--dry-run", "--config-file", _config(
        tmp_path, extra=f"[agent]\ndetect_hypervisor_version = true\nqemu_binary = {qemu}\n"))
    assert out.returncode == 0, out.stderr
    assert f"hypervisor QEMU 9001002 (from {qemu} --version); " \
           f"supported [['x86_64', 'kvm', 'hvm']]" in out.stdout.splitlines()


def test_a_qemu_without_a_version_falls_back_to_the_option(tmp_path):
    qemu = _fake_qemu(tmp_path, output="qemu: cannot open /dev/kvm", rc=1)
    out = _agent("--dry-run", "--json", "--config-file", _config(
        tmp_path, extra=f"[agent]\ndetect_hypervisor_version = true\nqemu_binary = {qemu}\n"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["node"]["hypervisor_version"] == 7002000
    assert data["warnings"] == [f"hypervisor version: {qemu} --version printed no version "
                                f"(exit 1: qemu: cannot open /dev/kvm); using [agent] "
                                f"hypervisor_version"]


# -- the ledger: traits, vGPUs, provider config files ----------------------------------------

GPU_CONFIG = fake_host.provider_yaml()


def _gpu_config(tmp_path, provider_yaml=GPU_CONFIG, extra=""):
    configs = tmp_path / "provider_config"
    configs.mkdir(exist_ok=True)
    (configs / "rack.yaml").write_text(provider_yaml)
    return _config(tmp_path, tree="gpu_host", extra=f"""[agent]
provider_config_location = {configs}
enabled_vgpu_types = nvidia-223,i915-GVTg_V5_8
[vgpu_nvidia-223]
traits = CUSTOM_T4
[vgpu_nvidia-35]
device_addresses = 0000:3b:00.0
[compute]
cpu_dedicated_set =
cpu_shared_set = 1-3,5-7
{extra}""")


def test_dry_run_shows_the_ledger(tmp_path):
    out = _agent("--dry-run", "--config-file", _gpu_config(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    traits = next(line for line in lines if line.startswith("traits ")).split()[1:]
    assert traits[:3] == ["CUSTOM_RACK_A", "HW_CPU_HYPERTHREADING", "HW_CPU_X86_ABM"]
    assert {"HW_CPU_X86_AVX512F", "HW_CPU_X86_AESNI", "HW_CPU_X86_SSE3"} <= set(traits)
    assert f"inventories (besides the fields above) CUSTOM_LICENSED_WINDOWS:8 (from " \
           f"{tmp_path}/provider_config/rack.yaml: providers[0])" in lines
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("compute-7_pci")}
    assert sorted(rows) == ["compute-7_pci_0000_00_02_0", "compute-7_pci_0000_3b_00_0",
                            "compute-7_pci_0000_5e_00_0"]
    assert rows["compute-7_pci_0000_5e_00_0"][2:5] == ["VGPU:8", "CUSTOM_T4",
                                                      "CUSTOM_VGPU_NVIDIA_223"]
    assert " ".join(rows["compute-7_pci_0000_5e_00_0"][5:]) == \
        "nvidia-223 (GRID T4-2B): 6 available + 2 created"
    assert rows["compute-7_pci_0000_00_02_0"][2:4] == ["VGPU:4", "CUSTOM_VGPU_I915_GVTG_V5_8"]
    assert "warning: [vgpu_nvidia-35]: vGPU type nvidia-35 is not in [agent] " \
           "enabled_vgpu_types; section ignored" in lines


def test_dry_run_json_has_the_ledger(tmp_path):
    out = _agent("--dry-run", "--json", "--config-file", _gpu_config(tmp_path))
    assert out.returncode == 0, out.stderr
    node = json.loads(out.stdout)["node"]
    assert "CUSTOM_RACK_A" in node["traits"]
    assert node["inventories"]["CUSTOM_LICENSED_WINDOWS"]["total"] == 8
    assert [(p["name"], p["inventories"], p["traits"]) for p in node["providers"]] == [
        ("compute-7_pci_0000_00_02_0", {"VGPU": {"total": 4}}, ["CUSTOM_VGPU_I915_GVTG_V5_8"]),
        ("compute-7_pci_0000_3b_00_0", {"VGPU": {"total": 8}},
         ["CUSTOM_T4", "CUSTOM_VGPU_NVIDIA_223"]),
        ("compute-7_pci_0000_5e_00_0", {"VGPU": {"total": 8}},
         ["CUSTOM_T4", "CUSTOM_VGPU_NVIDIA_223"])]


def test_a_bad_provider_config_file_stops_the_agent_before_it_reports(tmp_path):
    """Not a dry run, not --once: the agent would report forever; a bad file stops it
    at once, naming the file and the field (the broker is never asked)."""
    bad = GPU_CONFIG.replace("CUSTOM_LICENSED_WINDOWS", "VCPU")
    out = _agent("--config-file", _gpu_config(tmp_path, bad))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr == (
        f"berth-agent: provider config {tmp_path}/provider_config/rack.yaml: "
        f"providers[0].inventories.additional[0].VCPU: VCPU is a standard resource class: "
        f"only CUSTOM_ resource classes may be added here (the agent reports the standard "
        f"ones)\n")


def test_a_bad_vgpu_option_stops_the_agent(tmp_path):
    out = _agent("--config-file", _gpu_config(
        tmp_path, extra="[vgpu_i915-GVTg_V5_8]\ndevice_addresses = 0000:3b:00.0\n"
                        "[vgpu_nvidia-223]\ndevice_addresses = 0000:5e:00.0,0000:3b:00.0\n"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "vgpu_i915-GVTg_V5_8.device_addresses[0]" in out.stderr
    assert "also listed by [vgpu_nvidia-223]" in out.stderr
