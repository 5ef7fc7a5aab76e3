"""berth-manage against real MariaDB: db sync, the sample fleet, host list, pci pools."""
from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from db import migration

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SAMPLE = os.path.abspath(os.path.join(ROOT, "etc", "berth", "fleet.sample.yaml"))


@pytest.fixture
def cli(manage_cli):
    """Runs berth-manage with a config pointing at a fresh MariaDB database."""
    return manage_cli


def test_sample_fleet_on_mariadb(cli, tmp_path):
    rc, out, err = cli("db", "sync")
    assert rc == 0, err
    assert cli("db", "version")[1].strip() == migration.head_revision()

    rc, out, err = cli("host", "import", SAMPLE)
    assert rc == 0, err
    assert "10 created" in out and "5 created" in out
    rc, out, _err = cli("host", "import", SAMPLE)
    assert "10 unchanged" in out and "5 unchanged" in out

    rc, out, _err = cli("host", "list", "--json")
    hosts = json.loads(out)
    assert len(hosts) == 10
    by_name = {h["host"]: h for h in hosts}
    assert by_name["compute-001"]["availability_zone"] == "az1"
    assert by_name["compute-005"]["availability_zone"] == "az2"
    assert by_name["compute-010"]["disabled"] is True
    rc, out, _err = cli("host", "list")
    assert rc == 0 and out.splitlines()[0].startswith("HOST")

    rc, out, _err = cli("host", "show", "compute-005", "--json")
    shown = json.loads(out)
    assert len(shown["numa_topology"]["cells"]) == 2
    assert shown["pci_devices"]["total"] == 5

    rc, out, _err = cli("pci", "pools", "--json")
    pools = json.loads(out)
    vfs = {(p["host"], p["physical_network"]): p["count"] for p in pools
           if p["dev_type"] == "type-VF"}
    assert vfs == {("compute-001", "physnet1"): 8, ("compute-002", "physnet1"): 8,
                   ("compute-005", "physnet2"): 4, ("compute-006", "physnet2"): 4}
    rc, out, _err = cli("pci", "pools", "--host", "compute-007")
    assert rc == 0 and out.count("type-PCI") == 2

    # A bad file imports nothing, even into a populated MariaDB.
    with open(SAMPLE, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    bad = copy.deepcopy(data)
    bad["hosts"][0]["vcpus"] = 128
    bad["hosts"][3]["memory_mb"] = -5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    rc, _out, err = cli("host", "import", str(path))
    assert rc == 2 and "hosts[3] (compute-004): memory_mb: expected an integer > 0" in err
    rc, out, _err = cli("host", "show", "compute-001", "--json")
    shown = json.loads(out)
    assert (shown["vcpus"], shown["pcpus"]) == (16, 16)       # 16 of its 32 CPUs dedicated

    rc, out, _err = cli("host", "delete", "compute-010")
    assert rc == 0
    rc, out, _err = cli("aggregate", "list", "--json")
    az2 = next(a for a in json.loads(out) if a["name"] == "az2")
    assert "compute-010" not in az2["hosts"]
