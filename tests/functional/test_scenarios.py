"""Every scenario file in tests/functional/scenarios/ runs and all its expectations hold.

Scenarios run in-process on a throwaway SQLite database (berth-manage simulate);
after every step the runner checks usage == sum of allocations <= capacity x ratio.
"""
from __future__ import annotations

import pathlib

import pytest
from oslo_config import cfg

from scheduler import simulate

SCENARIOS = sorted((pathlib.Path(__file__).parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path):
    result = simulate.run_scenario(simulate.load_scenario(str(path)), cfg.CONF)
    assert result.ok, "\n" + simulate.format_table(result)


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 10
