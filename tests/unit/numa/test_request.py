"""The guest topology asked for by flavor extra specs and image properties."""
from __future__ import annotations

import pytest

from numa.errors import NumaError
from numa.request import instance_topology_from_specs, parse_cpu_spec, parse_page_size
from numa.topology import InstanceCell


def topology(extra_specs=None, image=None, vcpus=4, memory_mb=4096):
    return instance_topology_from_specs(vcpus, memory_mb, extra_specs or {}, image or {})


def refused(extra_specs=None, image=None, vcpus=4, memory_mb=4096) -> NumaError:
    with pytest.raises(NumaError) as caught:
        topology(extra_specs, image, vcpus, memory_mb)
    return caught.value


# -- no topology --------------------------------------------------------------------------

@pytest.mark.parametrize("specs, image", [
    ({}, {}),
    ({"hw:watchdog_action": "reset", "pci_passthrough:alias": "nic:1"}, {"hw_disk_bus": "scsi"}),
    ({"hw:cpu_policy": "shared"}, {}),
    ({}, {"hw_cpu_policy": "shared"}),
    ({"hw:emulator_threads_policy": "share"}, {}),
])
def test_no_numa_request_gives_none(specs, image):
    assert topology(specs, image) is None


def test_none_specs_are_empty():
    assert instance_topology_from_specs(2, 1024, None, None) is None


def test_bad_value_is_refused_even_without_topology():
    assert refused({"hw:cpu_policy": "bogus"}).field == "flavor.extra_specs.hw:cpu_policy"


# -- cells --------------------------------------------------------------------------------

def test_numa_nodes_splits_evenly():
    topo = topology({"hw:numa_nodes": "2"})
    assert [c.cpuset for c in topo.cells] == [frozenset({0, 1}), frozenset({2, 3})]
    assert [c.memory_mb for c in topo.cells] == [2048, 2048]
    assert [c.id for c in topo.cells] == [0, 1]
    assert all(c.cpu_policy == "shared" and not c.pcpuset for c in topo.cells)


def test_image_numa_nodes():
    topo = topology(image={"hw_numa_nodes": 2})
    assert len(topo.cells) == 2


def test_uneven_split_is_refused():
    err = refused({"hw:numa_nodes": "3"})
    assert err.field == "flavor.extra_specs.hw:numa_nodes"
    assert "split evenly" in err.reason


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_bad_numa_nodes(value):
    assert refused({"hw:numa_nodes": value}).field == "flavor.extra_specs.hw:numa_nodes"


def test_more_cells_than_vcpus():
    err = refused({"hw:numa_nodes": "8"}, memory_mb=8192)
    assert err.field == "flavor.extra_specs.hw:numa_nodes"
    assert "at least 8 vCPUs" in err.reason


def test_explicit_cells():
    topo = topology({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1-3",
                     "hw:numa_mem.0": "1024", "hw:numa_mem.1": "3072"})
    assert topo.cells == (
        InstanceCell(id=0, cpuset=frozenset({0}), memory_mb=1024),
        InstanceCell(id=1, cpuset=frozenset({1, 2, 3}), memory_mb=3072),
    )


def test_explicit_cells_from_image():
    topo = topology(image={"hw_numa_nodes": 2, "hw_numa_cpus.0": "0-2", "hw_numa_cpus.1": "3",
                           "hw_numa_mem.0": 3072, "hw_numa_mem.1": 1024})
    assert [c.memory_mb for c in topo.cells] == [3072, 1024]


def test_numa_cpus_without_nodes_is_one_cell():
    topo = topology({"hw:numa_cpus.0": "0-3", "hw:numa_mem.0": "4096"})
    assert len(topo.cells) == 1


@pytest.mark.parametrize("specs, field, words", [
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048"}, "flavor.extra_specs.hw:numa_mem.1", "missing"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3"},
     "flavor.extra_specs.hw:numa_mem.0", "together"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"},
     "flavor.extra_specs.hw:numa_cpus.1", "already in another cell"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"},
     "flavor.extra_specs.hw:numa_cpus", "vCPUs 1 are in no cell"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-5", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"},
     "flavor.extra_specs.hw:numa_cpus.0", "do not exist"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "1024"},
     "flavor.extra_specs.hw:numa_mem", "total 3072 MB"),
    ({"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-3", "hw:numa_cpus.1": "1",
      "hw:numa_mem.0": "4096", "hw:numa_mem.1": "1"},
     "flavor.extra_specs.hw:numa_cpus.1", "does not exist"),
    ({"hw:numa_nodes": "1", "hw:numa_cpus.x": "0-3", "hw:numa_mem.0": "4096"},
     "flavor.extra_specs.hw:numa_cpus.x", "cell number"),
    ({"hw:numa_nodes": "1", "hw:numa_cpus.0": "a-b", "hw:numa_mem.0": "4096"},
     "flavor.extra_specs.hw:numa_cpus.0", "vCPU list"),
    ({"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-3", "hw:numa_mem.0": "lots"},
     "flavor.extra_specs.hw:numa_mem.0", "integer"),
])
def test_bad_cells_name_the_key(specs, field, words):
    err = refused(specs)
    assert err.field == field
    assert words in err.reason


def test_image_may_not_set_cells_when_flavor_does():
    err = refused({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
                   "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"},
                  {"hw_numa_cpus.0": "0-1"})
    assert err.field == "image.properties.hw_numa_cpus.0"


def test_image_numa_nodes_conflicts_with_flavor():
    err = refused({"hw:numa_nodes": "2"}, {"hw_numa_nodes": 1})
    assert err.field == "image.properties.hw_numa_nodes"
    assert "conflicts with hw:numa_nodes=2" in err.reason
    assert len(topology({"hw:numa_nodes": "2"}, {"hw_numa_nodes": "2"}).cells) == 2


# -- CPU policy ---------------------------------------------------------------------------

def test_dedicated_gives_one_pinned_cell():
    topo = topology({"hw:cpu_policy": "dedicated"})
    assert topo.cells == (InstanceCell(id=0, pcpuset=frozenset(range(4)), memory_mb=4096,
                                       cpu_policy="dedicated"),)


def test_image_dedicated_when_flavor_silent():
    assert topology(image={"hw_cpu_policy": "dedicated"}).cells[0].cpu_policy == "dedicated"


@pytest.mark.parametrize("flavor_policy", ["shared", "mixed"])
def test_image_may_not_ask_dedicated_against_flavor(flavor_policy):
    specs = {"hw:cpu_policy": flavor_policy, "hw:cpu_dedicated_mask": "0"}
    err = refused(specs, {"hw_cpu_policy": "dedicated"})
    assert err.field == "image.properties.hw_cpu_policy"


def test_flavor_dedicated_wins_over_image_shared():
    topo = topology({"hw:cpu_policy": "dedicated"}, {"hw_cpu_policy": "shared"})
    assert topo.cells[0].cpu_policy == "dedicated"


def test_mixed_with_mask():
    topo = topology({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2-3",
                     "hw:numa_nodes": "2"})
    assert [(c.cpuset, c.pcpuset) for c in topo.cells] == [
        (frozenset({0, 1}), frozenset()), (frozenset(), frozenset({2, 3}))]
    assert {c.cpu_policy for c in topo.cells} == {"mixed"}


def test_mixed_mask_by_exclusion():
    topo = topology({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"})
    assert topo.cells[0].pcpuset == frozenset({1, 2, 3})
    assert topo.cells[0].cpuset == frozenset({0})


@pytest.mark.parametrize("specs, field", [
    ({"hw:cpu_policy": "mixed"}, "flavor.extra_specs.hw:cpu_policy"),
    ({"hw:cpu_dedicated_mask": "0"}, "flavor.extra_specs.hw:cpu_dedicated_mask"),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_dedicated_mask": "0"},
     "flavor.extra_specs.hw:cpu_dedicated_mask"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-3"},
     "flavor.extra_specs.hw:cpu_dedicated_mask"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "7"},
     "flavor.extra_specs.hw:cpu_dedicated_mask"),
])
def test_bad_mixed(specs, field):
    assert refused(specs).field == field


def test_image_mixed_needs_flavor_mask():
    err = refused(image={"hw_cpu_policy": "mixed"})
    assert err.field == "image.properties.hw_cpu_policy"


# -- thread policy ------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["prefer", "isolate", "require"])
def test_thread_policy(policy):
    topo = topology({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": policy})
    assert topo.cells[0].cpu_thread_policy == policy


def test_thread_policy_needs_pinning():
    err = refused({"hw:cpu_thread_policy": "isolate"})
    assert err.field == "flavor.extra_specs.hw:cpu_thread_policy"
    err = refused(image={"hw_cpu_thread_policy": "require"})
    assert err.field == "image.properties.hw_cpu_thread_policy"


@pytest.mark.parametrize("flavor, image, expected", [
    (None, "isolate", "isolate"),
    ("prefer", "require", "require"),
    ("require", None, "require"),
    ("isolate", "isolate", "isolate"),
])
def test_thread_policy_flavor_and_image(flavor, image, expected):
    specs = {"hw:cpu_policy": "dedicated"}
    if flavor:
        specs["hw:cpu_thread_policy"] = flavor
    props = {"hw_cpu_thread_policy": image} if image else {}
    assert topology(specs, props).cells[0].cpu_thread_policy == expected


def test_thread_policy_conflict():
    err = refused({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
                  {"hw_cpu_thread_policy": "require"})
    assert err.field == "image.properties.hw_cpu_thread_policy"
    assert "conflicts with hw:cpu_thread_policy=isolate" in err.reason


# -- page size ----------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("small", "small"), ("large", "large"), ("any", "any"), ("ANY", "any"),
    ("2048", 2048), ("2MB", 2048), ("2 MiB", 2048), ("1GB", 1048576), ("1G", 1048576),
    ("4KB", 4), (2048, 2048),
])
def test_page_size_values(value, expected):
    assert parse_page_size(value, "f") == expected


@pytest.mark.parametrize("value", ["huge", "0", "2TB", "", -4, "2.5MB"])
def test_bad_page_size(value):
    with pytest.raises(NumaError):
        parse_page_size(value, "f")


def test_page_size_gives_a_cell():
    topo = topology({"hw:mem_page_size": "2MB"})
    assert topo.cells == (InstanceCell(id=0, cpuset=frozenset(range(4)), memory_mb=4096,
                                       pagesize=2048),)


def test_page_size_must_divide_cell_memory():
    err = refused({"hw:mem_page_size": "1GB", "hw:numa_nodes": "2"}, memory_mb=3072)
    assert err.field == "flavor.extra_specs.hw:mem_page_size"
    assert "not a multiple" in err.reason


@pytest.mark.parametrize("flavor, image, expected", [
    ("any", "2048", 2048),
    ("any", "small", "small"),
    ("large", "1GB", 1048576),
    ("large", "large", "large"),
    ("2048", "2MB", 2048),
    ("small", None, "small"),
])
def test_image_page_size_narrows_flavor(flavor, image, expected):
    props = {"hw_mem_page_size": image} if image else {}
    assert topology({"hw:mem_page_size": flavor}, props).cells[0].pagesize == expected


@pytest.mark.parametrize("flavor, image", [
    (None, "large"), ("small", "large"), ("large", "small"), ("large", "any"),
    ("2048", "1GB"),
])
def test_image_page_size_conflicts(flavor, image):
    specs = {"hw:mem_page_size": flavor} if flavor else {}
    err = refused(specs, {"hw_mem_page_size": image})
    assert err.field == "image.properties.hw_mem_page_size"


# -- emulator threads ---------------------------------------------------------------------

def test_emulator_isolate():
    topo = topology({"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"})
    assert topo.emulator_threads_policy == "isolate"
    assert topo.emulator_threads_isolated


def test_emulator_from_image():
    topo = topology({"hw:cpu_policy": "dedicated"}, {"hw_emulator_threads_policy": "isolate"})
    assert topo.emulator_threads_policy == "isolate"


def test_emulator_isolate_needs_pinning():
    err = refused({"hw:emulator_threads_policy": "isolate"})
    assert err.field == "flavor.extra_specs.hw:emulator_threads_policy"


def test_emulator_conflict():
    err = refused({"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "share"},
                  {"hw_emulator_threads_policy": "isolate"})
    assert err.field == "image.properties.hw_emulator_threads_policy"


# -- CPU spec syntax ----------------------------------------------------------------------

@pytest.mark.parametrize("spec, expected", [
    ("0-3,^2,5", {0, 1, 3, 5}), ("1", {1}), (" 0 , 2 ", {0, 2}), ("0-5,^1-3", {0, 4, 5}),
    (3, {3}),
])
def test_cpu_spec(spec, expected):
    assert parse_cpu_spec(spec, "f", 8) == frozenset(expected)


@pytest.mark.parametrize("spec", ["", "^0", "3-1", "x", "0-", "8", None, [0, 1]])
def test_bad_cpu_spec(spec):
    with pytest.raises(NumaError):
        parse_cpu_spec(spec, "f", 8)


def test_bad_flavor_sizes():
    with pytest.raises(NumaError) as caught:
        instance_topology_from_specs(0, 1024, {"hw:numa_nodes": "1"}, {})
    assert caught.value.field == "flavor.vcpus"
