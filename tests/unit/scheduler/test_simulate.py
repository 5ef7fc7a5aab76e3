"""Scenario runner: labels for instances, invariants checked where a step acted."""
from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from scheduler import fleet, simulate

FLAVOR = {"vcpus": 1, "memory_mb": 1024, "root_gb": 1}
HOSTS = [{"host": f"h{i}", "vcpus": 8, "memory_mb": 8192 * i, "local_gb": 100}
         for i in (1, 2, 3)]
CONFIG = {"filter_scheduler": {"enabled_filters": ["RamFilter"],
                               "weight_classes": ["RAMWeigher"]}}


def run(steps, hosts=None) -> simulate.ScenarioResult:
    return simulate.run_scenario({"config": CONFIG, "fleet": {"hosts": hosts or HOSTS},
                                  "steps": steps}, cfg.CONF)


def test_label_uuid_is_stable_and_distinct_and_a_uuid_stands_for_itself():
    a = simulate.label_uuid("web-1")
    assert a == simulate.label_uuid("web-1") == str(uuid.UUID(a))
    assert a != simulate.label_uuid("web-2")
    given = "00000000-0000-0000-0000-0000000000aa"
    assert simulate.label_uuid(given) == given
    assert simulate.label_uuid(given.upper()) == given


@pytest.mark.parametrize("bad", ["", "  ", "x" * 256, None, ["a"]])
def test_bad_labels_are_scenario_errors(bad):
    with pytest.raises(simulate.ScenarioError, match="instance label"):
        simulate.label_uuid(bad)


def test_labels_rewrite_every_instance_reference_without_touching_the_input():
    labels = simulate.Labels()
    body = {"flavor": FLAVOR, "num_instances": 2, "instance_uuids": ["a1", "a2"],
            "scheduler_hints": {"same_host": ["b1"], "different_host": "c1", "group": "g"},
            "instance_group": {"uuid": "g", "policy": "affinity"}}
    out = labels.request(body)
    assert out["instance_uuids"] == [simulate.label_uuid("a1"), simulate.label_uuid("a2")]
    assert out["scheduler_hints"]["same_host"] == [simulate.label_uuid("b1")]
    assert out["scheduler_hints"]["different_host"] == [simulate.label_uuid("c1")]
    assert out["scheduler_hints"]["group"] == out["instance_group"]["uuid"] \
        == simulate.label_uuid("g")
    assert body["instance_uuids"] == ["a1", "a2"] and body["scheduler_hints"]["group"] == "g"
    assert labels.label(simulate.label_uuid("a2")) == "a2"
    assert labels.label("not-a-known-uuid") == "not-a-known-uuid"


def test_output_shows_labels_and_release_by_label_frees_the_host():
    result = run([
        {"select": {"flavor": FLAVOR, "instance_uuids": ["web-1"]}},
        {"release": "web-1"},
        {"expect_usage": {"h3": {"running_vms": 0}}},
        {"select": {"flavor": FLAVOR, "instance_uuids": ["web-1"]}},
    ])
    assert result.ok, simulate.format_table(result)
    first = result.steps[0].placements[0]
    assert first["instance"] == "web-1" and first["host"] == "h3"
    assert first["instance_uuid"] == simulate.label_uuid("web-1")
    assert "select: web-1 -> h3" in simulate.format_table(result)
    assert result.steps[1].message == "released"


def test_each_step_checks_only_the_hosts_it_touched_and_the_end_checks_all(monkeypatch):
    seen = []
    real = simulate.check_invariants

    def spy(db, hosts=None, conn=None):
        seen.append(None if hosts is None else sorted(hosts))
        return real(db, hosts, conn)
    monkeypatch.setattr(simulate, "check_invariants", spy)
    result = run([
        {"select": {"flavor": FLAVOR, "instance_uuids": ["a"]}},                    # h3
        {"select": {"flavor": FLAVOR, "force_hosts": ["h1"], "instance_uuids": ["b"]}},
        {"select": {"flavor": FLAVOR}, "dry_run": True},                            # nothing
        {"release": "a"},                                                           # h3
        {"expect_usage": {"h1": {"running_vms": 1}}},                               # nothing
        {"select": {"flavor": {**FLAVOR, "memory_mb": 10 ** 6}},
         "expect": {"error": "NoValidHost"}},                                      # refused
    ])
    assert result.ok, simulate.format_table(result)
    assert seen == [["h3"], ["h1"], ["h3"], None]


def test_broken_invariant_on_an_untouched_host_is_caught_by_the_final_check(sqlite_db):
    db_hosts.import_fleet(sqlite_db, fleet.load_fleet({"hosts": HOSTS}))
    inv, rp = models.ProviderInventory.__table__, models.ResourceProvider.__table__
    with sqlite_db.writer() as s:
        s.execute(sa.update(inv).where(inv.c.resource_class == "VCPU", inv.c.provider_id.in_(
            sa.select(rp.c.id).where(rp.c.name == "h2"))).values(used=3))
    assert simulate.check_invariants(sqlite_db, {"h1", "h3"}) == []
    failures = simulate.check_invariants(sqlite_db)
    assert failures == ["h2: VCPU used 3 != sum of allocations 0"]
    text = simulate.format_table(simulate.ScenarioResult("", [], final_failures=failures))
    assert "FAIL final check: h2: VCPU used" in text and text.endswith("FAILED")


def test_reschedule_by_label_requires_its_fields():
    with pytest.raises(simulate.ScenarioError, match="failed_host"):
        run([{"reschedule": {"instance_uuid": "a"}}])
