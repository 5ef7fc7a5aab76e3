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
