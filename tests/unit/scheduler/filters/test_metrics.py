import pytest
from oslo_config import cfg

from scheduler import exception, testing
from scheduler.filters.metrics import MetricsFilter
from tests.unit.scheduler import fakes

SETTING = ["cpu.percent=-1.0", "cpu.frequency=0.5"]


def _passes(metrics, setting=SETTING):
    with fakes.config("metrics", weight_setting=setting):
        return fakes.passes(MetricsFilter(cfg.CONF), fakes.fake_host(metrics=metrics),
                            fakes.fake_spec())


def test_host_with_every_metric_passes():
    assert _passes({"cpu.percent": 10, "cpu.frequency": 2400, "other": 1}) is None


@pytest.mark.parametrize("metrics", [{}, {"cpu.percent": 10},
                                     {"cpu.percent": 10, "cpu.frequency": "fast"}])
def test_host_lacking_a_metric_fails_with_reason(metrics):
    assert _passes(metrics) == \
        "does not report the metrics of [metrics] weight_setting: cpu.percent, cpu.frequency"


def test_no_weight_setting_skips():
    assert fakes.skips(MetricsFilter(cfg.CONF), fakes.fake_spec())


def test_bad_weight_setting_fails_at_start_up():
    with fakes.config("metrics", weight_setting=["cpu.percent"]):
        with pytest.raises(exception.InvalidRequest) as err:
            MetricsFilter(cfg.CONF)
    assert err.value.field == "metrics.weight_setting"


def test_conformance_on_many_hosts():
    hosts = [fakes.fake_host(metrics=m) for m in (
        {}, {"cpu.percent": 1}, {"cpu.percent": 2}, {"cpu.percent": 1, "cpu.frequency": 1},
        {"cpu.frequency": 3, "cpu.percent": 0.5, "x": 1})]
    with fakes.config("metrics", weight_setting=SETTING):
        flt = MetricsFilter(cfg.CONF)
        req = testing.request(fakes.fake_spec())
        testing.check_filter(flt, hosts, [req])
        assert [a is None for a in testing.answers(flt, hosts, req)] == \
            [False, False, False, True, True]
    assert MetricsFilter.run_filter_once_per_request
