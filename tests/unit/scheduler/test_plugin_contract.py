"""The plugin contract, as a third party meets it.

A filter or weigher with only the per-host method works on every path
(filtering, multi-instance and dry runs, force/ignore, the NoValidHost
explanation, the recheck before a claim); a bad answer fails the same typed
way on every path; ``scheduler.testing`` catches a vector form that disagrees
with its per-host form and a class key that does not cover the rule.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
from oslo_config import cfg

from db import hosts as db_hosts
from scheduler import exception, testing
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler, load_filters, load_weighers
from scheduler.filters import SKIP, BaseHostFilter
from scheduler.host_columns import HostColumns
from scheduler.host_manager import HostManager
from scheduler.weights import BaseWeigher
from tests.unit.scheduler import fakes, reference
from tests.unit.scheduler import test_equivalence as te


class GoldOnlyFilter(BaseHostFilter):
    """Only the per-host method (the documented example)."""

    calls = 0

    def host_passes(self, host, request):
        type(self).calls += 1
        if host.stats.get("tier") != "gold":
            return "not a gold host"
        return None


class GoldByClassFilter(GoldOnlyFilter):
    def class_key(self, host):
        return host.stats.get("tier")

    def memo_key(self, request):
        return "gold"


class FewestInstancesWeigher(BaseWeigher):
    """Only the per-host method."""

    def weigh(self, host, request):
        return -host.num_instances


class EmptyReasonFilter(BaseHostFilter):
    def host_passes(self, host, request):
        return "" if host.host == "h1" else None


class CrashingFilter(BaseHostFilter):
    def host_passes(self, host, request):
        raise ZeroDivisionError("oops")


class DisagreeingFilter(BaseHostFilter):
    """Two forms of a rule that drifted apart."""

    def host_passes(self, host, request):
        return None if host.memory_mb >= 8192 else "small"

    def refusals(self, cols, request):
        return [("small", cols.memory_usable < 8192)]   # reserved memory counted


class LooseClassFilter(BaseHostFilter):
    """A class key that misses what the rule reads."""

    def host_passes(self, host, request):
        return None if host.vcpus >= 16 else "too few vCPUs"

    def class_key(self, host):
        return host.hypervisor_type


class ScreenedGoldFilter(GoldOnlyFilter):
    """Gold hosts with more than 8 vCPUs; the screen knows the vCPU part."""

    def host_passes(self, host, request):
        if host.vcpus == 8:
            type(self).calls += 1
            return "too small"
        return super().host_passes(host, request)

    def screen(self, cols, request):
        return cols.vcpus == 8


class WrongScreenFilter(GoldOnlyFilter):
    """A screen that refuses hosts which pass."""

    def screen(self, cols, request):
        return cols.vcpus >= 16


HOSTS = [{"host": f"h{i}", "vcpus": 8 * (1 + i % 3), "memory_mb": 16384, "local_gb": 100,
          "stats": {"tier": "gold" if i % 2 else "silver"}} for i in range(8)]


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    yield c


def _sched(db, conf, filters, weighers=()):
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": HOSTS}))
    builtin = load_filters(["ComputeFilter", "RamFilter"], conf)
    return FilterScheduler(HostManager(db, conf), conf, filters=builtin + list(filters),
                           weighers=list(weighers))


def _spec(s, n=1, **kw):
    return s.parse_request({"flavor": {"vcpus": 1, "memory_mb": 4096, "root_gb": 1},
                            "num_instances": n, **kw})


@pytest.mark.parametrize("flt_cls", [GoldOnlyFilter, GoldByClassFilter])
def test_per_host_plugins_work_on_every_path(sqlite_db, conf, flt_cls):
    s = _sched(sqlite_db, conf, [flt_cls(conf)], [FewestInstancesWeigher(conf)])
    gold = {"h1", "h3", "h5", "h7"}
    # Plain, multi-instance claims, and a dry run that must see its own claims.
    placed = s.select_destinations(_spec(s))
    assert placed[0][0].host in gold
    many = s.select_destinations(_spec(s, 3))
    assert {sel[0].host for sel in many} <= gold
    dry = s.select_destinations(_spec(s, 4, flavor={"vcpus": 1, "memory_mb": 12288,
                                                    "root_gb": 1}), dry_run=True)
    assert len({sel[0].host for sel in dry}) == 4          # 12 GiB: one per host
    # force / ignore.
    assert s.select_destinations(_spec(s, force_hosts=["h3", "h4"]))[0][0].host == "h3"
    ignored = s.select_destinations(_spec(s, ignore_hosts=["h1", "h3", "h5"]))
    assert ignored[0][0].host == "h7"
    # The explanation names the plugin and its reason.
    with pytest.raises(exception.NoValidHost) as err:
        s.select_destinations(_spec(s, force_hosts=["h0", "h2"]))
    filters = {f["filter"]: f for f in err.value.summary["filters"]}
    assert filters[flt_cls.__name__]["reasons"] == {"not a gold host": 2}
    assert "2 " + flt_cls.__name__ + " (not a gold host)" in err.value.reason


def test_classes_ask_once_per_class(sqlite_db, conf):
    GoldByClassFilter.calls = 0
    s = _sched(sqlite_db, conf, [GoldByClassFilter(conf)])
    s.select_destinations(_spec(s), dry_run=True)
    assert GoldByClassFilter.calls == 2              # gold and silver, not 8 hosts
    s.select_destinations(_spec(s), dry_run=True)
    # Remembered across requests (same memo key); the recheck of the chosen
    # host uses the same answers.
    assert GoldByClassFilter.calls == 2


def test_a_class_made_while_classes_are_asked(sqlite_db, conf):
    """Another request's claim can give a host a class that did not exist when
    this request started asking (a claim landing while a plugin yields): its
    answer is remembered like the others (it was an IndexError, once in a few
    thousand requests of the fault suite's load)."""
    class TierFilter(GoldByClassFilter):
        def host_passes(self, host, request):
            if self.changed is None:
                last = self.hm.columns.hosts[-1]
                with self.hm._changing(last):
                    last.stats = {"tier": "gold"}
                self.changed = last.host
            return super().host_passes(host, request)

    hosts = [{"host": f"t{i:02d}", "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
              "stats": {"tier": f"tier-{i}"}} for i in range(20)]
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": hosts}))
    flt = TierFilter(conf)
    flt.changed = None
    s = FilterScheduler(HostManager(sqlite_db, conf), conf, filters=[flt], weighers=[])
    flt.hm = s.host_manager
    placed = s.select_destinations(_spec(s), dry_run=True)
    assert placed[0][0].host == flt.changed == "t19"     # the only gold host
    answers = s.host_manager.columns.classes.answers(flt.class_column(""), "gold")
    assert answers.known(np.array([20]))[0] == 0          # its class passes, remembered


def test_the_recheck_before_a_claim_runs_plugins(sqlite_db, conf):
    class Flip(BaseHostFilter):
        seen: list = []

        def host_passes(self, host, request):
            self.seen.append(host.host)
            return None

    flip = Flip(conf)
    s = _sched(sqlite_db, conf, [flip])
    chosen = s.select_destinations(_spec(s))[0][0].host
    # Asked on every host while filtering, then once more on the chosen one.
    assert flip.seen.count(chosen) == 2 and len(flip.seen) == len(HOSTS) + 1


@pytest.mark.parametrize("bad,text", [(EmptyReasonFilter, "returned ''"),
                                      (CrashingFilter, "ZeroDivisionError")])
def test_a_broken_filter_fails_typed_on_every_path(sqlite_db, conf, bad, text):
    s = _sched(sqlite_db, conf, [bad(conf)])
    for kwargs in ({}, {"dry_run": True}):
        with pytest.raises(exception.PluginError, match=text) as err:
            s.select_destinations(_spec(s, 2), **kwargs)
        assert err.value.plugin == bad.__name__
    with pytest.raises(exception.PluginError):
        s.select_destinations(_spec(s, force_hosts=["h1"]))
    with pytest.raises(exception.PluginError):
        testing.answers(bad(conf), [fakes.fake_host("h1")],
                        testing.request(fakes.fake_spec()))
    assert s.host_manager.host_states()[1].num_instances == 0     # nothing claimed


def test_a_weigher_returning_nan_is_a_plugin_error(sqlite_db, conf):
    class Nan(BaseWeigher):
        def weigh(self, host, request):
            return float("nan")

    s = _sched(sqlite_db, conf, [], [Nan(conf)])
    with pytest.raises(exception.PluginError, match="finite"):
        s.select_destinations(_spec(s))


def test_a_weigher_skipping_a_request_is_not_asked(sqlite_db, conf):
    class Never(BaseWeigher):
        def prepare(self, request):
            return SKIP

        def weigh(self, host, request):
            raise AssertionError("asked")

    s = _sched(sqlite_db, conf, [], [Never(conf)])
    assert s.select_destinations(_spec(s))


def test_conformance_catches_drifted_forms_and_loose_classes(conf):
    hosts = [fakes.fake_host(f"h{i}", memory_mb=8192, reserved_host_memory_mb=512 * (i % 2),
                             vcpus=8 * (1 + i % 2)) for i in range(4)]
    req = testing.request(fakes.fake_spec())
    with pytest.raises(testing.ConformanceError, match="per-host form"):
        testing.check_filter(DisagreeingFilter(conf), hosts, [req])
    with pytest.raises(testing.ConformanceError, match="same class key"):
        testing.check_filter(LooseClassFilter(conf), hosts, [req])
    testing.check_filter(GoldByClassFilter(conf), hosts, [req])


@pytest.mark.parametrize("name", te.ALL_FILTERS)
def test_every_builtin_filter_conforms(sqlite_db, conf, name):
    """Every built-in on a random heterogeneous fleet and random requests: all
    paths agree, and with the per-host reference (tests/unit/scheduler/reference)."""
    conf.set_override("alias", [te.ALIAS], group="pci")
    try:
        rng = random.Random(name)
        db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(te._fleet(rng, 30)))
        s = FilterScheduler(HostManager(sqlite_db, conf), conf,
                            filters=load_filters([name], conf), weighers=[])
        hosts = s.host_manager.host_states()
        flt = s.filters[0]
        members = {"h001": 1, "h004": 2}
        nodes = {"00000000-0000-4000-8000-000000000001": hosts[3].node_id}
        hosts[3].instances["00000000-0000-4000-8000-000000000001"] = None
        requests = [testing.request(te._request(rng, s, "g", list(nodes)),
                                    group_hosts=members, instance_nodes=nodes)
                    for _ in range(25)]
        rule = reference.filter_rule(flt) if not flt.has_per_host else None
        testing.check_filter(flt, hosts, requests, reference=rule)
    finally:
        conf.clear_override("alias", group="pci")


@pytest.mark.parametrize("name", te.ALL_WEIGHERS)
def test_every_builtin_weigher_conforms(sqlite_db, conf, name):
    conf.set_override("alias", [te.ALIAS], group="pci")
    try:
        rng = random.Random(name)
        db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(te._fleet(rng, 30)))
        s = FilterScheduler(HostManager(sqlite_db, conf), conf, filters=[],
                            weighers=load_weighers([name], conf))
        requests = [testing.request(te._request(rng, s, "g"), group_hosts={"h002": 3})
                    for _ in range(10)]
        testing.check_weigher(s.weighers[0], s.host_manager.host_states(), requests,
                              reference=reference.WEIGHT_RULES[name])
    finally:
        conf.clear_override("alias", group="pci")


def test_vector_answers_must_be_masks(conf):
    class BadMask(BaseHostFilter):
        def refusals(self, cols, request):
            return [("no", np.zeros(cols.n + 1, dtype=bool))]

    with pytest.raises(exception.PluginError, match="bool masks"):
        testing.answers(BadMask(conf), [fakes.fake_host()], testing.request(fakes.fake_spec()))


def test_the_documented_example_plugin_works(sqlite_db, conf):
    """The example of doc/source/contributor/plugins.rst runs as printed."""
    import pathlib
    import re
    import textwrap

    page = (pathlib.Path(__file__).parents[3] / "doc" / "source" / "contributor"
            / "plugins.rst").read_text()
    block = re.search(r"^\.\. code-block:: python\n\n(.*?)\n\nRegister it", page,
                      re.S | re.M).group(1)
    namespace: dict = {}
    exec(textwrap.dedent(block), namespace)
    gold = namespace["GoldOnlyFilter"](conf)
    hosts = [fakes.fake_host(f"h{i}", stats={"tier": "gold" if i % 2 else "silver"})
             for i in range(4)]
    asks = [testing.request(fakes.fake_spec(extra_specs={"mycloud:tier": "gold"})),
            testing.request(fakes.fake_spec())]
    testing.check_filter(gold, hosts, asks)
    assert testing.answers(gold, hosts, asks[0]) == ["not a gold host", None] * 2
    assert testing.answers(gold, hosts, asks[1]) == [None] * 4


def test_a_screen_spares_asks_but_not_reasons(sqlite_db, conf):
    """Screened hosts are not asked to find the passing ones; a NoValidHost
    explanation still gives their own reason, and a claim's recheck asks."""
    flt = ScreenedGoldFilter(conf)
    s = _sched(sqlite_db, conf, [flt])
    hm = s.host_manager
    hm.refresh()
    eight = {h.host for h in hm.host_states() if h.vcpus == 8}
    ScreenedGoldFilter.calls = 0
    placed = s.select_destinations(_spec(s))[0][0].host
    # 8 hosts, 3 with 8 vCPUs screened; the chosen host once more in the recheck.
    assert ScreenedGoldFilter.calls == len(HOSTS) - len(eight) + 1
    assert placed not in eight
    with pytest.raises(exception.NoValidHost) as err:
        s.select_destinations(_spec(s, force_hosts=sorted(eight)))
    filters = {f["filter"]: f for f in err.value.summary["filters"]}
    assert filters["ScreenedGoldFilter"]["reasons"] == {"too small": len(eight)}


def test_conformance_catches_a_screen_that_refuses_a_passing_host(conf):
    hosts = [fakes.fake_host(f"h{i}", vcpus=8 * (1 + i % 3),
                             stats={"tier": "gold" if i % 2 else "silver"}) for i in range(8)]
    req = testing.request(fakes.fake_spec())
    testing.check_filter(ScreenedGoldFilter(conf), hosts, [req])
    with pytest.raises(testing.ConformanceError, match="the screen refuses"):
        testing.check_filter(WrongScreenFilter(conf), hosts, [req])


def test_a_screen_must_be_a_mask(sqlite_db, conf):
    class BadScreen(GoldOnlyFilter):
        def screen(self, cols, request):
            return [1, 0]
    s = _sched(sqlite_db, conf, [BadScreen(conf)])
    with pytest.raises(exception.PluginError, match="screen must be a bool mask"):
        s.select_destinations(_spec(s))


def test_the_numa_screen_refuses_only_hosts_that_fail(sqlite_db, conf):
    """The NUMA filter's screen on a fleet with usage: it does screen hosts, and
    each of them fails the check (the whole-fleet conformance run covers more)."""
    from scheduler.filters.numa_topology import NUMATopologyFilter

    rng = random.Random(5)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(te._fleet(rng, 60)))
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf)
    placed = []
    for _ in range(60):
        try:
            placed += [x[0].instance_uuid
                       for x in sched.select_destinations(te._request(rng, sched, "g", placed))]
        except exception.NoValidHost:
            pass
    hosts = sched.host_manager.host_states()
    cols = HostColumns(hosts)
    flt = NUMATopologyFilter(conf)
    # Requests sized to what hosts have exactly (the screen's edges), with every
    # thread policy, explicit page sizes and two cells.
    wants = []
    for free in sorted({int(x) for x in cols.numa_free_pcpus if x > 0}):
        for policy in ("prefer", "isolate", "require"):
            wants.append({"vcpus": free, "memory_mb": 512,
                          "extra_specs": {"hw:cpu_policy": "dedicated",
                                          "hw:cpu_thread_policy": policy}})
        wants.append({"vcpus": free, "memory_mb": 512,
                      "extra_specs": {"hw:cpu_policy": "dedicated",
                                      "hw:emulator_threads_policy": "isolate"}})
    for room in sorted({int(x) for x in cols.numa_shared_room if x > 0}):
        wants.append({"vcpus": room, "memory_mb": 512, "extra_specs": {"hw:numa_nodes": "1"}})
    for kb in sorted({int(x) for x in cols.numa_free_kb_2m if x > 0}):
        wants.append({"vcpus": 1, "memory_mb": kb // 1024,
                      "extra_specs": {"hw:mem_page_size": "2048"}})
        wants.append({"vcpus": 1, "memory_mb": kb // 1024,
                      "extra_specs": {"hw:mem_page_size": "large"}})
    for total in sorted({int(x) for x in cols.numa_free_pcpus_total if x > 0 and x % 2 == 0}):
        wants.append({"vcpus": total, "memory_mb": 1024,
                      "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}})
    for free in sorted({int(x) for x in cols.cell_small_free_kb.ravel() if x > 0}):
        for extra in ({}, {"hw:cpu_policy": "dedicated"}):
            wants.append({"vcpus": 2, "memory_mb": free // 1024, "extra_specs": {
                "hw:numa_nodes": "1", **extra}})
    for room in sorted({float(x) for x in cols.cell_memory_mb.ravel() if x > 0}):
        wants.append({"vcpus": 1, "memory_mb": int(room), "extra_specs": {"hw:numa_nodes": "1"}})
    screened = sure = passed = 0
    for flavor in wants:
        spec = sched.parse_request({"flavor": {"root_gb": 1, **flavor}})
        req = testing.request(spec)
        state = flt.prepare(req)
        screened += int(flt.screen(cols, state).sum())
        sure += int(np.sum(flt.sure_passes(cols, state)))
        passed += sum(flt.host_passes(h, spec) is None for h in hosts)
        testing.check_filter(flt, hosts, [req])
    assert screened > 0 and passed > 0 and sure > 0


def _edge_host(rng, i):
    from numa import topology as topo

    cells = []
    for cid in range(rng.choice([1, 2])):
        base = cid * 8
        pcpus = list(range(base, base + 6))
        pinned = rng.sample(pcpus, rng.randrange(0, 6))
        cell = {"id": cid, "cpuset": [base + 6, base + 7], "pcpuset": pcpus,
                "siblings": [[c, c + 1] for c in range(base, base + 8, 2)],
                "memory_mb": 8192, "pinned_cpus": sorted(pinned),
                "cpu_usage": rng.choice([0, 1, 3, 6]),
                "memory_usage": rng.choice([0, 1024, 4096, 7000])}
        if rng.random() < 0.6:
            huge = rng.choice([0, 262144, 1048576])
            giga = rng.choice([0, 1048576, 2097152])
            small = (8388608 - huge - giga) // 4     # 8 GiB in KiB, in 4 KiB pages
            cell["mempages"] = [{"size_kb": 4, "total": small,
                                 "used": rng.choice([0, small // 8, small // 2])},
                                {"size_kb": 2048, "total": huge // 2048,
                                 "used": rng.choice([0, 1, 64]) if huge else 0},
                                {"size_kb": 1048576, "total": giga // 1048576,
                                 "used": rng.choice([0, 1]) if giga else 0}]
            if rng.random() < 0.25:         # a cell whose smallest pages are 2 MiB
                cell["mempages"] = cell["mempages"][1:] or cell["mempages"]
                cell["mempages"][0]["total"] = max(cell["mempages"][0]["total"], 1024)
        cells.append(cell)
    return fakes.fake_host(f"e{i}", numa_topology=topo.HostTopology.from_primitive(
        {"cells": cells}), cpu_allocation_ratio=rng.choice([1.0, 2.0]),
        ram_allocation_ratio=rng.choice([1.0, 1.5]))


def test_the_numa_shortcuts_at_their_edges(conf):
    """Requests sized to each host cell's exact free pCPUs, whole cores, sibling
    pairs, shared room, small pages and memory room (and one more), with one
    guest cell and with two: the screen refuses and sure_passes passes only
    hosts the check agrees with."""
    from scheduler.filters.numa_topology import NUMATopologyFilter

    rng = random.Random(3)
    hosts = [_edge_host(rng, i) for i in range(40)]
    cols = HostColumns(hosts)
    sizes = set()
    for name in ("cell_free_pcpus", "cell_free_cores", "cell_free_pair_cpus",
                 "cell_shared_room"):
        sizes |= {int(x) for x in getattr(cols, name).ravel() if x >= 1}
    memories = set()
    for values in (cols.cell_small_free_kb / 1024, cols.cell_small_total_kb / 1024,
                   cols.cell_memory_mb - cols.cell_memory_usage,
                   cols.cell_memory_mb * 1.5 - cols.cell_memory_usage):
        memories |= {int(x) for x in values.ravel() if x >= 1}
    flt = NUMATopologyFilter(conf)
    reqs = []
    for n in sorted(sizes):
        for vcpus in (n, n + 1):
            for extra in ({"hw:cpu_policy": "dedicated"},
                          {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
                          {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"},
                          {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require",
                           "hw:emulator_threads_policy": "isolate"},
                          {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate",
                           "hw:emulator_threads_policy": "isolate"},
                          {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0",
                           "hw:cpu_thread_policy": "require",
                           "hw:emulator_threads_policy": "isolate"},
                          {"hw:numa_nodes": "1"}):
                if extra.get("hw:cpu_policy") == "mixed" and vcpus < 2:
                    continue
                reqs.append({"vcpus": vcpus, "memory_mb": 1024, "extra_specs": extra})
    for m in sorted(memories):
        for mem in (m, m + 1, m + 3):
            for extra in ({"hw:cpu_policy": "dedicated"}, {"hw:numa_nodes": "1"}):
                reqs.append({"vcpus": 1, "memory_mb": mem, "extra_specs": extra})
    for name, size in (("cell_free_2m_pages", 2048), ("cell_free_1g_pages", 1048576),
                       ("cell_small_free_kb", None)):
        for value in sorted({int(x) for x in getattr(cols, name).ravel() if x > 0}):
            mb = value * size // 1024 if size else value // 1024
            for mem in (mb, mb + 1, mb + 2, mb + (size or 0) // 1024):
                for page in ("small", "large", "any", "2MB", "1GB"):
                    for extra in ({"hw:cpu_policy": "dedicated"}, {"hw:numa_nodes": "1"}):
                        reqs.append({"vcpus": 1, "memory_mb": mem, "extra_specs": {
                            "hw:mem_page_size": page, **extra}})
    # two guest cells, each on a host cell of its own, at the same edges
    two = {"hw:numa_nodes": "2"}
    for n in sorted(sizes):
        for vcpus in (2 * n, 2 * n + 2):
            for extra in ({}, {"hw:cpu_policy": "dedicated"},
                          {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate",
                           "hw:emulator_threads_policy": "isolate"},
                          {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}):
                reqs.append({"vcpus": vcpus, "memory_mb": 2048,
                             "extra_specs": {**two, **extra}})
    for m in sorted(memories):
        for mem in (2 * m, 2 * m + 2, 2 * m + 6):
            for extra in ({}, {"hw:cpu_policy": "dedicated"},
                          {"hw:mem_page_size": "large"}, {"hw:mem_page_size": "any"}):
                reqs.append({"vcpus": 2, "memory_mb": mem, "extra_specs": {**two, **extra}})
    sure = sure_two = 0
    for flavor in reqs:
        try:
            spec = fakes.fake_spec(flavor={"root_gb": 1, **flavor})
        except exception.InvalidRequest:
            continue            # e.g. memory not a whole number of the pages asked
        req = testing.request(spec)
        passed = int(np.sum(flt.sure_passes(cols, flt.prepare(req))))
        sure += passed
        if len(spec.numa_topology.cells) == 2:
            sure_two += passed
        testing.check_filter(flt, hosts, [req])
    assert sure > 0 and sure_two > 0
