"""HostColumns.aggregate_min equals HostState.aggregate_min_float row by row,
also after hosts change aggregates (the per-aggregate row index is rebuilt);
class codes follow host changes and survive recoding."""
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
    # columns follow (the owner rewrites the rows), and keys first asked for
    # now see the moves.
    extra = fakes.aggregate({"never_set": "7", "ram_weight_multiplier": "-9"})
    for hs in rng.sample(hosts, 10):
        hs.set_aggregates(tuple(rng.sample(pool + [extra], rng.randint(0, 3))), "nova")
        cols.update(cols.row_of_node[hs.node_id], hs)
    for key in KEYS:
        _check(cols, key)
    assert cols.aggregate_min("never_set")[1].any() == any(
        extra in hs.aggregates for hs in hosts)


def test_class_codes_follow_changes_and_recoding():
    hosts = [fakes.fake_host(f"h{i}", stats={"tier": "gold" if i % 2 else "silver"})
             for i in range(6)]
    cols = HostColumns(hosts)
    cols.classes.register("tier", lambda h: h.stats.get("tier"))
    codes = cols.class_codes("tier")
    assert len(set(codes.tolist())) == 2
    assert codes[1] == codes[3] != codes[0]
    hosts[0].stats = {"tier": "gold"}
    cols.update(0, hosts[0])
    assert codes[0] == codes[1]
    fresh = cols.recoded()
    assert fresh.classes is not cols.classes
    assert fresh.class_codes("tier").tolist() == [0] * 4 + [0, 0] or \
        len(set(fresh.class_codes("tier").tolist())) == 2
    assert fresh.classes.size("tier") == 2      # only the keys rows still have
    assert fresh.hosts == cols.hosts and (fresh.free_ram == cols.free_ram).all()
