import pytest
from oslo_config import cfg

from scheduler import exception, testing
from scheduler.weights.metrics import MetricsWeigher, parse_weight_setting
from tests.unit.scheduler import fakes


def _weights(hosts, **options):
    options.setdefault("weight_setting", ["cpu.percent=-1.0", "cpu.frequency=0.5"])
    with fakes.config("metrics", **options):
        return fakes.weigh_vector(MetricsWeigher(cfg.CONF), hosts, fakes.fake_spec())


def _hosts(*metrics):
    return [fakes.fake_host(f"h{i}", metrics=m) for i, m in enumerate(metrics)]


def test_weighted_sum():
    hosts = _hosts({"cpu.percent": 10, "cpu.frequency": 2000},
                   {"cpu.percent": 90, "cpu.frequency": 3000, "unused": 5})
    assert _weights(hosts) == [-10 + 1000.0, -90 + 1500.0]


def test_unavailable_metric_weighs_weight_of_unavailable_when_not_required():
    hosts = _hosts({"cpu.percent": 10, "cpu.frequency": 2000}, {"cpu.percent": 1})
    assert _weights(hosts, required=False) == [990.0, -10000.0]
    assert _weights(hosts, required=False, weight_of_unavailable=-5.0) == [990.0, -5.0]


def test_unavailable_metric_fails_the_request_when_required():
    hosts = _hosts({"cpu.percent": 10, "cpu.frequency": 2000}, {"cpu.percent": 1})
    with fakes.config("metrics", weight_setting=["cpu.frequency=1"]):
        w = MetricsWeigher(cfg.CONF)
        with pytest.raises(exception.PluginError, match="h1 does not report metric "
                                                        "cpu.frequency"):
            testing.raw_weights(w, hosts, testing.request(fakes.fake_spec()))


def test_no_setting_skips():
    assert fakes.skips(MetricsWeigher(cfg.CONF), fakes.fake_spec())


def test_multiplier_from_metrics_group_and_aggregate():
    with fakes.config("metrics", weight_multiplier=-2.5):
        w = MetricsWeigher(cfg.CONF)
        assert fakes.multiplier(w, fakes.fake_host()) == -2.5
        host = fakes.fake_host(aggregates=[{"metrics_weight_multiplier": "4"}])
        assert fakes.multiplier(w, host) == 4.0


@pytest.mark.parametrize("entries,reason", [
    (["cpu"], "expected name=ratio"),
    (["=1"], "expected name=ratio"),
    (["cpu=x"], "not a finite number"),
    (["cpu=inf"], "not a finite number"),
    (["cpu=1", "cpu=2"], "listed twice"),
])
def test_bad_setting(entries, reason):
    with pytest.raises(exception.InvalidRequest, match=reason) as err:
        parse_weight_setting(entries)
    assert err.value.field == "metrics.weight_setting"
    with fakes.config("metrics", weight_setting=entries):
        with pytest.raises(exception.InvalidRequest):
            MetricsWeigher(cfg.CONF)


def test_setting_parses_spaces():
    assert parse_weight_setting([" a.b = 1.5", "c=-2"]) == (("a.b", 1.5), ("c", -2.0))


def test_conformance():
    hosts = _hosts({"cpu.percent": 10, "cpu.frequency": 2000}, {"cpu.percent": 1},
                   {}, {"cpu.percent": 3, "cpu.frequency": 1})
    with fakes.config("metrics", weight_setting=["cpu.percent=2", "cpu.frequency=1"],
                      required=False):
        w = MetricsWeigher(cfg.CONF)
        testing.check_weigher(w, hosts, [testing.request(fakes.fake_spec())])
