import json

import pytest
from oslo_config import cfg

from scheduler import exception, testing
from scheduler.filters import json_filter
from scheduler.filters.json_filter import JsonFilter
from tests.unit.scheduler import fakes


def _spec(query):
    return fakes.fake_spec(scheduler_hints={"query": query})


def _passes(host, query):
    return fakes.passes(JsonFilter(cfg.CONF), host, _spec(json.dumps(query)))


def _host(**attrs):
    attrs.setdefault("memory_mb", 16384)
    attrs.setdefault("memory_mb_used", 4096)
    attrs.setdefault("stats", {"tier": "gold", "cores": "16"})
    attrs.setdefault("metrics", {"cpu.percent": 30, "load": 1.5})
    return fakes.fake_host(**attrs)


@pytest.mark.parametrize("query,ok", [
    (["=", "$hypervisor_type", "QEMU"], True),
    (["=", "$hypervisor_type", "xen"], False),
    ([">=", "$free_ram_mb", 12288], True),
    ([">", "$free_ram_mb", 12288], False),
    (["<", "$num_instances", 1], True),
    (["<=", "$vcpus", 7], False),
    (["in", "$stats.tier", "silver", "gold"], True),
    (["in", "$stats.tier", "silver", "bronze"], False),
    (["not", ["=", "$stats.tier", "gold"]], False),
    (["and", [">=", "$free_ram_mb", 1024], ["=", "$stats.tier", "gold"]], True),
    (["and", [">=", "$free_ram_mb", 1024], ["=", "$stats.tier", "bronze"]], False),
    (["or", ["=", "$stats.tier", "bronze"], [">", "$metrics.cpu.percent", 20]], True),
    (["<", "$metrics.cpu.percent", 20], False),           # dotted metric name
    ([">=", "$stats.cores", 8], True),                    # numeric string vs number
    ([">=", "$stats.cores", "8"], False),                 # strings compare as strings
    (["=", "$cpu_info.vendor", "Intel"], False),          # missing value
    (["not", ["=", "$cpu_info.vendor", "Intel"]], True),
    (["<", 1, "$vcpus", 16], True),                       # first against each other
    (["<", 10, "$vcpus", 16], False),
    (["=", "$vcpus", True], False),                       # booleans equal booleans only
])
def test_operators(query, ok):
    reason = _passes(_host(), query)
    assert (reason is None) == ok, reason


def test_reason_names_the_query():
    assert _passes(_host(), ["=", "$stats.tier", "bronze"]) == \
        'query ["=","$stats.tier","bronze"] is false'


def test_long_query_reason_is_cut():
    query = ["in", "$stats.tier"] + [f"value-{i}" for i in range(40)]
    reason = _passes(_host(), query)
    assert reason.startswith('query ["in","$stats.tier","value-0"') and reason.endswith(
        "... is false") and len(reason) < 140


def test_no_query_skips():
    flt = JsonFilter(cfg.CONF)
    assert fakes.skips(flt, fakes.fake_spec())
    assert fakes.skips(flt, _spec(""))
    assert fakes.skips(flt, _spec("[]"))


def test_query_may_be_given_as_a_list_or_a_one_item_list():
    assert fakes.passes(JsonFilter(cfg.CONF), _host(), _spec(["=", "$stats.tier", "gold"])) \
        is None
    text = json.dumps(["=", "$stats.tier", "bronze"])
    assert fakes.passes(JsonFilter(cfg.CONF), _host(), _spec([text])) is not None


@pytest.mark.parametrize("query,field,reason", [
    ("[", "scheduler_hints.query", "not valid JSON"),
    ('{"a": 1}', "scheduler_hints.query", "expected a list"),
    ('["like", "$vcpus", 1]', "scheduler_hints.query[0]", "unknown operator 'like'"),
    ('["=", "$vcpu", 1]', "scheduler_hints.query[1]", "unknown variable '$vcpu'"),
    ('["=", "$stats.", 1]', "scheduler_hints.query[1]", "empty name"),
    ('["=", "$vcpus"]', "scheduler_hints.query", "needs at least two operands"),
    ('["not", 1, 2]', "scheduler_hints.query", "'not' takes one operand"),
    ('["and"]', "scheduler_hints.query", "needs at least one operand"),
    ('["and", ["=", 1, 1], []]', "scheduler_hints.query[2]", "empty expression"),
    ('["=", "$vcpus", null]', "scheduler_hints.query[2]", "expected a nested query"),
    ('["=", "$vcpus", {"a": 1}]', "scheduler_hints.query[2]", "expected a nested query"),
    ('["or", ["=", 1, 1], ["and", ["<", "$vcpus", 1], [1]]]', "scheduler_hints.query[2][2][0]",
     "unknown operator 1"),
])
def test_malformed_query_is_invalid_request(query, field, reason):
    with pytest.raises(exception.InvalidRequest) as err:
        _spec(query)
    assert err.value.field == field
    assert reason in err.value.reason


def test_size_and_depth_are_bounded():
    deep = ["=", 1, 1]
    for _ in range(json_filter.MAX_QUERY_DEPTH):
        deep = ["not", deep]
    with pytest.raises(exception.InvalidRequest, match="nested deeper than"):
        _spec(deep)
    wide = ["and"] + [["=", "$vcpus", i] for i in range(json_filter.MAX_QUERY_NODES)]
    with pytest.raises(exception.InvalidRequest, match="more than 256 operators"):
        _spec(wide)
    with pytest.raises(exception.InvalidRequest, match="longer than 8192 characters"):
        _spec(json.dumps(["in", "$stats.tier", "x" * 9000]))
    # Very deep JSON text is refused before Python's recursion limit is reached.
    with pytest.raises(exception.InvalidRequest) as err:
        _spec("[" * 4000 + "]" * 4000)
    assert err.value.field.startswith("scheduler_hints.query")
    # Just inside the bounds is fine.
    ok = ["=", 1, 1]
    for _ in range(json_filter.MAX_QUERY_DEPTH - 1):
        ok = ["and", ok]
    _spec(ok)


def test_vector_form_equals_the_per_host_form_on_edge_cases():
    flt = JsonFilter(cfg.CONF)
    assert flt.has_vector and flt.has_per_host
    hosts = [_host(), _host(stats={"cores": "abc"}), _host(hypervisor_version=None),
             _host(vcpus_used=7, reserved_host_cpus=1), _host(local_gb=0, stats={}),
             _host(cpu_allocation_ratio=2.0, metrics={"load": True}), _host(memory_mb_used=0)]
    queries = [
        [">=", "$free_vcpus", 1], ["=", "$local_gb", 100], [">", "$cpu_allocation_ratio", 1.5],
        ["<", "$vcpus_used", "$vcpus"], [">=", "$free_ram_mb", "12288"], ["=", "$vcpus", "x"],
        ["=", "$vcpus", True], [">", "$stats.cores", 4], ["=", "$hypervisor_version", 8002000],
        ["not", "$hypervisor_version"], ["and", "$metrics.load", "$vcpus"],
        ["or", "$num_instances", ["=", "$stats.cores", "16"]],
        ["=", ["<", "$vcpus", 16], True], ["in", "$free_disk_mb", 102400, "5"],
        ["<", 1, "$vcpus", "$free_ram_mb"], ["and", 0, "$vcpus"], ["or", "x", ["<", 1, 0]],
    ] + [[op, "$vcpus", 8] for op in ("=", "<", ">", "<=", ">=")] + \
        [[op, 8, "$vcpus"] for op in ("=", "<", ">", "<=", ">=")] + \
        [[op, "$vcpus", "$vcpus"] for op in ("=", "<", ">", "<=", ">=")]
    requests = [testing.request(_spec(json.dumps(q))) for q in queries]
    testing.check_filter(flt, hosts, requests)
    # And the answers are what the rule says (not only the same twice).
    answers = [testing.answers(flt, hosts, r) for r in requests]
    assert [a is None for a in answers[0]] == [True, True, True, False, True, True, True]
    assert [a is None for a in answers[7]] == [True, False, True, True, False, True, True]
    assert [a is None for a in answers[9]] == [False, False, True, False, False, False, False]


def test_conformance_on_many_hosts():
    hosts = [_host(), _host(), _host(stats={"tier": "silver"}), _host(memory_mb_used=15000),
             _host(metrics={}), _host(hypervisor_type="xen", stats={})]
    queries = [["=", "$stats.tier", "gold"], [">=", "$free_ram_mb", 4096],
               ["or", ["not", ["in", "$hypervisor_type", "xen"]], ["<", "$metrics.load", 2]],
               ["and", [">", "$metrics.load", 1], ["=", "$hypervisor_type", "QEMU"]]]
    flt = JsonFilter(cfg.CONF)
    requests = [testing.request(_spec(json.dumps(q))) for q in queries]
    testing.check_filter(flt, hosts, requests)
    assert [a is None for a in testing.answers(flt, hosts, requests[3])] == \
        [True, True, True, True, False, False]


def test_a_bad_query_never_reaches_the_daemon_as_an_exception(sqlite_db):
    """Through the scheduler: InvalidRequest before any host is read or claimed."""
    from db import hosts as db_hosts
    from scheduler import fleet as fleet_mod
    from scheduler.filter_scheduler import FilterScheduler, load_filters
    from scheduler.host_manager import HostManager

    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(
        {"hosts": [{"host": "h1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10}]}))
    s = FilterScheduler(HostManager(sqlite_db, cfg.CONF), cfg.CONF,
                        filters=load_filters(["JsonFilter"], cfg.CONF), weighers=[])
    flavor = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    with pytest.raises(exception.InvalidRequest):
        s.parse_request({"flavor": flavor, "scheduler_hints": {"query": '["<", "$vcpus"'}})
    ok = s.parse_request({"flavor": flavor,
                          "scheduler_hints": {"query": '["<", "$free_ram_mb", 100]'}})
    with pytest.raises(exception.NoValidHost) as err:
        s.select_destinations(ok)
    assert '1 JsonFilter (query ["<","$free_ram_mb",100] is false)' in err.value.reason
