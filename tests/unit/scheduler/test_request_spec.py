"""RequestSpec validation: every bad payload names its field."""
from __future__ import annotations

import copy

import pytest

from scheduler.exception import InvalidRequest
from scheduler.request_spec import RequestSpec

BASE = {"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 20}}
U1 = "11111111-1111-1111-1111-111111111111"
U2 = "22222222-2222-2222-2222-222222222222"


def spec(**changes):
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def flavor(**changes):
    f = dict(BASE["flavor"])
    f.update(changes)
    return spec(flavor=f)


def test_minimal_request():
    rs = RequestSpec.from_primitive(BASE)
    assert (rs.vcpus, rs.memory_mb, rs.num_instances) == (2, 2048, 1)
    assert rs.numa_topology is None and rs.pci_requests == ()


def test_disk_mb_counts_root_ephemeral_and_swap():
    rs = RequestSpec.from_primitive(flavor(root_gb=10, ephemeral_gb=5, swap=512))
    assert rs.disk_mb == 15 * 1024 + 512


def test_round_trip():
    data = spec(num_instances=2, instance_uuids=[U1, U2], project_id="p", user_id="u",
                availability_zone="az1", image={"id": "img", "properties": {"a": "b"}},
                scheduler_hints={"same_host": [U1], "foo": "bar"},
                instance_group={"uuid": "g1", "policy": "anti-affinity",
                                "rules": {"max_server_per_host": 2}},
                force_hosts=["h1"], ignore_hosts=["h2"])
    rs = RequestSpec.from_primitive(data)
    again = RequestSpec.from_primitive(rs.to_primitive())
    assert again == rs
    assert rs.instance_group.max_server_per_host == 2
    assert rs.scheduler_hints.other == {"foo": "bar"}


BAD = [
    ("not an object", ["x"], "request_spec"),
    ("unknown top-level key", spec(colour="blue"), "colour"),
    ("empty top-level key", {"": None}, "''"),
    ("non-text top-level key", {1: None, "flavor": BASE["flavor"]}, "1"),
    ("empty flavor key", flavor(**{"": 1}), "flavor.''"),
    ("missing flavor", {}, "flavor"),
    ("missing vcpus", spec(flavor={"memory_mb": 1, "root_gb": 1}), "flavor.vcpus"),
    ("missing memory", spec(flavor={"vcpus": 1, "root_gb": 1}), "flavor.memory_mb"),
    ("missing root_gb", spec(flavor={"vcpus": 1, "memory_mb": 1}), "flavor.root_gb"),
    ("negative vcpus", flavor(vcpus=-1), "flavor.vcpus"),
    ("zero vcpus", flavor(vcpus=0), "flavor.vcpus"),
    ("float vcpus", flavor(vcpus=1.5), "flavor.vcpus"),
    ("string memory", flavor(memory_mb="1024"), "flavor.memory_mb"),
    ("bool root_gb", flavor(root_gb=True), "flavor.root_gb"),
    ("negative ephemeral", flavor(ephemeral_gb=-1), "flavor.ephemeral_gb"),
    ("unknown flavor key", flavor(gpus=1), "flavor.gpus"),
    ("extra_specs not a dict", flavor(extra_specs=["a"]), "flavor.extra_specs"),
    ("num_instances zero", spec(num_instances=0), "num_instances"),
    ("num_instances huge", spec(num_instances=10 ** 6), "num_instances"),
    ("uuid count mismatch", spec(num_instances=2, instance_uuids=[U1]), "instance_uuids"),
    ("duplicate uuids", spec(num_instances=2, instance_uuids=[U1, U1]), "instance_uuids"),
    ("bad uuid", spec(instance_uuids=["nope"]), "instance_uuids[0]"),
    ("hints not a dict", spec(scheduler_hints=["x"]), "scheduler_hints"),
    ("same_host not uuids", spec(scheduler_hints={"same_host": ["h1"]}),
     "scheduler_hints.same_host[0]"),
    ("different_host wrong type", spec(scheduler_hints={"different_host": 5}),
     "scheduler_hints.different_host"),
    ("unknown group policy", spec(instance_group={"uuid": "g", "policy": "spread"}),
     "instance_group.policy"),
    ("group without uuid", spec(instance_group={"policy": "affinity"}), "instance_group.uuid"),
    ("max_server_per_host on affinity",
     spec(instance_group={"uuid": "g", "policy": "affinity",
                          "rules": {"max_server_per_host": 2}}),
     "instance_group.rules.max_server_per_host"),
    ("max_server_per_host zero",
     spec(instance_group={"uuid": "g", "policy": "anti-affinity",
                          "rules": {"max_server_per_host": 0}}),
     "instance_group.rules.max_server_per_host"),
    ("hint group mismatch", spec(instance_group={"uuid": "g", "policy": "affinity"},
                                 scheduler_hints={"group": "other"}), "scheduler_hints.group"),
    ("force_hosts not strings", spec(force_hosts=[1]), "force_hosts[0]"),
    ("huge ignore list", spec(ignore_hosts=["h"] * 5000), "ignore_hosts"),
    ("az not a string", spec(availability_zone=3), "availability_zone"),
    ("image not a dict", spec(image="cirros"), "image"),
    ("pci_requests not a list", spec(pci_requests={"count": 1}), "pci_requests"),
]


@pytest.mark.parametrize("why,data,field", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_name_the_field(why, data, field):
    with pytest.raises(InvalidRequest) as err:
        RequestSpec.from_primitive(data)
    assert err.value.field == field, (why, err.value)
    assert field in str(err.value)


@pytest.mark.parametrize("where,key,value", [
    ("flavor.extra_specs", "hw:maxphysaddr_bits", "forty"),
    ("flavor.extra_specs", "hw:maxphysaddr_bits", "0"),
    ("flavor.extra_specs", "hw:maxphysaddr_bits", "-1"),
    ("flavor.extra_specs", "hw:maxphysaddr_bits", "40.5"),
    ("image.properties", "hw_maxphysaddr_bits", ""),
    ("image.properties", "hw_maxphysaddr_bits", "4096"),
])
def test_malformed_address_bits_are_refused_naming_the_field(where, key, value):
    flavor = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    data = {"flavor": flavor}
    if where == "flavor.extra_specs":
        flavor["extra_specs"] = {key: value}
    else:
        data["image"] = {"properties": {key: value}}
    with pytest.raises(InvalidRequest) as exc:
        RequestSpec.from_primitive(data)
    assert exc.value.field == f"{where}.{key}"
    assert "whole number of bits" in exc.value.reason


def test_address_bits_accepted():
    spec = RequestSpec.from_primitive({"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
                                                  "extra_specs": {"hw:maxphysaddr_bits": " 40"}},
                                       "image": {"properties": {"hw_maxphysaddr_bits": "52"}}})
    assert spec.extra_specs["hw:maxphysaddr_bits"] == " 40"
