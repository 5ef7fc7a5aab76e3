"""HostColumns.aggregate_min equals HostState.aggregate_min_float row by row,
also after hosts change aggregates (the per-aggregate row index is rebuilt)."""
from __future__ import annotations

import random

import pytest

from scheduler.host_columns import HostColumns
from tests.unit.scheduler import fakes

KEYS = ("ram_weight_multiplier", "cpu_allocation_ratio", "never_set")


def _check(cols: HostColumns, key: str) -> None:
    values, present = cols.aggregate_min(key)
    for i, hs in enumerate(cols.hosts):
        want = hs.aggregate_min_float(key, None)
        assert present[i] == (want is not None), (key, hs.host)
        assert values[i] == (0.0 if want is None else want), (key, hs.host)


@pytest.mark.parametrize("seed", range(5))
def test_aggregate_min_matches_every_host(seed):
    rng = random.Random(seed)
    pool = [fakes.aggregate({}),
            fakes.aggregate({"ram_weight_multiplier": "-2.5"}),
            fakes.aggregate({"ram_weight_multiplier": "oops"}),       # invalid: ignored
            fakes.aggregate({"ram_weight_multiplier": "3", "cpu_allocation_ratio": "4.0"}),
            fakes.aggregate({"cpu_allocation_ratio": "1.5"})]
    hosts = [fakes.fake_host(f"h{i}", aggregates=rng.sample(pool, rng.randint(0, 3)))
             for i in range(60)]
    cols = HostColumns(hosts)
    for key in KEYS:
        _check(cols, key)
    # Hosts move between aggregates after the columns were built: the cached
    # columns follow (row updates), and keys first asked for now see the moves.
    extra = fakes.aggregate({"never_set": "7", "ram_weight_multiplier": "-9"})
    for hs in rng.sample(hosts, 10):
        hs.set_aggregates(tuple(rng.sample(pool + [extra], rng.randint(0, 3))), "nova")
    for key in KEYS:
        _check(cols, key)
    assert cols.aggregate_min("never_set")[1].any() == any(
        extra in hs.aggregates for hs in hosts)
