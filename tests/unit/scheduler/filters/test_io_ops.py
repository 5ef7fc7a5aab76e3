from oslo_config import cfg

from scheduler.filters.io_ops import AggregateIoOpsFilter, IoOpsFilter
from tests.unit.scheduler import fakes


def _passes(filter_cls, host):
    return fakes.passes(filter_cls(cfg.CONF), host, fakes.fake_spec(), fakes.ctx())


def test_default_limit_is_8():
    assert cfg.CONF.filter_scheduler.max_io_ops_per_host == 8
    assert _passes(IoOpsFilter, fakes.fake_host(num_io_ops=7)) is None
    assert _passes(IoOpsFilter, fakes.fake_host(num_io_ops=8)) == \
        "max I/O operations per host reached (8)"


def test_configured_limit():
    with fakes.config("filter_scheduler", max_io_ops_per_host=2):
        assert _passes(IoOpsFilter, fakes.fake_host(num_io_ops=1)) is None
        assert _passes(IoOpsFilter, fakes.fake_host(num_io_ops=2)) == \
            "max I/O operations per host reached (2)"


def test_aggregate_limit():
    host = fakes.fake_host(num_io_ops=3, aggregates=[{"max_io_ops_per_host": "3"}])
    assert _passes(AggregateIoOpsFilter, host) == "max I/O operations per host reached (3)"
    assert _passes(IoOpsFilter, host) is None
    host = fakes.fake_host(num_io_ops=10, aggregates=[{"max_io_ops_per_host": "20"}])
    assert _passes(AggregateIoOpsFilter, host) is None


def test_aggregate_falls_back_to_config():
    host = fakes.fake_host(num_io_ops=8, aggregates=[{"other": "1"}])
    assert _passes(AggregateIoOpsFilter, host) == "max I/O operations per host reached (8)"


def test_evaluated_per_instance():
    assert not IoOpsFilter.run_filter_once_per_request


def test_vector_form():
    hosts = [fakes.fake_host(num_io_ops=7),
             fakes.fake_host(num_io_ops=8),
             fakes.fake_host(num_io_ops=3, aggregates=[{"max_io_ops_per_host": "3"}]),
             fakes.fake_host(num_io_ops=10, aggregates=[{"max_io_ops_per_host": "20"}]),
             fakes.fake_host(num_io_ops=8, aggregates=[{"other": "1"}])]
    spec = fakes.fake_spec()
    assert fakes.filter_vector(IoOpsFilter(cfg.CONF), hosts, spec) == \
        [True, False, True, False, False]
    assert fakes.filter_vector(AggregateIoOpsFilter(cfg.CONF), hosts, spec) == \
        [True, False, False, True, False]
