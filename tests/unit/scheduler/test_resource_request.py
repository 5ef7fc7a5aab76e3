"""What a request asks of the ledger: flavors and images translated as Nova does."""
from __future__ import annotations

import pytest

from scheduler.exception import InvalidRequest
from scheduler.request_spec import RequestSpec


def rr(extra_specs=None, image=None, member_of=None, **flavor):
    data = {"flavor": {"vcpus": 4, "memory_mb": 8192, "root_gb": 40, **flavor,
                       "extra_specs": extra_specs or {}}}
    if image is not None:
        data["image"] = {"properties": image}
    if member_of is not None:
        data["member_of"] = member_of
    return RequestSpec.from_primitive(data).resources


def groups(request):
    return {g.suffix: (dict(g.resources), set(g.required), set(g.forbidden))
            for g in request.groups}


def test_flavor_fields_are_the_unnumbered_group():
    assert groups(rr(ephemeral_gb=10, swap=1500)) == {
        "": ({"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 52}, set(), set())}


def test_zero_removes_a_standard_class_baremetal():
    r = rr({"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0",
            "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"})
    assert groups(r) == {"": ({"CUSTOM_BAREMETAL_GOLD": 1}, set(), set())}


def test_boot_from_volume_disk_zero():
    assert groups(rr({"resources:DISK_GB": "0"}))[""][0] == {"VCPU": 4, "MEMORY_MB": 8192}


def test_dedicated_asks_pcpu_not_vcpu():
    assert groups(rr({"hw:cpu_policy": "dedicated"}))[""][0] == {
        "PCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}


def test_mixed_and_emulator_isolate():
    got = groups(rr({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0",
                     "hw:emulator_threads_policy": "isolate"}))[""][0]
    assert got == {"VCPU": 1, "PCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}


@pytest.mark.parametrize("policy,required,forbidden", [
    ("require", {"HW_CPU_HYPERTHREADING"}, set()),
    ("isolate", set(), set()),     # [numa] isolate_on_smt_hosts decides, not a trait
    ("prefer", set(), set())])
def test_thread_policy_traits(policy, required, forbidden):
    _, req, forb = groups(rr({"hw:cpu_policy": "dedicated",
                              "hw:cpu_thread_policy": policy}))[""]
    assert (req, forb) == (required, forbidden)


def test_traits_and_numbered_groups():
    r = rr({"trait:HW_CPU_X86_AVX512F": "required", "trait:CUSTOM_SLOW": "forbidden",
            "resources1:VGPU": "1", "trait1:CUSTOM_VGPU_TYPE_A": "required",
            "resources_gpu2:VGPU": "2", "group_policy": "isolate"})
    assert groups(r) == {
        "": ({"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}, {"HW_CPU_X86_AVX512F"},
             {"CUSTOM_SLOW"}),
        "1": ({"VGPU": 1}, {"CUSTOM_VGPU_TYPE_A"}, set()),
        "_gpu2": ({"VGPU": 2}, set(), set())}
    assert r.group_policy == "isolate"
    assert r.amounts()["VGPU"] == 3


def test_a_class_in_a_numbered_group_is_not_added_unnumbered():
    r = rr({"resources1:VCPU": "2", "resources1:MEMORY_MB": "1024"})
    assert groups(r) == {"": ({"DISK_GB": 40}, set(), set()),
                         "1": ({"VCPU": 2, "MEMORY_MB": 1024}, set(), set())}


def test_image_traits():
    r = rr(image={"trait:HW_CPU_X86_AVX2": "required",
                  "traits_required": "CUSTOM_A, CUSTOM_B"})
    assert groups(r)[""][1] == {"HW_CPU_X86_AVX2", "CUSTOM_A", "CUSTOM_B"}


def test_member_of():
    r = rr(member_of=["gold", ["az1-a", "az1-b"], "!quarantine"])
    assert r.member_of == (frozenset({"gold"}), frozenset({"az1-a", "az1-b"}))
    assert r.forbidden_aggregates == frozenset({"quarantine"})


@pytest.mark.parametrize("specs,image,field", [
    ({"resources:GPU": "1"}, None, "flavor.extra_specs.resources:GPU"),
    ({"resources:CUSTOM_gold": "1"}, None, "flavor.extra_specs.resources:CUSTOM_gold"),
    ({"resources:VGPU": "-1"}, None, "flavor.extra_specs.resources:VGPU"),
    ({"resources:VGPU": "one"}, None, "flavor.extra_specs.resources:VGPU"),
    ({"resources:VGPU": "99999999999"}, None, "flavor.extra_specs.resources:VGPU"),
    ({"trait:HW_CPU_X86_AVX9000": "required"}, None,
     "flavor.extra_specs.trait:HW_CPU_X86_AVX9000"),
    ({"trait:CUSTOM_A": "preferred"}, None, "flavor.extra_specs.trait:CUSTOM_A"),
    ({"trait:CUSTOM_A": "required", "trait:CUSTOM_A ": "x"}, None,
     "flavor.extra_specs.trait:CUSTOM_A "),
    ({"group_policy": "spread"}, None, "flavor.extra_specs.group_policy"),
    ({"resources1:VGPU": "1", "resources2:VGPU": "1"}, None,
     "flavor.extra_specs.group_policy"),
    ({"trait1:CUSTOM_A": "required"}, None, "flavor.extra_specs.trait1"),
    ({"hw:cpu_policy": "dedicated", "resources:VCPU": "2"}, None,
     "flavor.extra_specs.resources:VCPU"),
    ({}, {"trait:NOT_A_TRAIT": "required"}, "image.properties.trait:NOT_A_TRAIT"),
    ({}, {"trait:CUSTOM_A": "forbidden"}, "image.properties.trait:CUSTOM_A"),
])
def test_malformed_is_invalid_request_naming_the_key(specs, image, field):
    with pytest.raises(InvalidRequest) as e:
        rr(specs, image)
    assert e.value.kwargs["field"] == field


@pytest.mark.parametrize("member_of", ["gold", [[]], [["!a", "b"]], [1], [["x" * 300]]])
def test_malformed_member_of(member_of):
    with pytest.raises(InvalidRequest) as e:
        rr(member_of=member_of)
    assert e.value.kwargs["field"].startswith("member_of")


def test_member_of_round_trips_through_the_stored_spec():
    spec = RequestSpec.from_primitive({"flavor": {"vcpus": 1, "memory_mb": 1, "root_gb": 1},
                                       "member_of": ["a", ["b", "c"]]})
    again = RequestSpec.from_primitive(spec.to_primitive())
    assert again.resources == spec.resources
