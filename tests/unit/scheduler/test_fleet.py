"""Fleet file validation: every bad value names the host, the field and the expectation."""
from __future__ import annotations

import copy
import os

import pytest

from scheduler import exception, fleet

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "etc", "berth",
                      "fleet.sample.yaml")
DEFAULTS = {"cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
            "disk_allocation_ratio": 1.0}


def make_host(name: str = "compute-001", **extra) -> dict:
    host = {"host": name, "vcpus": 16, "memory_mb": 65536, "local_gb": 500}
    host.update(extra)
    return host


PF = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
      "dev_type": "type-PF", "numa_node": 0}
VF = {"address": "0000:81:02.0", "vendor_id": "8086", "product_id": "154c",
      "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0,
      "physical_network": "physnet1"}
NUMA = {"cells": [{"id": 0, "socket": 0, "cpuset": [0, 1], "pcpuset": [2, 3],
                   "siblings": [[2, 3]], "memory_mb": 32768,
                   "mempages": [{"size_kb": 4, "total": 8388608},
                                {"size_kb": 2048, "total": 16}]}]}


def good_fleet() -> dict:
    return {"hosts": [make_host("compute-001", numa_topology=copy.deepcopy(NUMA),
                                pci_devices=[dict(PF), dict(VF)]),
                      make_host("compute-002")],
            "aggregates": [{"name": "az1", "availability_zone": "az1",
                            "hosts": ["compute-001", "compute-002"]},
                           {"name": "ssd", "hosts": ["compute-002"],
                            "metadata": {"ssd": True, "cpu_allocation_ratio": 2.0}}]}


def test_good_fleet_parses_with_defaults():
    f = fleet.load_fleet(good_fleet(), DEFAULTS)
    h1, h2 = f.hosts
    assert h1.node == "compute-001"
    assert h1.cpu_allocation_ratio == 4.0
    assert [d.address for d in h1.pci_devices] == ["0000:81:00.0", "0000:81:02.0"]
    assert h1.numa_topology["cells"][0]["pcpuset"] == [2, 3]
    assert h2.pci_devices is None and h2.numa_topology is None
    az1, ssd = f.aggregates
    assert az1.availability_zone == "az1" and az1.hosts == ("compute-001", "compute-002")
    assert ssd.metadata == {"ssd": "true", "cpu_allocation_ratio": "2.0"}


def test_ratios_default_from_config():
    rec = fleet.parse_host(make_host())
    assert rec.cpu_allocation_ratio == 4.0 and rec.ram_allocation_ratio == 1.0
    rec = fleet.parse_host(make_host(cpu_allocation_ratio=2, node="n1"), 0, DEFAULTS)
    assert rec.cpu_allocation_ratio == 2.0 and rec.node == "n1"


def test_sample_fleet_is_valid():
    f = fleet.load_fleet_file(SAMPLE, DEFAULTS)
    assert len(f.hosts) >= 8
    zones = {a.availability_zone for a in f.aggregates if a.availability_zone}
    assert zones == {"az1", "az2"}
    assert any(h.numa_topology for h in f.hosts)
    assert any(d.dev_type == "type-VF" for h in f.hosts for d in h.pci_devices or [])


def _host_error(mutate) -> fleet.InvalidFleet:
    data = good_fleet()
    mutate(data)
    with pytest.raises(fleet.InvalidFleet) as ei:
        fleet.load_fleet(data, DEFAULTS)
    assert isinstance(ei.value, exception.InvalidRequest)
    return ei.value


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["hosts"][1].pop("vcpus"),
     "hosts[1] (compute-002): vcpus: required field is missing"),
    (lambda d: d["hosts"][1].update(memory_mb=-5),
     "hosts[1] (compute-002): memory_mb: expected an integer > 0, got -5"),
    (lambda d: d["hosts"][1].update(memory_mb="64G"),
     "hosts[1] (compute-002): memory_mb: expected an integer > 0, got '64G'"),
    (lambda d: d["hosts"][1].update(vcpus=True),
     "hosts[1] (compute-002): vcpus: expected an integer > 0, got true"),
    (lambda d: d["hosts"][1].update(local_gb=-1),
     "hosts[1] (compute-002): local_gb: expected an integer >= 0, got -1"),
    (lambda d: d["hosts"][1].update(cpu_allocation_ratio=0),
     "hosts[1] (compute-002): cpu_allocation_ratio: expected a number > 0 and <= 1000, got 0"),
    (lambda d: d["hosts"][1].update(ram_allocation_ratio="1.5"),
     "hosts[1] (compute-002): ram_allocation_ratio: expected a number > 0 and <= 1000, got '1.5'"),
    (lambda d: d["hosts"][1].update(reserved_host_cpus=17),
     "hosts[1] (compute-002): reserved_host_cpus: expected an integer between 0 and "
     "vcpus (16), got 17"),
    (lambda d: d["hosts"][1].update(vcpu=4),
     "hosts[1] (compute-002): vcpu: unknown key (did you mean vcpus?)"),
    (lambda d: d["hosts"][1].update(host_ip="10.0.0.300"),
     "hosts[1] (compute-002): host_ip: expected an IPv4 or IPv6 address, got '10.0.0.300'"),
    (lambda d: d["hosts"][1].update(disabled="no"),
     "hosts[1] (compute-002): disabled: expected true or false, got 'no'"),
    (lambda d: d["hosts"][1].update(metrics={"cpu.percent": "high"}),
     "hosts[1] (compute-002): metrics.cpu.percent: expected a finite number between "
     "-1e+15 and 1e+15, got 'high'"),
    (lambda d: d["hosts"][1].update(host="compute-001"),
     "hosts[1] (compute-001): host: expected a unique host name, got 'compute-001' "
     "(also hosts[0])"),
    (lambda d: d["hosts"][1].update(node="compute-001"),
     "hosts[1] (compute-002): node: expected a unique node name, got 'compute-001' "
     "(also hosts[0])"),
    (lambda d: d["hosts"].append("compute-003"),
     "hosts[2]: host entry: expected a mapping, got 'compute-003'"),
])
def test_bad_host_field(mutate, message):
    assert str(_host_error(mutate)) == message


def test_error_carries_field_and_reason():
    err = _host_error(lambda d: d["hosts"][1].update(memory_mb=-5))
    assert err.field == "hosts[1].memory_mb"
    assert err.reason == "expected an integer > 0, got -5"


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["hosts"][0]["pci_devices"][1].update(parent_addr="0000:82:00.0"),
     "pci_devices[1].parent_addr"),
    (lambda d: d["hosts"][0]["pci_devices"].pop(0), "pci_devices[0].parent_addr"),
    (lambda d: d["hosts"][0]["pci_devices"][0].update(vendor_id="intel"),
     "pci_devices[0].vendor_id"),
    (lambda d: d["hosts"][0]["pci_devices"][0].update(address="81:00.0"),
     "pci_devices[0].address"),
    (lambda d: d["hosts"][0]["pci_devices"][0].update(dev_type="type-XX"),
     "pci_devices[0].dev_type"),
    (lambda d: d["hosts"][0]["pci_devices"].append(dict(PF)), "pci_devices[2].address"),
    (lambda d: d["hosts"][0]["pci_devices"][0].update(colour="red"),
     "pci_devices[0].colour"),
])
def test_bad_pci_device(mutate, field):
    msg = str(_host_error(mutate))
    assert msg.startswith(f"hosts[0] (compute-001): {field}: "), msg


def test_vf_whose_parent_is_absent_says_so():
    msg = str(_host_error(lambda d: d["hosts"][0]["pci_devices"].pop(0)))
    assert "type-PF device listed for this host" in msg and "'0000:81:00.0'" in msg


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(cpuset=[0, "x"]),
     "numa_topology.cells.0.cpuset"),
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(pcpuset=[1, 2]),
     "numa_topology.cells.0.pcpuset"),
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(memory_mb=0),
     "numa_topology.cells.0.memory_mb"),
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(pinned_cpus=[2]),
     "numa_topology.cells.0.pinned_cpus"),
    (lambda d: d["hosts"][0]["numa_topology"].update(cells=[]), "numa_topology.cells"),
    (lambda d: d["hosts"][0]["numa_topology"]["cells"].append(
        {"id": 0, "cpuset": [8], "memory_mb": 1024}), "numa_topology.cells.1.id"),
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0]["mempages"][1].update(
        size_kb=-2), "numa_topology.cells.0.mempages.1.size_kb"),
    # a scalar where the page list goes (found by the fuzz suite: TypeError before)
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(mempages=True),
     "numa_topology.cells.0.mempages"),
    (lambda d: d["hosts"][0]["numa_topology"]["cells"][0].update(mempages={"size_kb": 4}),
     "numa_topology.cells.0.mempages"),
])
def test_bad_numa_topology(mutate, field):
    msg = str(_host_error(mutate))
    assert msg.startswith(f"hosts[0] (compute-001): {field}: "), msg


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["aggregates"][0]["hosts"].append("compute-099"),
     "aggregates[0] (az1): hosts[2]: expected a host defined under hosts:, "
     "got 'compute-099'"),
    (lambda d: d["aggregates"][1].update(name="az1"),
     "aggregates[1] (az1): name: expected a unique aggregate name (also aggregates[0]), "
     "got 'az1'"),
    (lambda d: d["aggregates"].append({"name": "az2", "availability_zone": "az2",
                                       "hosts": ["compute-002"]}),
     "aggregates[2] (az2): availability_zone: host compute-002 already in zone az1 "
     "(aggregate az1); a host is in one availability zone only"),
    (lambda d: d["aggregates"][1].update(zone="az1"),
     "aggregates[1] (ssd): zone: unknown key (known keys: availability_zone, hosts, "
     "metadata, name)"),
    (lambda d: d["aggregates"][1].pop("name"),
     "aggregates[1]: name: required field is missing"),
    # a zone given in the metadata is a name as well (import refuses a blank one)
    (lambda d: d["aggregates"][1].update(metadata={"availability_zone": " "}),
     "aggregates[1] (ssd): metadata.availability_zone: expected a non-empty string of at "
     "most 255 characters without control, line-separator or bidi characters, got ' '"),
])
def test_bad_aggregate(mutate, message):
    assert str(_host_error(mutate)) == message


def test_bad_document_shape():
    with pytest.raises(fleet.InvalidFleet, match="hosts: expected a list"):
        fleet.load_fleet({"hosts": {"compute-001": {}}}, DEFAULTS)
    with pytest.raises(fleet.InvalidFleet, match="host: unknown key"):
        fleet.load_fleet({"hosts": [], "host": []}, DEFAULTS)
    with pytest.raises(fleet.InvalidFleet, match="fleet: expected a mapping"):
        fleet.load_fleet(["compute-001"], DEFAULTS)


def test_load_fleet_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  - host: [unclosed\n")
    with pytest.raises(fleet.InvalidFleet, match=r"not valid YAML \(line"):
        fleet.load_fleet_file(str(bad))
    with pytest.raises(fleet.InvalidFleet, match="cannot read"):
        fleet.load_fleet_file(str(tmp_path / "missing.yaml"))


def test_compute_options_listed():
    from scheduler import opts

    groups = dict(opts.list_opts())
    names = {o.name for o in groups["compute"]}
    assert {"cpu_allocation_ratio", "ram_allocation_ratio",
            "disk_allocation_ratio"} <= names


def test_pci_device_tags_parse():
    data = good_fleet()
    data["hosts"][0]["pci_devices"][1]["tags"] = {"trusted": True, "kind": "nic"}
    h1 = fleet.load_fleet(data, DEFAULTS).hosts[0]
    assert [d.tags for d in h1.pci_devices] == [(), (("kind", "nic"), ("trusted", "true"))]


@pytest.mark.parametrize("tags, field, words", [
    ({"trusted": ""}, "pci_devices[1].tags.trusted", "non-empty string"),
    ({"trusted": "a\x00"}, "pci_devices[1].tags.trusted", "printable"),
    ({"bad key": "1"}, "pci_devices[1].tags.bad key", "tag name"),
    ({"dev_type": "type-PF"}, "pci_devices[1].tags.dev_type", "device field, not a tag"),
    (["trusted"], "pci_devices[1].tags", "mapping"),
])
def test_bad_pci_tags_name_host_device_and_tag(tags, field, words):
    err = _host_error(lambda d: d["hosts"][0]["pci_devices"][1].update(tags=tags))
    assert str(err).startswith(f"hosts[0] (compute-001): {field}: "), str(err)
    assert err.field == f"hosts[0].{field}" and words in err.reason
