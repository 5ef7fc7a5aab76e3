"""``berth-manage numa fit`` wiring."""
from __future__ import annotations

import argparse
import io
import json

from scheduler.cmd import manage_numa

CASE = {"host": {"cells": [{"id": 0, "cpuset": [0, 1], "pcpuset": [], "memory_mb": 2048}]},
        "instance": {"cells": [{"id": 0, "cpuset": [0], "memory_mb": 512,
                                "cpu_policy": "shared"}]},
        "limits": None, "id": "a"}


def parser():
    top = argparse.ArgumentParser(prog="berth-manage")
    manage_numa.register(top.add_subparsers(dest="command"))
    return top


def test_numa_fit_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(CASE) + "\nbad\n"))
    args = parser().parse_args(["numa", "fit"])
    assert args.func(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["fits"] and lines[0]["id"] == "a"
    assert "error" in lines[1]


def test_numa_fit_reads_a_file(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(CASE) + "\n")
    args = parser().parse_args(["numa", "fit", str(cases)])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["fits"]
    args = parser().parse_args(["numa", "fit", str(tmp_path / "missing")])
    assert args.func(args) == 2
