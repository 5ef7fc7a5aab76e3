"""Trace replay: validation before anything runs, the summary's figures, seeded
picks, and comparing two reports."""
from __future__ import annotations

import json

import pytest
from oslo_config import cfg

from scheduler import replay, simulate

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "aaaaaaaa-0000-0000-0000-000000000002"
FLEET = {
    "hosts": [{"host": "h1", "vcpus": 8, "memory_mb": 8192, "local_gb": 100,
               "cpu_allocation_ratio": 1.0},
              {"host": "h2", "vcpus": 4, "memory_mb": 3072, "local_gb": 100,
               "cpu_allocation_ratio": 1.0}],
    "aggregates": [{"name": "az1", "availability_zone": "az1", "hosts": ["h1"]},
                   {"name": "az2", "availability_zone": "az2", "hosts": ["h2"]}]}
SMALL = {"name": "small", "vcpus": 2, "memory_mb": 2048, "root_gb": 10}
BIG = {"name": "big", "vcpus": 7, "memory_mb": 7168, "root_gb": 10}
CONFIG = {"filter_scheduler": {"enabled_filters": ["RamFilter", "CoreFilter"],
                               "weight_classes": ["RAMWeigher"]}}
TRACE = [{"flavor": SMALL, "instance_uuids": [A]},
         {"flavor": BIG},
         {"release": A},
         {"flavor": SMALL, "instance_uuids": [B]},
         {"release": "aaaaaaaa-0000-0000-0000-0000000000ff"}]


def run(lines=TRACE, config=CONFIG, seed=0, fleet=FLEET) -> dict:
    with simulate.config_overrides(cfg.CONF, config):
        return replay.replay(fleet, lines, cfg.CONF, seed=seed)


def test_summary_counts_reasons_usage_and_fragmentation():
    report = run()
    assert (report["requests"], report["placed"], report["refused"]) == (3, 2, 1)
    assert report["releases"] == {"released": 1, "nothing_to_release": 1}
    assert report["kinds"]["small"] == {"requests": 2, "placed": 2, "refused": 0,
                                        "instances_placed": 2, "top_reasons": []}
    assert report["kinds"]["big"]["top_reasons"] == [
        {"reason": "RamFilter: insufficient RAM: need 7168 MB", "count": 1}]
    assert report["refusals"] == [{"line": 2, "kind": "big",
                                   "reason": "RamFilter: insufficient RAM: need 7168 MB"}]
    assert [(p["line"], p["host"]) for p in report["placements"]] == [(1, "h1"), (4, "h1")]
    # At the end only B is placed: 2 of 12 vCPUs, 2048 of 11264 MB, 10 of 200 GB.
    assert report["hosts"] == {"total": 2, "used": 1, "partially_used": 1}
    assert report["utilisation"] == {"vcpus": round(2 / 12, 4),
                                     "memory_mb": round(2048 / 11264, 4),
                                     "local_gb": 0.05}
    assert report["utilisation_per_az"]["az1"] == {
        "hosts": {"total": 1, "used": 1}, "vcpus": 0.25, "memory_mb": 0.25,
        "local_gb": 0.1}
    assert report["utilisation_per_az"]["az2"]["vcpus"] == 0.0
    # h1's free room is stranded beside B; h2's is on an empty host.
    assert report["fragmentation"]["vcpus"] == {"stranded": 6, "free": 10, "share": 0.6}
    assert report["fragmentation"]["memory_mb"]["stranded"] == 6144


def test_text_report_lists_kinds_and_figures():
    text = replay.format_report(run())
    assert "requests: 3  placed: 2  refused: 1" in text
    assert "1x RamFilter: insufficient RAM: need 7168 MB" in text
    assert "hosts used: 1/2 (1 partially)" in text
    assert "az1: hosts 1/1  vcpus 25.0%" in text
    assert "vcpus 60.0% (6 of 10)" in text


@pytest.mark.parametrize("lines, field", [
    (["{not json"], "line 1"),
    (["", "# comment", json.dumps({"flavor": {"vcpus": 1}})], "line 3.flavor.memory_mb"),
    ([json.dumps({"release": "a1"})], "line 1.release"),
    ([json.dumps({"release": A, "x": 1})], "line 1.release"),
    ([json.dumps({"flavor": SMALL, "bogus": 1})], "line 1.bogus"),
])
def test_bad_lines_name_line_and_field_before_anything_runs(lines, field, monkeypatch):
    ran = []
    monkeypatch.setattr(replay, "_run", lambda *a: ran.append(a) or {})
    with pytest.raises(replay.InvalidTrace) as e:
        run(replay.parse_trace(lines))
    assert e.value.field == field
    assert not ran


def test_same_seed_same_placements_with_random_picks():
    fleet = {"hosts": [{"host": f"h{i}", "vcpus": 16, "memory_mb": 16384, "local_gb": 100}
                       for i in range(8)]}
    config = {"filter_scheduler": {"enabled_filters": ["RamFilter"],
                                   "weight_classes": ["RAMWeigher"], "host_subset_size": 8}}
    lines = [{"flavor": SMALL}] * 12
    hosts = [[p["host"] for p in run(lines, config, seed, fleet)["placements"]]
             for seed in (7, 7, 8)]
    assert hosts[0] == hosts[1]
    assert len(set(hosts[0])) > 1            # the picks really were random
    assert hosts[0] != hosts[2]


def test_compare_reports_changed_placements_and_refusals():
    packed = run()
    stacked = run(config={"filter_scheduler": {**CONFIG["filter_scheduler"],
                                               "ram_weight_multiplier": -1.0}})
    diff = replay.compare(packed, stacked)
    # Stacking puts A on h2 (the fuller host), which leaves h1 whole for the big
    # request that spreading refused; B then only fits on h2.
    assert [(d["line"], d["a"], d["b"]) for d in diff["placements_differ"]] == [
        (1, "h1", "h2"), (4, "h1", "h2")]
    assert diff["placements_compared"] == 2
    assert diff["refusals_gained"] == []
    assert [r["line"] for r in diff["refusals_lost"]] == [2]
    assert diff["side_by_side"]["placed"] == [2, 3]
    assert diff["side_by_side"]["fragmentation"]["vcpus"][0] == 0.6
    assert diff["side_by_side"]["hosts_used"] == [1, 2]
    # A request refused only under one configuration shows up on its side.
    fake = {**stacked, "refusals": stacked["refusals"] + [
        {"line": 4, "kind": "small", "reason": "x"}]}
    diff = replay.compare(packed, fake)
    assert [r["line"] for r in diff["refusals_gained"]] == [4]
    assert [r["line"] for r in replay.compare(fake, packed)["refusals_lost"]] == [4]
    text = replay.format_comparison(diff, ("a.conf", "b.conf"))
    assert "refused only under b.conf: 1" in text and "line 1#0: h1 -> h2" in text


def test_sample_trace_replays_on_the_sample_fleet():
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    from scheduler import fleet

    sample = fleet.load_fleet_file(os.path.join(root, "etc", "berth", "fleet.sample.yaml"))
    lines = replay.load_trace(os.path.join(root, "etc", "berth", "trace.sample.jsonl"))
    report = run(lines, config={}, fleet=sample)
    assert report["requests"] == 11 and report["releases"]["released"] == 2
    # Three T4s asked for, two in the fleet: all-or-nothing refuses the request.
    assert report["kinds"]["gpu.t4"]["refused"] == 1
    assert report["kinds"]["m1.large"]["instances_placed"] == 9
    assert set(report["utilisation_per_az"]) == {"az1", "az2"}
