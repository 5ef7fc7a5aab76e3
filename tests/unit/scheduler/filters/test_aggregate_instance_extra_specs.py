import pytest
from oslo_config import cfg

from scheduler.filters.aggregate_instance_extra_specs import AggregateInstanceExtraSpecsFilter
from tests.unit.scheduler import fakes


def _passes(host, extra_specs):
    return fakes.passes(AggregateInstanceExtraSpecsFilter(cfg.CONF),
        host, fakes.fake_spec(extra_specs=extra_specs), fakes.ctx())


def _host(*metadata):
    return fakes.fake_host(aggregates=list(metadata))


def test_no_checked_specs_passes_any_host():
    assert _passes(_host(), {}) is None
    assert _passes(_host(), {"hw:cpu_policy": "dedicated",
                             "capabilities:hypervisor_type": "QEMU"}) is None


@pytest.mark.parametrize("specs", [
    {"aggregate_instance_extra_specs:ssd": "true"},
    {"ssd": "true"},                                            # unscoped keys count too
    {"aggregate_instance_extra_specs:cores": ">= 16"},
    {"aggregate_instance_extra_specs:tier": "<or> gold <or> platinum"},
    {"aggregate_instance_extra_specs:gpu": "a100"},             # one of a comma list
    {"aggregate_instance_extra_specs:ssd": "s== true", "cores": "= 8"},
])
def test_satisfied(specs):
    host = _host({"ssd": "true", "cores": "32"}, {"tier": "gold", "gpu": "v100, a100"})
    assert _passes(host, specs) is None


@pytest.mark.parametrize("key,req", [
    ("aggregate_instance_extra_specs:ssd", "false"),
    ("ssd", "false"),
    ("aggregate_instance_extra_specs:cores", ">= 64"),
    ("aggregate_instance_extra_specs:missing", "x"),
    ("missing", "x"),
])
def test_not_satisfied_and_reason(key, req):
    host = _host({"ssd": "true", "cores": "32"})
    assert _passes(host, {key: req}) == f"aggregate metadata does not satisfy {key}='{req}'"


def test_host_without_aggregates_fails_checked_specs():
    assert _passes(_host(), {"ssd": "true"}) == "aggregate metadata does not satisfy ssd='true'"


def test_any_aggregate_value_may_match():
    host = _host({"ssd": "false"}, {"ssd": "true"})
    assert _passes(host, {"ssd": "true"}) is None


def test_once_per_request():
    assert AggregateInstanceExtraSpecsFilter.run_filter_once_per_request


def test_shared_aggregates_across_hosts_in_one_request():
    ssd = fakes.aggregate({"ssd": "true"})
    gpu = fakes.aggregate({"gpu": "a100"})
    filt = AggregateInstanceExtraSpecsFilter(cfg.CONF)
    spec = fakes.fake_spec(extra_specs={"ssd": "true", "gpu": "a100"})
    both = fakes.fake_host("both", aggregates=[ssd, gpu])
    only_ssd = fakes.fake_host("only_ssd", aggregates=[ssd])
    only_gpu = fakes.fake_host("only_gpu", aggregates=[gpu])
    ctx = fakes.ctx()
    assert fakes.passes(filt, both, spec, ctx) is None
    assert fakes.passes(filt, only_ssd, spec, ctx) == \
        "aggregate metadata does not satisfy gpu='a100'"
    assert fakes.passes(filt, only_gpu, spec, ctx) == \
        "aggregate metadata does not satisfy ssd='true'"
    assert fakes.passes(filt, both, spec, ctx) is None


@pytest.mark.parametrize("specs,noop", [
    ({}, True),
    ({"hw:cpu_policy": "dedicated", "capabilities:hypervisor_type": "QEMU"}, True),
    ({"hw:cpu_policy": "dedicated", "aggregate_instance_extra_specs:": "x"}, False),
    ({"ssd": "true"}, False),
    ({"aggregate_instance_extra_specs:ssd": "true"}, False),
])
def test_is_noop(specs, noop):
    filt = AggregateInstanceExtraSpecsFilter(cfg.CONF)
    assert fakes.skips(filt, fakes.fake_spec(extra_specs=specs)) is noop


def test_hosts_without_aggregates_all_fail():
    filt = AggregateInstanceExtraSpecsFilter(cfg.CONF)
    spec = fakes.fake_spec(extra_specs={"ssd": "true"})
    assert fakes.filter_vector(filt, [_host(), _host()], spec) == [False, False]
    assert fakes.filter_vector(filt, [_host({"ssd": "true"}), _host()], spec) == [True, False]


def test_empty_scoped_name_fails_every_host():
    filt = AggregateInstanceExtraSpecsFilter(cfg.CONF)
    spec = fakes.fake_spec(extra_specs={"aggregate_instance_extra_specs:": "x"})
    hosts = [_host({"ssd": "true"}), _host({"x": "x"}), _host()]
    assert fakes.filter_vector(filt, hosts, spec) == [False, False, False]
    assert fakes.passes(filt, hosts[1], spec) == \
        "aggregate metadata does not satisfy aggregate_instance_extra_specs:='x'"
