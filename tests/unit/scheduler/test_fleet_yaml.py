"""Fleet and scenario files are read with libyaml's safe loader when PyYAML has it."""
from __future__ import annotations

import pytest
import yaml

from scheduler import fleet


def test_the_c_safe_loader_is_used_when_available():
    if hasattr(yaml, "CSafeLoader"):
        assert fleet.SAFE_LOADER is yaml.CSafeLoader
    else:
        assert fleet.SAFE_LOADER is yaml.SafeLoader


def test_the_loader_is_safe():
    with pytest.raises(yaml.YAMLError):
        fleet.load_yaml("!!python/object/apply:os.system ['true']")
    assert fleet.load_yaml("hosts: [{host: a, vcpus: 1}]") == {"hosts": [{"host": "a",
                                                                          "vcpus": 1}]}


def test_fleet_file_errors_still_name_line_and_column(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("hosts:\n  - {host: a\n")
    with pytest.raises(fleet.InvalidFleet, match=r"not valid YAML \(line \d+, column \d+\)"):
        fleet.load_fleet_file(str(path))


DEFAULTS = {"cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
            "disk_allocation_ratio": 1.0}
NUMA = {"cells": [{"id": 0, "cpuset": [0, 1], "pcpuset": [2, 3], "memory_mb": 4096}]}


def test_a_json_fleet_file_reads_like_the_yaml_one(tmp_path):
    import json

    data = {"hosts": [{"host": "a", "vcpus": 4, "memory_mb": 4096, "local_gb": 10,
                       "numa_topology": NUMA}]}
    (tmp_path / "f.json").write_text(json.dumps(data))
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(data))
    assert fleet.load_fleet_file(str(tmp_path / "f.json"), DEFAULTS) == \
        fleet.load_fleet_file(str(tmp_path / "f.yaml"), DEFAULTS)
    (tmp_path / "bad.json").write_text('{"hosts": [\n  {"host": "a",}]}')
    with pytest.raises(fleet.InvalidFleet, match=r"not valid JSON \(line 2, column"):
        fleet.load_fleet_file(str(tmp_path / "bad.json"))


def test_shared_layouts_are_validated_once_but_each_host_gets_its_own_copy():
    hosts = [{"host": f"h{i}", "vcpus": 4, "memory_mb": 4096, "local_gb": 10,
              "numa_topology": NUMA} for i in range(3)]
    parsed = fleet.load_fleet({"hosts": hosts}, DEFAULTS)
    a, b = parsed.hosts[0].numa_topology, parsed.hosts[1].numa_topology
    assert a == b and a is not b and a["cells"][0] is not b["cells"][0]
    # A bad layout is refused on every host that has it, with that host's name.
    bad = dict(hosts[2], numa_topology={"cells": [{"id": 0, "cpuset": [0],
                                                   "memory_mb": -1}]})
    with pytest.raises(fleet.InvalidFleet, match=r"hosts\[1\] \(h2\): numa_topology"):
        fleet.load_fleet({"hosts": [hosts[0], bad]}, DEFAULTS)
    with pytest.raises(fleet.InvalidFleet, match=r"hosts\[0\] \(h2\): numa_topology"):
        fleet.load_fleet({"hosts": [bad]}, DEFAULTS)
