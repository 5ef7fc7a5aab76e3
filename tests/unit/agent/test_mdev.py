"""vGPUs from the mdev bus: discovery on the fake trees, the operator's choice of
types, and the child providers they become."""
from __future__ import annotations

import os
import shutil

import pytest
from oslo_config import cfg

from scheduler import exception
from scheduler.agent import mdev
from tests.unit.agent import fake_host

T4_A, T4_B, IGPU = "0000:3b:00.0", "0000:5e:00.0", "0000:00:02.0"
CREATED = ("4b20d080-1b54-4048-85b3-a6a62d165c01", "c1b6ac3a-8b9a-4b38-9c38-0e1b3f2a7d02")


def _bus(name="gpu_host", root=fake_host.TREES):
    return mdev.scan_mdev_bus(fake_host.tree(name, root))


def _conf(tmp_path, text: str) -> cfg.ConfigOpts:
    path = tmp_path / "berth.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    conf.register_opts(mdev.vgpu_opts, group="agent")
    conf(["--config-file", str(path)], default_config_files=[])
    return conf


def _types(tmp_path, text: str) -> tuple[mdev.VgpuType, ...]:
    return mdev.vgpu_types_from_conf(_conf(tmp_path, text))


def _chosen(gpus) -> dict[str, tuple[str, int]]:
    return {g.address: (g.mdev_type.type, g.mdev_type.total) for g in gpus}


# -- discovery -------------------------------------------------------------------------------

def test_gpu_host_mdev_bus():
    parents = {p.address: p for p in _bus()}
    assert sorted(parents) == [IGPU, T4_A, T4_B]       # the SATA controller is not on it
    t4 = parents[T4_A]
    assert [(t.type, t.name, t.available, t.device_api, t.created) for t in t4.types] == [
        ("nvidia-222", "GRID T4-1B", 16, "vfio-pci", ()),
        ("nvidia-223", "GRID T4-2B", 8, "vfio-pci", ()),
        ("nvidia-230", "GRID T4-4Q", 4, "vfio-pci", ())]
    # The second T4 already holds two 2B vGPUs: they count towards that type's total.
    split = parents[T4_B].type("nvidia-223")
    assert (split.available, split.created, split.total) == (6, CREATED, 8)
    assert parents[T4_B].type("nvidia-222").total == 0
    assert [t.type for t in parents[IGPU].types] == ["i915-GVTg_V5_4", "i915-GVTg_V5_8"]


def test_hosts_without_an_mdev_bus_have_none():
    assert _bus("two_socket_smt") == () and _bus("small_no_numa") == ()


def test_only_mdev_uuids_count_as_created(tmp_path):
    root = fake_host.copy_tree("gpu_host", str(tmp_path))
    devices = os.path.join(root, "sys/bus/pci/devices", T4_B,
                           "mdev_supported_types/nvidia-223/devices")
    # The fake tree's placeholders and anything else that is not an mdev's uuid.
    open(os.path.join(devices, "not-an-mdev"), "w").close()
    assert {p.address: p for p in _bus(root=str(tmp_path))}[T4_B].type(
        "nvidia-223").created == CREATED
    shutil.rmtree(devices)
    os.makedirs(devices)
    assert {p.address: p for p in _bus(root=str(tmp_path))}[T4_B].type(
        "nvidia-223").total == 6


# -- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mdev_type, trait", [
    ("nvidia-35", "CUSTOM_VGPU_NVIDIA_35"), ("i915-GVTg_V5_4", "CUSTOM_VGPU_I915_GVTG_V5_4"),
    ("mtty.2", "CUSTOM_VGPU_MTTY_2")])
def test_type_traits(mdev_type, trait):
    assert mdev.type_trait(mdev_type) == trait


def test_provider_names_are_novas_and_uuids_stable():
    name = mdev.provider_name("compute-1", "0000:3b:00.0")
    assert name == "compute-1_pci_0000_3b_00_0"
    assert mdev.provider_uuid(name) == mdev.provider_uuid("compute-1_pci_0000_3b_00_0")
    assert mdev.provider_uuid(name) != mdev.provider_uuid("compute-2_pci_0000_3b_00_0")


# -- which GPU exposes which type ------------------------------------------------------------

def test_one_type_goes_to_every_gpu_that_supports_it(tmp_path):
    types = _types(tmp_path, "[agent]\nenabled_vgpu_types = nvidia-223\n")
    gpus, warnings = mdev.choose_types("c1", _bus(), types)
    assert _chosen(gpus) == {T4_A: ("nvidia-223", 8), T4_B: ("nvidia-223", 8)}
    assert warnings == []
    assert gpus[0].to_report() == {
        "name": "c1_pci_0000_3b_00_0", "uuid": mdev.provider_uuid("c1_pci_0000_3b_00_0"),
        "traits": ["CUSTOM_VGPU_NVIDIA_223"], "inventories": {"VGPU": {"total": 8}}}


def test_a_gpu_supporting_several_types_exposes_the_first_enabled(tmp_path):
    types = _types(tmp_path, "[agent]\nenabled_vgpu_types = nvidia-230,nvidia-222,"
                             "i915-GVTg_V5_8\n")
    gpus, warnings = mdev.choose_types("c1", _bus(), types)
    # The split T4 supports 4Q too, but offers none of it now (its 2B vGPUs are made).
    assert _chosen(gpus) == {T4_A: ("nvidia-230", 4), T4_B: ("nvidia-230", 0),
                             IGPU: ("i915-GVTg_V5_8", 4)}
    assert warnings == [
        f"GPU {T4_B} holds 2 mdev(s) of type nvidia-223 but exposes nvidia-230: their "
        f"guests are not counted",
        "vGPU type nvidia-222: no GPU on the mdev bus exposes it"]
    # A GPU with nothing to hand out is still a provider, without an inventory.
    assert "inventories" not in gpus[2].to_report()


def test_device_addresses_map_types_to_gpus(tmp_path):
    types = _types(tmp_path, f"""[agent]
enabled_vgpu_types = nvidia-222,nvidia-223
[vgpu_nvidia-222]
device_addresses = {T4_A}
traits = CUSTOM_T4_SMALL,HW_GPU_API_VULKAN
[vgpu_nvidia-223]
device_addresses = {T4_B.upper()}
""")
    assert types[0] == mdev.VgpuType("nvidia-222", (T4_A,),
                                     frozenset({"CUSTOM_T4_SMALL", "HW_GPU_API_VULKAN"}))
    gpus, warnings = mdev.choose_types("c1", _bus(), types)
    # The Intel GPU supports neither type: not reported.
    assert _chosen(gpus) == {T4_A: ("nvidia-222", 16), T4_B: ("nvidia-223", 8)}
    assert gpus[0].traits == {"CUSTOM_VGPU_NVIDIA_222", "CUSTOM_T4_SMALL", "HW_GPU_API_VULKAN"}
    assert gpus[1].traits == {"CUSTOM_VGPU_NVIDIA_223"}
    assert warnings == []


def test_listed_gpus_are_only_the_listing_types(tmp_path):
    """A type that lists addresses keeps off the other GPUs; a type that lists none
    takes the GPUs no type lists."""
    types = _types(tmp_path, f"""[agent]
enabled_vgpu_types = nvidia-222,nvidia-223
[vgpu_nvidia-222]
device_addresses = {T4_B}
""")
    gpus, warnings = mdev.choose_types("c1", _bus(), types)
    assert _chosen(gpus) == {T4_A: ("nvidia-223", 8), T4_B: ("nvidia-222", 0)}
    assert warnings == [f"GPU {T4_B} holds 2 mdev(s) of type nvidia-223 but exposes "
                        f"nvidia-222: their guests are not counted"]


def test_listed_gpus_that_cannot_expose_their_type_are_named(tmp_path):
    types = _types(tmp_path, f"""[agent]
enabled_vgpu_types = nvidia-222,i915-GVTg_V5_4
[vgpu_nvidia-222]
device_addresses = {IGPU},0000:af:00.0
""")
    gpus, warnings = mdev.choose_types("c1", _bus(), types)
    # The Intel GPU is listed (wrongly) by nvidia-222: it does not fall back to its type.
    assert _chosen(gpus) == {}
    assert warnings == [
        f"GPU {IGPU} does not support vGPU type nvidia-222 (it supports: i915-GVTg_V5_4, "
        f"i915-GVTg_V5_8); not reported",
        "[vgpu_nvidia-222] device_addresses: 0000:af:00.0 is not on the mdev bus; "
        "not reported",
        "vGPU type i915-GVTg_V5_4: no GPU on the mdev bus exposes it"]


def test_no_type_enabled_no_gpu(tmp_path):
    assert mdev.choose_types("c1", _bus(), _types(tmp_path, "")) == ([], [])


@pytest.mark.parametrize("text, field, reason", [
    ("[agent]\nenabled_vgpu_types = nvidia 35\n", "agent.enabled_vgpu_types[0]",
     "not an mdev type name"),
    ("[agent]\nenabled_vgpu_types = a,../x\n", "agent.enabled_vgpu_types[1]",
     "not an mdev type name"),
    ("[agent]\nenabled_vgpu_types = a,a\n", "agent.enabled_vgpu_types[1]", "listed twice"),
    ("[agent]\nenabled_vgpu_types = a\n[vgpu_a]\ndevice_addresses = 3b:00.0\n",
     "vgpu_a.device_addresses[0]", "not a PCI address"),
    (f"[agent]\nenabled_vgpu_types = a,b\n[vgpu_a]\ndevice_addresses = {T4_A}\n"
     f"[vgpu_b]\ndevice_addresses = {T4_B},{T4_A}\n", "vgpu_b.device_addresses[1]",
     "also listed by [vgpu_a]"),
    ("[agent]\nenabled_vgpu_types = a\n[vgpu_a]\ntraits = CUSTOM_OK,custom_low\n",
     "vgpu_a.traits[1]", "not a trait"),
])
def test_bad_vgpu_options_name_the_option(tmp_path, text, field, reason):
    with pytest.raises(exception.InvalidRequest) as e:
        _types(tmp_path, text)
    assert e.value.field == field and reason in e.value.reason


def test_sections_of_types_not_enabled_are_named(tmp_path):
    conf = _conf(tmp_path, "[agent]\nenabled_vgpu_types = a\n[vgpu_a]\n[vgpu_nvidia-35]\n"
                           "device_addresses = 0000:3b:00.0\n[agent_extra]\n")
    assert mdev.unused_sections(conf, mdev.vgpu_types_from_conf(conf)) == ["vgpu_nvidia-35"]
