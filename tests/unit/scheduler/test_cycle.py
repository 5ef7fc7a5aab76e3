"""Cycle.recheck: the host as it is now, whether its row of the cycle's columns
is current (read where it is) or behind the host (new columns of the host);
weighing and filtering read the rows as claims left them."""
from __future__ import annotations

import numpy as np
import pytest
from oslo_config import cfg

from scheduler import cycle as cycles
from scheduler import testing
from scheduler.filters import BaseHostFilter
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


# -- weighing: the rows' values as they are when the request weighs them -------------------

def _weigh(cols, weighers, spec=None):
    cycle = cycles.Cycle(cycles.plan([]), weighers, cols, keep=1)
    request = testing.request(spec or fakes.fake_spec())
    rows, _ = cycle.candidates(request)
    return {hs.host: weight for weight, hs in cycle.weigh(request, rows)}


def test_a_claim_between_two_requests_moves_the_next_requests_weights():
    """The next request weighs the rows as the claims left them: a claim on the
    best host (its row rewritten) costs it the RAM and I/O weight it had."""
    from scheduler.weights.io_ops import IoOpsWeigher
    from scheduler.weights.ram import RAMWeigher

    hosts = [fakes.fake_host(f"h{i}", memory_mb=16384 + 1024 * i) for i in range(3)]
    cols = HostColumns(hosts)
    weighers = [RAMWeigher(cfg.CONF), IoOpsWeigher(cfg.CONF)]
    cols.update(0, hosts[0])
    before = _weigh(cols, weighers)
    assert max(before, key=before.get) == "h2"
    _take_memory(hosts[2], 4096)
    hosts[2].num_io_ops += 1
    cols.update(2, hosts[2])
    after = _weigh(cols, weighers)
    assert max(after, key=after.get) == "h1"
    # h2 now has the least free RAM (0) and the most I/O (-1)
    assert after["h2"] == -1.0 and after["h1"] == 1.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_one_weight_that_is_not_finite_is_a_plugin_error(bad):
    """One bad weight among finite ones, wherever it is: the range of the
    weights is the finiteness check."""
    import numpy as np

    from scheduler import exception
    from scheduler.weights import BaseWeigher

    class OneBad(BaseWeigher):
        def __init__(self, conf, row):
            super().__init__(conf)
            self.row = row

        def weigh_vector(self, cols, request):
            out = np.arange(cols.n, dtype=np.float64)
            out[self.row] = bad
            return out

    cols = HostColumns([fakes.fake_host(f"h{i}") for i in range(5)])
    for row in range(5):
        with pytest.raises(exception.PluginError, match="finite"):
            _weigh(cols, [OneBad(cfg.CONF, row)])
        with pytest.raises(exception.PluginError, match="finite"):
            testing.raw_weights(OneBad(cfg.CONF, row), cols.hosts, testing.request(
                fakes.fake_spec()))


# -- filtering: per-class answers of one instance -------------------------------------------

class _ByName(BaseHostFilter):
    """Refuses the hosts named in ``refused`` (read when asked); one class per host."""

    def __init__(self, conf, refused):
        super().__init__(conf)
        self.refused, self.asked = refused, []

    def class_key(self, host):
        return (host.host, host.num_io_ops)

    def memo_key(self, state):
        return "same"               # answers remembered across instances

    def host_passes(self, host, state):
        self.asked.append(host.host)
        return "refused" if host.host in self.refused else None


def test_an_instance_filtered_again_keeps_the_class_answers_it_had():
    """A second ``candidates`` for the same instance (a claim retry) reads the
    answers of the first, even for a host whose class changed meanwhile: no
    class is asked again, and the rows are the same."""
    flt = _ByName(cfg.CONF, {"h1"})
    hosts = [fakes.fake_host(f"h{i}") for i in range(4)]
    cols = HostColumns(hosts)
    for column, key_fn in flt.class_columns().items():
        cols.classes.register(column, key_fn)
    cycle = cycles.Cycle(cycles.plan([flt]), [], cols, keep=1)
    request = testing.request(fakes.fake_spec())
    rows, removed = cycle.candidates(request)
    assert rows.tolist() == [0, 2, 3] and removed["_ByName"] == 1
    assert sorted(flt.asked) == ["h0", "h1", "h2", "h3"]
    hosts[2].num_io_ops += 1            # a new class for h2
    flt.refused.add("h2")
    cols.update(2, hosts[2])
    again, _ = cycle.candidates(request)
    assert again.tolist() == [0, 2, 3] and len(flt.asked) == 4
    # the next instance asks the class h2 is in now
    rows, _ = cycle.candidates(testing.request(fakes.fake_spec(), index=1))
    assert rows.tolist() == [0, 3] and flt.asked[4:] == ["h2"]


# -- vector filters: refusal masks, codes made when read -------------------------------

class _TwoMasks(BaseHostFilter):
    """Refuses the hosts named in ``first`` as "first", then those in ``second``."""

    def __init__(self, conf, first, second):
        super().__init__(conf)
        self.first, self.second = first, second

    def refusals(self, cols, request):
        names = np.array([hs.host for hs in cols.hosts])
        return [("first", np.isin(names, self.first)), ("never", np.zeros(cols.n, bool)),
                ("second", np.isin(names, self.second))]


def test_a_vector_filter_s_first_refusing_mask_names_a_row_everywhere():
    """Filtering, the explanation and the recheck agree: a row refused by two
    masks is counted and rechecked under the first; a mask refusing no row
    is neither."""
    flt = _TwoMasks(cfg.CONF, first=["h0", "h1"], second=["h1", "h2"])
    hosts = [fakes.fake_host(f"h{i}") for i in range(5)]
    cols = HostColumns(hosts)
    cycle = cycles.Cycle(cycles.plan([flt]), [], cols, keep=1)
    request = testing.request(fakes.fake_spec())
    rows, removed = cycle.candidates(request)
    assert rows.tolist() == [3, 4] and removed["_TwoMasks"] == 3
    summary = cycle.explain(request).summary(0)
    reasons = [f["reasons"] for f in summary["filters"] if f["filter"] == "_TwoMasks"]
    assert reasons == [{"first": 2, "second": 1}]
    assert [cycle.recheck(request, hs) for hs in hosts] == [
        "_TwoMasks: first", "_TwoMasks: first", "_TwoMasks: second", None, None]


def test_steps_run_vector_filters_first_in_configured_order():
    from scheduler.filters.availability_zone import AvailabilityZoneFilter

    steps = cycles.plan([_ByName(cfg.CONF, set()), RamFilter(cfg.CONF),
                         AvailabilityZoneFilter(cfg.CONF)])
    order = [s.name for s in steps.run_order]
    assert order.index("RamFilter") < order.index("_ByName")
    cycle = cycles.Cycle(tuple(steps), [], HostColumns([fakes.fake_host()]), keep=1)
    assert cycle._run_order == steps.run_order


class _LiveMask(BaseHostFilter):
    """Refuses the rows of a bool column it hands over as is (a view of the
    live column, as ``ComputeFilter`` hands ``cols.disabled``)."""

    def __init__(self, conf, column):
        super().__init__(conf)
        self.column = column

    def refusals(self, cols, request):
        return [("marked", self.column[:])]


def test_a_vector_filter_s_mask_is_the_moment_it_answered():
    """A mask that is a view of a column rewritten in place afterwards (a
    refresh) does not change the request's answers: the candidates already
    taken, the explanation and the codes read later agree."""
    column = np.array([True, False, False, False])
    flt = _LiveMask(cfg.CONF, column)
    hosts = [fakes.fake_host(f"h{i}") for i in range(4)]
    cycle = cycles.Cycle(cycles.plan([flt]), [], HostColumns(hosts), keep=1)
    request = testing.request(fakes.fake_spec())
    rows, removed = cycle.candidates(request)
    assert rows.tolist() == [1, 2, 3] and removed["_LiveMask"] == 1
    column[:] = [False, True, True, False]       # rewritten after the answer
    summary = cycle.explain(request).summary(0)
    assert [f["reasons"] for f in summary["filters"] if f["filter"] == "_LiveMask"] == \
        [{"marked": 1}]
    again, _ = cycle.candidates(request)
    assert again.tolist() == [1, 2, 3]
