from oslo_config import cfg

from scheduler.weights.build_failure import BuildFailureWeigher
from tests.unit.scheduler import fakes


def test_raw_weight_is_minus_failures():
    w = BuildFailureWeigher(cfg.CONF)
    assert fakes.weigh(w, fakes.fake_host(failed_builds=3), fakes.fake_spec(), fakes.ctx()) == -3
    assert fakes.weigh(w, fakes.fake_host(), fakes.fake_spec(), fakes.ctx()) == 0


def test_multiplier():
    w = BuildFailureWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == 1000000.0
    with fakes.config("filter_scheduler", build_failure_weight_multiplier=0.0):
        assert fakes.multiplier(w, fakes.fake_host()) == 0.0
    host = fakes.fake_host(aggregates=[{"build_failure_weight_multiplier": "10"}])
    assert fakes.multiplier(w, host) == 10.0


def test_no_failures_anywhere_is_one_weight_then_a_failure_counts():
    """With no failed build on any row the weigher gives one number (it adds
    nothing); once a row is rewritten with a failure, that row weighs less."""
    from scheduler.host_columns import HostColumns

    w = BuildFailureWeigher(cfg.CONF)
    hosts = [fakes.fake_host(f"h{i}") for i in range(3)]
    cols = HostColumns(hosts)
    assert w.weigh_vector(cols, None) == 0.0
    hosts[1].failed_builds = 2
    cols.update(1, hosts[1])
    assert list(w.weigh_vector(cols, None)) == [0.0, -2.0, 0.0]
