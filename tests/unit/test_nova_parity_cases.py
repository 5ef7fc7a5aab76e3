"""The parity harness's case generator (tools/nova_parity/cases.py): seeded, valid
``numa fit`` input, and covering what the harness claims to cover. (The comparison
with Nova itself runs in ``tox -e nova-parity``.)"""
from __future__ import annotations

import collections

from numa.tool import fit_case
from tools.nova_parity.cases import make_cases


def test_same_seed_same_cases_other_seed_other_cases():
    assert make_cases(7, 50) == make_cases(7, 50)
    assert make_cases(7, 50) != make_cases(8, 50)


def test_cases_are_valid_input_and_cover_the_space():
    seen = collections.Counter()
    fits = 0
    for case in make_cases(1, 400):
        for mode in ("refuse", "reserve-siblings"):
            answer = fit_case(dict(case, isolate_on_smt_hosts=mode))
            assert "error" not in answer, (case, answer)
        fits += answer["fits"]
        cells = case["host"]["cells"]
        guest = case["instance"]["cells"]
        assert all(cell.get("mempages") for cell in cells)   # as every Nova host
        for cell in cells:
            small = cell["mempages"][0]
            pages_mb = sum(p["total"] * p["size_kb"] for p in cell["mempages"]) // 1024
            assert small["size_kb"] == 4 and pages_mb == cell["memory_mb"]
        seen["smt" if any(len(s) > 1 for c in cells for s in c["siblings"]) else "no-smt"] += 1
        seen[f"policy {guest[0]['cpu_policy']}"] += 1
        seen[f"thread {guest[0]['cpu_thread_policy']}"] += 1
        seen[f"pagesize {guest[0]['pagesize']}"] += 1
        seen[f"guest cells {len(guest)}"] += 1
        seen["emulator isolate" if case["instance"]["emulator_threads_policy"] == "isolate"
             else "emulator other"] += 1
        seen["limits null" if case["limits"] is None else "limits"] += 1
        seen["used pcpus" if any(c["pinned_cpus"] for c in cells) else "no used pcpus"] += 1
    for wanted in ["smt", "no-smt", "policy shared", "policy dedicated", "policy mixed",
                   "thread isolate", "thread require", "thread prefer", "pagesize any",
                   "pagesize large", "pagesize small", "pagesize 2048", "pagesize 1048576",
                   "pagesize None", "guest cells 2", "guest cells 3", "emulator isolate",
                   "limits null", "limits", "used pcpus"]:
        assert seen[wanted] >= 5, (wanted, seen)
    assert 0.1 < fits / 400 < 0.6
