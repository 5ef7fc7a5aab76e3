import pytest
from oslo_config import cfg

from scheduler.filters.num_instances import AggregateNumInstancesFilter, NumInstancesFilter
from tests.unit.scheduler import fakes


def _passes(filter_cls, host):
    return fakes.passes(filter_cls(cfg.CONF), host, fakes.fake_spec(), fakes.ctx())


def test_default_limit_is_50():
    assert cfg.CONF.filter_scheduler.max_instances_per_host == 50
    assert _passes(NumInstancesFilter, fakes.fake_host(num_instances=49)) is None
    assert _passes(NumInstancesFilter, fakes.fake_host(num_instances=50)) == \
        "max instances per host reached (50)"


def test_configured_limit():
    with fakes.config("filter_scheduler", max_instances_per_host=3):
        assert _passes(NumInstancesFilter, fakes.fake_host(num_instances=2)) is None
        assert _passes(NumInstancesFilter, fakes.fake_host(num_instances=3)) == \
            "max instances per host reached (3)"


def test_aggregate_limit_smallest_wins():
    host = fakes.fake_host(num_instances=5, aggregates=[{"max_instances_per_host": "10"},
                                                        {"max_instances_per_host": "5"}])
    assert _passes(AggregateNumInstancesFilter, host) == "max instances per host reached (5)"
    assert _passes(NumInstancesFilter, host) is None
    host.num_instances = 4
    assert _passes(AggregateNumInstancesFilter, host) is None


def test_aggregate_falls_back_to_config():
    with fakes.config("filter_scheduler", max_instances_per_host=3):
        host = fakes.fake_host(num_instances=3, aggregates=[{"max_instances_per_host": "x"}])
        assert _passes(AggregateNumInstancesFilter, host) == \
            "max instances per host reached (3)"
        host = fakes.fake_host(num_instances=2)
        assert _passes(AggregateNumInstancesFilter, host) is None


def test_evaluated_per_instance():
    assert not NumInstancesFilter.run_filter_once_per_request


def test_vector_form():
    with fakes.config("filter_scheduler", max_instances_per_host=3):
        hosts = [fakes.fake_host(num_instances=2),
                 fakes.fake_host(num_instances=3),
                 fakes.fake_host(num_instances=4, aggregates=[{"max_instances_per_host": "5"},
                                                              {"max_instances_per_host": "9"}]),
                 fakes.fake_host(num_instances=4, aggregates=[{"max_instances_per_host": "4.9"}]),
                 fakes.fake_host(num_instances=3, aggregates=[{"max_instances_per_host": "x"}])]
        spec = fakes.fake_spec()
        assert fakes.filter_vector(NumInstancesFilter(cfg.CONF), hosts, spec) == \
            [True, False, False, False, False]
        assert fakes.filter_vector(AggregateNumInstancesFilter(cfg.CONF), hosts, spec) == \
            [True, False, True, False, False]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999"])
def test_non_finite_limits_are_ignored(value):
    with fakes.config("filter_scheduler", max_instances_per_host=3):
        hosts = [fakes.fake_host(num_instances=2, aggregates=[{"max_instances_per_host": value}]),
                 fakes.fake_host(num_instances=3, aggregates=[{"max_instances_per_host": value}])]
        assert fakes.filter_vector(AggregateNumInstancesFilter(cfg.CONF), hosts,
                                   fakes.fake_spec()) == [True, False]
