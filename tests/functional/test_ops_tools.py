"""Operator tools against the real services: the capacity RPC over RabbitMQ on
MariaDB equals placing one by one, and berth-manage capacity and bulk import on
MariaDB."""
from __future__ import annotations

import json
import uuid

import pytest

from scheduler import exception
from tests.functional.daemon import Daemon, small_fleet

REQUEST = {"flavor": {"name": "m1", "vcpus": 4, "memory_mb": 6144, "root_gb": 20}}
GROUP = {"uuid": str(uuid.uuid4()), "policy": "anti-affinity",
         "rules": {"max_server_per_host": 2}}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("ops"), backend="threading", workers=1,
               fleet=small_fleet(4))
    try:
        d.start()
        yield d
        assert d.stop() == 0, d.log_tail()
    finally:
        d.close()


def place_until_refused(api, request) -> list[str]:
    placed = []
    while len(placed) < 500:
        try:
            sel = api.select_destinations(None, request)
        except exception.NoValidHost:
            return placed
        placed.append(sel[0][0]["instance_uuid"])
    raise AssertionError("never refused")


def test_capacity_rpc_equals_placing_one_by_one(daemon):
    api = daemon.api()
    grouped = dict(REQUEST, instance_group=GROUP)
    rows = api.capacity(None, [REQUEST, grouped], per_az=True)
    assert [r["request"] for r in rows] == ["m1", "m1"]
    assert daemon.allocations() == {}                       # nothing claimed
    # 4 hosts of 16 vCPUs at ratio 1.0: 4 of m1 each (RAM would take 5).
    assert rows[0]["fits"] == 16 and rows[0]["per_az"] == {"nova": 16}
    assert rows[1]["fits"] == 8                              # 2 per host
    placed = place_until_refused(api, grouped)
    assert len(placed) == rows[1]["fits"]
    assert api.capacity(None, REQUEST)[0]["fits"] == rows[0]["fits"] - len(placed)
    rest = place_until_refused(api, REQUEST)
    assert len(placed) + len(rest) == rows[0]["fits"]
    assert api.capacity(None, REQUEST)[0]["fits"] == 0
    for u in placed + rest:
        assert api.release(None, u) is True
    daemon.assert_consistent()


def test_capacity_rpc_refuses_bad_requests(daemon):
    api = daemon.api()
    with pytest.raises(exception.InvalidRequest) as e:
        api.capacity(None, {"flavor": {"vcpus": 1, "memory_mb": 1}})
    assert e.value.field == "request.flavor.root_gb"
    with pytest.raises(exception.InvalidRequest):
        api.capacity(None, REQUEST, per_az="yes")


@pytest.fixture
def cli(manage_cli):
    assert manage_cli("db", "sync")[0] == 0
    return manage_cli


def test_bulk_import_and_capacity_on_mariadb(cli, tmp_path):
    import yaml

    fleet = small_fleet(300)
    names = [h["host"] for h in fleet["hosts"]]
    fleet["aggregates"] = [{"name": "all", "hosts": names, "metadata": {"pool": "x"}},
                           {"name": "az1", "availability_zone": "az1", "hosts": names[:100]}]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    rc, out, err = cli("host", "import", str(path))
    assert rc == 0 and "300 created" in out, err
    rc, out, err = cli("host", "import", str(path))
    assert "300 unchanged" in out and "2 unchanged" in out
    flavor = tmp_path / "flavor.json"
    flavor.write_text(json.dumps(REQUEST["flavor"]))
    rc, out, err = cli("capacity", str(flavor), "--per-az", "--json")
    assert rc == 0, err
    [row] = json.loads(out)
    assert row["fits"] == 1200 and row["per_az"] == {"az1": 400, "nova": 800}
