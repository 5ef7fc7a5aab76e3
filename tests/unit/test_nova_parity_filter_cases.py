"""The filter parity harness's pure parts (tools/nova_parity): the seeded case
generator covers every filter with edge-heavy values, its requests are valid
or refused naming a field, and the weigher order comparison ignores ties only.
(The comparison with Nova itself runs in ``tox -e nova-parity``.)"""
from __future__ import annotations

import collections
import functools
import json

from scheduler.exception import InvalidRequest
from scheduler.request_spec import RequestSpec
from tools.nova_parity import filter_cases
from tools.nova_parity.filter_rules import RULES
from tools.nova_parity.filters import top_order_agrees


def test_same_seed_same_cases_other_seed_other_cases():
    assert filter_cases.make_cases(3, 4) == filter_cases.make_cases(3, 4)
    assert filter_cases.make_cases(3, 4) != filter_cases.make_cases(4, 4)


@functools.cache
def _default_run() -> list[dict]:
    return filter_cases.make_cases(1, 200)      # what the harness runs by default


def test_every_filter_and_enough_cases():
    cases = _default_run()
    count = collections.Counter(c["filter"] for c in cases)
    assert set(count) == set(filter_cases.FILTERS)
    assert sum(len(c["hosts"]) for c in cases) >= 20000


def test_cases_are_edge_heavy():
    cases = _default_run()
    text = json.dumps(cases, ensure_ascii=False)
    queries = {(c["request"].get("scheduler_hints") or {}).get("query") for c in cases}
    assert '["and"]' in queries and '["not"]' in queries
    for wanted in ['"capabilities:"', '"aggregate_instance_extra_specs:"', '"X86_64"',
                   '"vm_mode"', '"architecture"', '"hypervisor_type": "KVM"', ">=v8",
                   "8.2rc1", "1.0.post1", '"PHYSNET1"', '"hw:maxphysaddr_bits"',
                   '"hw_maxphysaddr_bits"', "nörd", '" gold"', '"04"', "<all-in>", "<or>",
                   '"heartbeat_age": -4000', '"max_io_ops_per_host": "x"']:
        assert wanted in text, wanted


def test_requests_are_valid_or_refused_naming_a_field():
    fields = collections.Counter()
    for case in filter_cases.make_cases(2, 30):
        try:
            RequestSpec.from_primitive(case["request"])
        except InvalidRequest as e:
            fields[e.field.split(".")[0]] += 1
    assert sum(fields.values()) < 0.1 * 30 * len(filter_cases.FILTERS)


def test_rules_name_a_category_and_both_functions():
    for name, label, category, applies, without in RULES:
        assert name == "*" or name in filter_cases.FILTERS
        assert category in ("Nova bug", "documented") and label
        assert callable(applies) and callable(without)


def test_top_order_ignores_ties_only():
    nova = [float(w) for w in range(30)]
    assert top_order_agrees(list(nova), nova)
    assert top_order_agrees([w * 2 + 1 for w in nova], nova)         # same order
    swapped = list(nova)
    swapped[29], swapped[28] = swapped[28], swapped[29]
    assert not top_order_agrees(swapped, nova)
    tied = list(nova)
    tied[29] = tied[28] = 50.0                                        # tied in Nova
    assert top_order_agrees([w for w in nova], tied) is False          # Berth orders them
    assert top_order_agrees(list(tied), tied)
    assert not top_order_agrees(None, nova)                            # all equal in Berth
