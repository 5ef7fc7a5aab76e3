"""Cycle.recheck: the host as it is now, whether its row of the cycle's columns
is current (read where it is) or behind the host (new columns of the host)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler import cycle as cycles
from scheduler import testing
from scheduler.filters.ram import RamFilter
from scheduler.host_columns import HostColumns
from tests.unit.scheduler import fakes


def _take_memory(hs, amount: int) -> None:
    """Another process's claim, as a refresh takes it into the cached host."""
    usage = list(hs.usage)
    usage[hs.tree.by_class["MEMORY_MB"][0]] += amount
    hs.version += 1
    hs.set_providers(hs.tree, tuple(usage), hs.providers)
    hs.version += 1


def test_a_recheck_reads_the_host_as_it_is_now():
    hosts = [fakes.fake_host(f"h{i}", memory_mb=16384) for i in range(3)]
    cols = HostColumns(hosts)
    cycle = cycles.Cycle(cycles.plan([RamFilter(cfg.CONF)]), [], cols, keep=1)
    request = testing.request(fakes.fake_spec(memory_mb=8192))
    assert [cycle.recheck(request, hs) for hs in hosts] == [None] * 3
    # h1 filled up and its row not rewritten yet: the recheck sees the host
    _take_memory(hosts[1], 12288)
    refused = "RamFilter: insufficient RAM: need 8192 MB"
    assert cycle.recheck(request, hosts[1]) == refused
    # and the same once the row is rewritten (read where it is)
    cols.update(1, hosts[1])
    assert cycle.recheck(request, hosts[1]) == refused
    assert cycle.recheck(request, hosts[0]) is None
