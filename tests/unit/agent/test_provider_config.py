"""Provider config files (Nova's provider.yaml format): every rule of the format,
and how the entries land on the node's providers."""
from __future__ import annotations

import textwrap

import pytest

from db.inventory import Inventory
from scheduler.agent import provider_config as pc

ROOT_UUID = "4c3b1c9e-6f0e-4f5e-9d55-0d9b6a3c1f00"
GPU_UUID = "8d2e7b5a-21c4-4c9b-a0e6-3f1b2d4c5e6f"

EXAMPLE = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_LICENSED_WINDOWS:
            total: 8
            reserved: 1
            min_unit: 1
            max_unit: 4
            step_size: 1
            allocation_ratio: 2.0
        - CUSTOM_BAREMETAL_GOLD: {total: 1}
    traits:
      additional: [CUSTOM_RACK_A, CUSTOM_GOLD]
  - identification: {name: c1_pci_0000_3b_00_0}
    traits:
      additional: [CUSTOM_LOW_LATENCY]
"""


def _write(directory, name: str, text: str) -> str:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _load(tmp_path, text: str, name: str = "a.yaml") -> pc.ProviderConfigs:
    _write(tmp_path, name, text)
    return pc.load_directory(str(tmp_path))


def _refused(tmp_path, text: str, name: str = "a.yaml") -> pc.ProviderConfigError:
    path = _write(tmp_path, name, text)
    with pytest.raises(pc.ProviderConfigError) as e:
        pc.load_directory(str(tmp_path))
    assert e.value.field.startswith(f"{path}: ")
    assert e.value.message.startswith(f"provider config {path}: ")
    return e.value


def _field(error: pc.ProviderConfigError) -> str:
    return error.field.split(": ", 1)[1]


def _doc(providers: str, version: str = "'1.0'") -> str:
    return f"meta:\n  schema_version: {version}\nproviders:\n{textwrap.indent(providers, '  ')}"


# -- a good file -----------------------------------------------------------------------------

def test_the_example_file(tmp_path):
    path = _write(tmp_path, "gold.yaml", EXAMPLE)
    configs = pc.load_directory(str(tmp_path))
    assert configs.warnings == ()
    root, gpu = configs.entries
    assert (root.source, root.index, root.uuid, root.name) == (path, 0, pc.COMPUTE_NODE, None)
    assert root.inventories == {
        "CUSTOM_LICENSED_WINDOWS": Inventory(total=8, reserved=1, min_unit=1, max_unit=4,
                                             step_size=1, allocation_ratio=2.0),
        # Fields left out: Placement's defaults, max_unit the total.
        "CUSTOM_BAREMETAL_GOLD": Inventory(total=1, max_unit=1)}
    assert root.traits == {"CUSTOM_RACK_A", "CUSTOM_GOLD"}
    assert (gpu.name, gpu.uuid, gpu.inventories, gpu.traits) == (
        "c1_pci_0000_3b_00_0", None, {}, {"CUSTOM_LOW_LATENCY"})


def test_files_are_read_in_name_order_and_only_yaml(tmp_path):
    _write(tmp_path, "b.yaml", _doc("- identification: {name: b}\n"
                                    "  traits: {additional: [CUSTOM_B]}\n"))
    _write(tmp_path, "a.yaml", _doc("- identification: {name: a}\n"
                                    "  traits: {additional: [CUSTOM_A]}\n"))
    _write(tmp_path, "c.yml", "not: [read")
    _write(tmp_path, "README", "not read either")
    assert [e.name for e in pc.load_directory(str(tmp_path)).entries] == ["a", "b"]


def test_a_missing_directory_has_no_configs(tmp_path):
    assert pc.load_directory(str(tmp_path / "none")) == pc.ProviderConfigs()


def test_a_file_where_the_directory_should_be(tmp_path):
    path = _write(tmp_path, "x.yaml", EXAMPLE)
    with pytest.raises(pc.exception.InvalidRequest) as e:
        pc.load_directory(path)
    assert e.value.field == "agent.provider_config_location"
    assert "not a directory" in e.value.reason


def test_a_uuid_is_normalised(tmp_path):
    configs = _load(tmp_path, _doc(f"- identification: {{uuid: {GPU_UUID.upper()}}}\n"
                                   f"  traits: {{additional: [CUSTOM_X]}}\n"))
    assert configs.entries[0].uuid == GPU_UUID


def test_meta_may_hold_more_than_the_version(tmp_path):
    configs = _load(tmp_path, "meta: {schema_version: '1.0', owner: ops}\nproviders: []\n")
    assert configs == pc.ProviderConfigs()


def test_a_file_without_providers_is_fine(tmp_path):
    assert _load(tmp_path, "meta: {schema_version: '1.0'}\n") == pc.ProviderConfigs()


# -- what is refused (each names the file and the field) -------------------------------------

@pytest.mark.parametrize("text, field, reason", [
    ("", "document", "empty"),
    ("- meta\n", "document", "expected a mapping"),
    ("providers: []\n", "meta", "required"),
    ("meta: '1.0'\n", "meta", "expected a mapping"),
    ("meta: {}\n", "meta.schema_version", "required"),
    # YAML reads an unquoted 1.0 as a number: Nova refuses it too.
    ("meta: {schema_version: 1.0}\n", "meta.schema_version", "quote it"),
    ("meta: {schema_version: '1'}\n", "meta.schema_version", "<major>.<minor>"),
    ("meta: {schema_version: '2.0'}\n", "meta.schema_version", "major version 2"),
    ("meta: {schema_version: '1.0'}\nprovider: []\n", "provider", "unknown key"),
    ("meta: {schema_version: '1.0'}\n__source_file: x\n", "__source_file", "unknown key"),
    ("meta: {schema_version: '1.0'}\nproviders: {a: 1}\n", "providers", "expected a list"),
    ("meta: {schema_version: '1.0'}\nproviders:\n", "providers", "expected a list"),
    (_doc("- name: x\n"), "providers[0].name", "unknown key"),
    (_doc("- traits: {additional: [CUSTOM_X]}\n"), "providers[0].identification",
     "required"),
    (_doc("- identification: {}\n"), "providers[0].identification", "exactly one of"),
    (_doc("- identification: {uuid: $COMPUTE_NODE, name: x}\n"),
     "providers[0].identification", "exactly one of"),
    (_doc("- identification: {hostname: x}\n"), "providers[0].identification",
     "exactly one of"),
    (_doc("- identification: {uuid: not-a-uuid}\n"), "providers[0].identification.uuid",
     "expected a UUID or $COMPUTE_NODE"),
    (_doc("- identification: {uuid: COMPUTE_NODE}\n"), "providers[0].identification.uuid",
     "expected a UUID"),
    (_doc("- identification: {name: ''}\n"), "providers[0].identification.name",
     "1 to 200 characters"),
    (_doc(f"- identification: {{name: {'x' * 201}}}\n"), "providers[0].identification.name",
     "1 to 200 characters"),
    (_doc("- identification: {name: 12}\n"), "providers[0].identification.name",
     "1 to 200 characters"),
    (_doc("- identification: {name: a}\n  inventories: [CUSTOM_X]\n"),
     "providers[0].inventories", "expected a mapping"),
    (_doc("- identification: {name: a}\n  inventories: {added: []}\n"),
     "providers[0].inventories.added", "unknown key"),
    (_doc("- identification: {name: a}\n  inventories: {additional: {CUSTOM_X: {total: 1}}}\n"),
     "providers[0].inventories.additional", "expected a list"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [CUSTOM_X]}\n"),
     "providers[0].inventories.additional[0]", "expected a mapping"),
    # Standard classes are the agent's (and the driver's in Nova): never added here.
    (_doc("- identification: {uuid: $COMPUTE_NODE}\n"
          "  inventories: {additional: [{VCPU: {total: 4}}]}\n"),
     "providers[0].inventories.additional[0].VCPU", "VCPU is a standard resource class"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [{VGPU: {total: 4}}]}\n"),
     "providers[0].inventories.additional[0].VGPU", "only CUSTOM_ resource classes"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [{custom_x: {total: 4}}]}\n"),
     "providers[0].inventories.additional[0].custom_x", "not a custom resource class"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [{MY_CLASS: {total: 4}}]}\n"),
     "providers[0].inventories.additional[0].MY_CLASS", "not a custom resource class"),
    (_doc("- identification: {name: a}\n  inventories:\n    additional:\n"
          "      - CUSTOM_X: {total: 1}\n      - CUSTOM_X: {total: 2}\n"),
     "providers[0].inventories.additional[1].CUSTOM_X", "given twice"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [{CUSTOM_X: 4}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X", "expected a mapping with total"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [{CUSTOM_X: {}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.total", "required"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: 4, used: 1}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.used", "unknown key"),
    (_doc("- identification: {name: a}\n  inventories: {additional: [{CUSTOM_X: {total: 0}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.total", "at least 1"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: '4'}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.total", "expected an integer"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: 4, reserved: 5}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.reserved", "more than total"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: 4, step_size: 0}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.step_size", "between 1 and"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: 4, min_unit: 3, max_unit: 2}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.min_unit", "more than max_unit"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: 4, allocation_ratio: 0}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.allocation_ratio", "above 0"),
    (_doc("- identification: {name: a}\n"
          "  inventories: {additional: [{CUSTOM_X: {total: true}}]}\n"),
     "providers[0].inventories.additional[0].CUSTOM_X.total", "expected an integer"),
    (_doc("- identification: {name: a}\n  traits: [CUSTOM_X]\n"),
     "providers[0].traits", "expected a mapping"),
    (_doc("- identification: {name: a}\n  traits: {additional: CUSTOM_X}\n"),
     "providers[0].traits.additional", "expected a list"),
    (_doc("- identification: {name: a}\n  traits: {additional: [CUSTOM_X, HW_CPU_X86_AVX2]}\n"),
     "providers[0].traits.additional[1]", "HW_CPU_X86_AVX2 is a standard trait"),
    (_doc("- identification: {name: a}\n  traits: {additional: [CUSTOM_rack]}\n"),
     "providers[0].traits.additional[0]", "not a custom trait"),
    (_doc("- identification: {name: a}\n  traits: {additional: [RACK_A]}\n"),
     "providers[0].traits.additional[0]", "not a custom trait"),
    (_doc("- identification: {name: a}\n  traits: {additional: [[CUSTOM_X]]}\n"),
     "providers[0].traits.additional[0]", "not a custom trait"),
])
def test_refused(tmp_path, text, field, reason):
    error = _refused(tmp_path, text)
    assert _field(error) == field
    assert reason in error.reason, error.reason


def test_yaml_errors_name_the_line(tmp_path):
    error = _refused(tmp_path, "meta:\n  schema_version: '1.0'\nproviders: [\n  - a: b\n")
    assert _field(error).startswith("line ") and "not valid YAML" in error.reason


def test_text_that_is_not_utf8(tmp_path):
    (tmp_path / "a.yaml").write_bytes(b"meta: {schema_version: '1.0'}\n# \xff\xfe\n")
    with pytest.raises(pc.ProviderConfigError) as e:
        pc.load_directory(str(tmp_path))
    assert _field(e.value) == "file" and "UTF-8" in e.value.reason


def test_an_unreadable_file(tmp_path):
    (tmp_path / "a.yaml").mkdir()          # a directory named like a file: cannot be read
    with pytest.raises(pc.ProviderConfigError) as e:
        pc.load_directory(str(tmp_path))
    assert _field(e.value) == "file" and "cannot read" in e.value.reason


# -- duplicates ------------------------------------------------------------------------------

def test_a_provider_identified_twice_in_one_file(tmp_path):
    error = _refused(tmp_path, _doc("- identification: {name: a}\n"
                                    "  traits: {additional: [CUSTOM_X]}\n"
                                    "- identification: {name: a}\n"
                                    "  traits: {additional: [CUSTOM_Y]}\n"))
    assert _field(error) == "providers[1].identification"
    assert error.reason == (f"name a is also identified by {tmp_path}/a.yaml: providers[0]: "
                            f"a provider is configured once")


def test_a_provider_identified_in_two_files(tmp_path):
    _write(tmp_path, "a.yaml", _doc(f"- identification: {{uuid: {GPU_UUID}}}\n"
                                    f"  traits: {{additional: [CUSTOM_X]}}\n"))
    error = _refused(tmp_path, _doc(f"- identification: {{uuid: '{GPU_UUID.upper()}'}}\n"
                                    f"  traits: {{additional: [CUSTOM_Y]}}\n"), "b.yaml")
    assert f"uuid {GPU_UUID} is also identified by {tmp_path}/a.yaml: providers[0]" \
        in error.reason


def test_compute_node_twice(tmp_path):
    _write(tmp_path, "a.yaml", _doc("- identification: {uuid: $COMPUTE_NODE}\n"
                                    "  traits: {additional: [CUSTOM_X]}\n"))
    error = _refused(tmp_path, _doc("- identification: {uuid: $COMPUTE_NODE}\n"
                                    "  traits: {additional: [CUSTOM_Y]}\n"), "b.yaml")
    assert "uuid $COMPUTE_NODE is also identified by" in error.reason


def test_a_provider_that_adds_nothing_is_ignored_with_a_warning(tmp_path):
    path = _write(tmp_path, "a.yaml", _doc(
        "- identification: {name: a}\n"
        "- identification: {name: a}\n  inventories: {additional: []}\n  traits: {}\n"
        "- identification: {name: b}\n  traits: {additional: [CUSTOM_B]}\n"))
    configs = pc.load_directory(str(tmp_path))
    # Ignored entries do not count as identifying their provider (Nova's order).
    assert [e.name for e in configs.entries] == ["b"]
    assert configs.warnings == (
        f"{path}: providers[0]: name a adds no inventories or traits; ignored",
        f"{path}: providers[1]: name a adds no inventories or traits; ignored")


# -- later minor versions --------------------------------------------------------------------

def test_a_later_minor_version_ignores_what_it_does_not_know(tmp_path):
    path = _write(tmp_path, "a.yaml", """\
        meta: {schema_version: '1.3'}
        generator: ops-tool
        providers:
          - identification: {name: a}
            description: the rack
            traits: {additional: [CUSTOM_X], removed: [CUSTOM_Y]}
        """)
    configs = pc.load_directory(str(tmp_path))
    assert [(e.name, e.traits) for e in configs.entries] == [("a", {"CUSTOM_X"})]
    assert configs.warnings == (
        f"{path}: schema version 1.3 is newer than 1.0: keys this agent does not know "
        f"are ignored",
        f"{path}: generator: unknown key ignored",
        f"{path}: providers[0].description: unknown key ignored",
        f"{path}: providers[0].traits.removed: unknown key ignored")


def test_a_later_minor_version_still_checks_what_it_knows(tmp_path):
    error = _refused(tmp_path, _doc("- identification: {name: a}\n"
                                    "  traits: {additional: [HW_CPU_X86_AVX2]}\n", "'1.1'"))
    assert _field(error) == "providers[0].traits.additional[0]"


# -- applying the entries to a host's providers ----------------------------------------------

GPU = {"name": "c1_pci_0000_3b_00_0", "uuid": GPU_UUID, "traits": ["CUSTOM_VGPU_NVIDIA_35"],
       "inventories": {"VGPU": {"total": 16}}}
OTHER_GPU = {"name": "c1_pci_0000_5e_00_0", "uuid": "0c1e0ab4-7f1d-4e35-8d7b-5b5c2f1e9a10",
             "traits": ["CUSTOM_VGPU_NVIDIA_35"]}


def _configs(tmp_path, *files: str) -> tuple[pc.ProviderConfig, ...]:
    for i, text in enumerate(files):
        _write(tmp_path, f"{i}.yaml", text)
    return pc.load_directory(str(tmp_path)).entries


def test_compute_node_and_names_land_on_the_root_and_children(tmp_path):
    configs = _configs(tmp_path, EXAMPLE)
    applied = pc.apply(configs, "c1", [GPU, OTHER_GPU])
    assert applied.root_traits == {"CUSTOM_RACK_A", "CUSTOM_GOLD"}
    assert sorted(applied.root_inventories) == ["CUSTOM_BAREMETAL_GOLD",
                                                "CUSTOM_LICENSED_WINDOWS"]
    assert applied.providers == [
        dict(GPU, traits=["CUSTOM_LOW_LATENCY", "CUSTOM_VGPU_NVIDIA_35"]), OTHER_GPU]
    assert applied.applied == {"c1": configs[0], "c1_pci_0000_3b_00_0": configs[1]}
    assert applied.warnings == []


def test_custom_inventories_join_a_childs_own(tmp_path):
    configs = _configs(tmp_path, _doc(
        f"- identification: {{uuid: {GPU_UUID}}}\n"
        f"  inventories: {{additional: [{{CUSTOM_GPU_MEMORY_GB: {{total: 16}}}}]}}\n"))
    [gpu] = pc.apply(configs, "c1", [GPU]).providers
    assert gpu["inventories"] == {"VGPU": {"total": 16},
                                  "CUSTOM_GPU_MEMORY_GB": Inventory(
                                      total=16, max_unit=16).to_primitive()}
    assert gpu["traits"] == GPU["traits"]
    # A child with no inventory of its own gets the configured one.
    [other] = pc.apply(_configs(tmp_path, _doc(
        "- identification: {name: c1_pci_0000_5e_00_0}\n"
        "  inventories: {additional: [{CUSTOM_X: {total: 2}}]}\n")), "c1", [OTHER_GPU]).providers
    assert sorted(other["inventories"]) == ["CUSTOM_X"]


def test_the_root_named_explicitly_wins_over_compute_node(tmp_path):
    configs = _configs(tmp_path, _doc(
        "- identification: {uuid: $COMPUTE_NODE}\n  traits: {additional: [CUSTOM_DEFAULT]}\n"
        "- identification: {name: c1}\n  traits: {additional: [CUSTOM_C1]}\n"))
    assert pc.apply(configs, "c1", []).root_traits == {"CUSTOM_C1"}
    # ...on c1 only: another node takes the default.
    assert pc.apply(configs, "c2", []).root_traits == {"CUSTOM_DEFAULT"}


def test_providers_this_host_does_not_have_are_ignored_with_a_warning(tmp_path):
    configs = _configs(tmp_path, _doc(
        "- identification: {name: c9_pci_0000_3b_00_0}\n  traits: {additional: [CUSTOM_X]}\n"
        f"- identification: {{uuid: {ROOT_UUID}}}\n  traits: {{additional: [CUSTOM_Y]}}\n"))
    applied = pc.apply(configs, "c1", [GPU])
    assert applied.providers == [GPU] and applied.root_traits == frozenset()
    path = f"{tmp_path}/0.yaml"
    assert applied.warnings == [
        f"{path}: providers[0]: node c1 has no provider with name c9_pci_0000_3b_00_0; "
        f"ignored",
        f"{path}: providers[1]: node c1 has no provider with uuid {ROOT_UUID} (the node "
        f"itself is identified by uuid $COMPUTE_NODE or by its name); ignored"]


def test_one_provider_by_name_and_by_uuid_is_refused(tmp_path):
    configs = _configs(
        tmp_path,
        _doc("- identification: {name: c1_pci_0000_3b_00_0}\n"
             "  traits: {additional: [CUSTOM_X]}\n"),
        _doc(f"- identification: {{uuid: {GPU_UUID}}}\n  traits: {{additional: [CUSTOM_Y]}}\n"))
    with pytest.raises(pc.ProviderConfigError) as e:
        pc.apply(configs, "c1", [GPU])
    assert e.value.field == f"{tmp_path}/1.yaml: providers[0].identification"
    assert e.value.reason == (f"uuid {GPU_UUID} is provider c1_pci_0000_3b_00_0, which "
                              f"{tmp_path}/0.yaml: providers[0] identifies by name "
                              f"c1_pci_0000_3b_00_0: a provider is configured once")
    # Without that GPU on the host, nothing collides.
    assert len(pc.apply(configs, "c1", [OTHER_GPU]).warnings) == 2
