"""berth-manage simulate --fleet/--trace/--compare and berth-manage capacity."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.unit.scheduler.cmd.test_manage import GOOD as FLEET
from tests.unit.scheduler.cmd.test_manage import Cli

SMALL = {"name": "small", "vcpus": 2, "memory_mb": 8192, "root_gb": 10}
HUGE = {"name": "huge", "vcpus": 12, "memory_mb": 98304, "root_gb": 10}
TRACE = [{"flavor": SMALL}, {"flavor": HUGE}, {"flavor": SMALL},
         {"release": "aaaaaaaa-0000-0000-0000-0000000000ff"}]


@pytest.fixture
def cli(tmp_path, capsys):
    c = Cli(tmp_path, capsys)
    assert c("db", "sync")[0] == 0
    return c


def files(cli, trace=TRACE) -> tuple[str, str]:
    fleet = cli.write(FLEET)
    path = cli.tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in trace))
    return fleet, str(path)


def conf(cli, name: str, text: str) -> str:
    path = cli.tmp_path / name
    path.write_text(text)
    return str(path)


def test_replay_text_and_json(cli):
    fleet, trace = files(cli)
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace)
    assert rc == 0, err
    assert "requests: 3  placed: 3  refused: 0" in out and "hosts used:" in out
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace, "--json")
    report = json.loads(out)
    assert report["kinds"]["huge"]["placed"] == 1
    assert report["releases"] == {"released": 0, "nothing_to_release": 1}
    assert set(report["utilisation_per_az"]) == {"az1"}


def test_config_file_after_the_command_applies_to_the_replay(cli):
    fleet, trace = files(cli)
    only_small = conf(cli, "ram.conf", "[filter_scheduler]\nenabled_filters = RamFilter\n"
                                       "[compute]\nram_allocation_ratio = 1.0\n")
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace,
                       "--config-file", only_small, "--json")
    assert rc == 0, err
    # With RamFilter alone the NUMA host's memory still counts; the result is a report.
    assert json.loads(out)["requests"] == 3
    bad = conf(cli, "bad.conf", "[filter_scheduler]\nenabled_filters = NoSuchFilter\n")
    rc, _out, err = cli("simulate", "--fleet", fleet, "--trace", trace, "--config-file", bad)
    assert rc != 0 and "NoSuchFilter" in err


@pytest.mark.parametrize("argv, message", [
    ((), "give scenario files"),
    (("--fleet", "f.yaml"), "--trace is required"),
    (("--trace", "t.jsonl"), "--fleet is required"),
    (("x.yaml", "--fleet", "f.yaml", "--trace", "t.jsonl"), "not both"),
])
def test_replay_usage_errors_exit_2(cli, argv, message):
    rc, _out, err = cli("simulate", *argv)
    assert rc == 2 and message in err


def test_bad_trace_line_exits_2_naming_the_line(cli):
    fleet, trace = files(cli, TRACE[:1] + [{"flavor": {**SMALL, "vcpus": "x"}}])
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace)
    assert rc == 2 and f"{trace}: line 2: flavor.vcpus" in err and not out


def test_compare_two_configurations(cli):
    fleet, trace = files(cli, [{"flavor": SMALL}] * 3 + [{"flavor": HUGE}])
    spread = conf(cli, "a.conf", "[filter_scheduler]\nweight_classes = RAMWeigher\n")
    stack = conf(cli, "b.conf", "[filter_scheduler]\nweight_classes = RAMWeigher\n"
                                "ram_weight_multiplier = -1.0\n")
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace,
                       "--compare", spread, spread, "--json")
    assert rc == 0, err
    same = json.loads(out)["changes"]
    assert same["placements_differ"] == [] and same["placements_compared"] == 4
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace,
                       "--compare", spread, stack, "--json")
    assert rc == 0, err
    result = json.loads(out)
    changes = result["changes"]
    # Spreading sends the small ones to compute-002 (most free RAM), stacking to
    # compute-001 (least free RAM that still fits).
    assert result["a"]["config"] == spread and result["b"]["config"] == stack
    assert [(d["line"], d["a"], d["b"]) for d in changes["placements_differ"]] == [
        (n, "compute-002", "compute-001") for n in (1, 2, 3)]
    assert changes["side_by_side"]["placed"] == [result["a"]["placed"],
                                                 result["b"]["placed"]]
    rc, out, err = cli("simulate", "--fleet", fleet, "--trace", trace,
                       "--compare", spread, stack)
    assert rc == 0 and "placements that differ:" in out and spread in out.splitlines()[0]


def test_compare_with_a_broken_configuration_exits_2(cli):
    fleet, trace = files(cli)
    good = conf(cli, "a.conf", "[filter_scheduler]\nweight_classes = RAMWeigher\n")
    bad = conf(cli, "b.conf", "[filter_scheduler]\nenabled_filters = NoSuchFilter\n")
    rc, _out, err = cli("simulate", "--fleet", fleet, "--trace", trace,
                        "--compare", good, bad)
    assert rc == 2 and "b.conf: replay failed" in err


def test_capacity_command_claims_nothing(cli):
    assert cli("host", "import", cli.write(FLEET))[0] == 0
    before = cli.snapshot()
    request = cli.tmp_path / "flavor.json"
    request.write_text(json.dumps([SMALL, {"flavor": HUGE}]))
    rc, out, err = cli("capacity", str(request), "--per-az", "--per-aggregate", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    # compute-001: 8 vCPUs x4, 64 GB -> 8 small; compute-002: 16 x4, 128 GB -> 16.
    assert [(r["request"], r["fits"]) for r in rows] == [("small", 24), ("huge", 1)]
    assert rows[0]["per_az"] == {"az1": 24} and rows[0]["per_aggregate"] == {"az1": 24}
    assert cli.snapshot() == before
    rc, out, _err = cli("capacity", str(request))
    assert rc == 0 and out.splitlines()[0].split()[:2] == ["REQUEST", "FITS"]
    request.write_text("{nope")
    rc, _out, err = cli("capacity", str(request))
    assert rc == 2 and "not JSON" in err
    request.write_text(json.dumps({"vcpus": 1}))
    rc, _out, err = cli("capacity", str(request))
    assert rc == 2 and "flavor.memory_mb" in err


def test_host_import_has_no_progress_when_not_a_terminal(cli):
    rc, out, err = cli("host", "import", cli.write(FLEET))
    assert rc == 0 and "\r" not in err and "created" in out


def test_yaml_fixture_is_plain():
    assert yaml.safe_load(yaml.safe_dump(FLEET)) == FLEET
