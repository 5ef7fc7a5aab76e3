import pytest
from oslo_config import cfg

from scheduler import testing
from scheduler.filters.compute_capabilities import ComputeCapabilitiesFilter
from scheduler.host_columns import HostColumns
from tests.unit.scheduler import fakes


def _passes(host, extra_specs):
    return fakes.passes(ComputeCapabilitiesFilter(cfg.CONF),
        host, fakes.fake_spec(extra_specs=extra_specs), fakes.ctx())


def _host(**attrs):
    attrs.setdefault("cpu_info", {"arch": "x86_64", "vendor": "Intel",
                                  "features": ["avx2", "sse4_2"], "topology": {"cores": 8}})
    attrs.setdefault("stats", {"tier": "gold", "ssd": "true"})
    return fakes.fake_host(**attrs)


def test_no_extra_specs_passes():
    assert _passes(_host(), {}) is None


@pytest.mark.parametrize("specs", [
    {"capabilities:hypervisor_type": "QEMU"},
    {"capabilities:hypervisor_type": "s== QEMU"},
    {"capabilities:hypervisor_version": ">= 8000000"},
    {"capabilities:vcpus": "= 8"},
    {"capabilities:vcpus_total": "= 8"},                   # Nova's name
    {"capabilities:free_ram_mb": ">= 16384"},
    {"capabilities:cpu_info:vendor": "Intel"},
    {"capabilities:cpu_info:features": "<in> avx2"},
    {"capabilities:cpu_info:features": "<all-in> avx2 sse4_2"},
    {"capabilities:cpu_info:topology:cores": ">= 8"},
    {"capabilities:tier": "<or> silver <or> gold"},          # from stats
    {"capabilities:stats:tier": "gold"},
    {"tier": "gold"},                                        # unscoped: a stats key
    {"hypervisor_type": "QEMU"},                             # unscoped: an attribute
    {"ssd": "true", "capabilities:hypervisor_type": "QEMU"},
    {"no_such_thing": "1"},                                  # unscoped unknown: ignored
    {"hw:cpu_policy": "dedicated"},                          # other scope: ignored
    {"aggregate_instance_extra_specs:ssd": "false"},         # other scope: ignored
])
def test_satisfied(specs):
    assert _passes(_host(), specs) is None


@pytest.mark.parametrize("key,req", [
    ("capabilities:hypervisor_type", "Xen"),
    ("capabilities:hypervisor_version", ">= 9000000"),
    ("capabilities:vcpus", "= 16"),
    ("capabilities:cpu_info:features", "<in> avx512f"),
    ("capabilities:cpu_info:vendor", "s== AMD"),
    ("capabilities:cpu_info:nothing", "1"),                 # missing nested key
    ("capabilities:missing", "1"),                          # scoped unknown: fails
    ("capabilities:tier", "silver"),
    ("tier", "silver"),
    ("capabilities:cpu_info:vendor:deeper", "x"),           # walking into a string
])
def test_not_satisfied_and_reason(key, req):
    assert _passes(_host(), {key: req}) == f"extra spec {key}='{req}' not satisfied"


def test_first_failing_spec_is_the_reason():
    reason = _passes(_host(), {"capabilities:hypervisor_type": "QEMU",
                               "capabilities:vcpus": "= 64"})
    assert reason == "extra spec capabilities:vcpus='= 64' not satisfied"


def test_json_string_values_are_walked():
    host = _host(stats={"gpu": '{"model": "a100", "count": 4}'})
    assert _passes(host, {"capabilities:gpu:model": "a100"}) is None
    assert _passes(host, {"capabilities:gpu:count": ">= 8"}) is not None


def test_attribute_none_falls_back_to_stats():
    host = _host(hypervisor_type=None, stats={"hypervisor_type": "QEMU"})
    assert _passes(host, {"capabilities:hypervisor_type": "QEMU"}) is None


def test_unset_attribute_fails():
    host = _host(hypervisor_type=None, stats={})
    assert _passes(host, {"hypervisor_type": "QEMU"}) == \
        "extra spec hypervisor_type='QEMU' not satisfied"


def test_unscoped_stats_key_checked_only_on_hosts_that_have_it():
    filt = ComputeCapabilitiesFilter(cfg.CONF)
    spec = fakes.fake_spec(extra_specs={"tier": "gold"})
    assert fakes.passes(filt, _host(stats={}), spec, fakes.ctx()) is None
    assert fakes.passes(filt, _host(stats={"tier": "silver"}), spec, fakes.ctx()) is not None


def test_methods_and_private_attributes_are_not_capabilities():
    assert _passes(_host(), {"capabilities:lock": "x"}) is not None
    assert _passes(_host(), {"capabilities:_lock_name": "x"}) is not None
    assert _passes(_host(), {"lock": "x"}) is None     # unscoped unknown: ignored


def test_requests_are_parsed_into_their_own_state():
    filt = ComputeCapabilitiesFilter(cfg.CONF)
    spec = fakes.fake_spec(extra_specs={"capabilities:vcpus": "= 8"})
    first = filt.prepare(fakes.ctx().request(spec))
    other = filt.prepare(fakes.ctx().request(spec))
    assert first is not other and first.key == other.key
    assert vars(filt) == {"conf": cfg.CONF}     # nothing per request on the filter


def test_usage_counters_are_columns_and_static_capabilities_asked_once_per_class(
        monkeypatch):
    """``free_ram_mb`` is compared on its column; ``stats:tier`` is asked of one
    host per class of equal static capabilities, whatever the usage."""
    filt = ComputeCapabilitiesFilter(cfg.CONF)
    hosts = [fakes.fake_host(f"h{i}", memory_mb_used=16000 if i % 3 == 0 else 0,
                             stats={"tier": "gold" if i % 2 else "silver"})
             for i in range(30)]
    asked = []
    real = ComputeCapabilitiesFilter.host_passes_one

    def counting(host, item):
        asked.append((host.host, item.first))
        return real(host, item)
    monkeypatch.setattr(ComputeCapabilitiesFilter, "host_passes_one", staticmethod(counting))
    spec = fakes.fake_spec(extra_specs={"capabilities:free_ram_mb": ">= 1024",
                                        "capabilities:stats:tier": "gold"})
    got = testing.answers(filt, hosts, fakes.ctx().request(spec))
    assert len(asked) == 2 and {first for _, first in asked} == {"stats"}
    for i, reason in enumerate(got):
        if i % 3 == 0:      # the first failing spec in the flavor's order
            assert reason == "extra spec capabilities:free_ram_mb='>= 1024' not satisfied"
        elif i % 2 == 0:
            assert reason == "extra spec capabilities:stats:tier='gold' not satisfied"
        else:
            assert reason is None


@pytest.mark.parametrize("specs", [
    {"capabilities:free_ram_mb": ">= 1024", "capabilities:stats:tier": "gold"},
    {"capabilities:stats:tier": "gold", "capabilities:num_instances": "<= 1"},
    {"capabilities:free_vcpus": "== 4", "capabilities:vcpus_used": "s== 4"},
    {"capabilities:free_disk_mb": ">= lots", "capabilities:host": "<in> 1"},
    {"capabilities:num_io_ops:x": "= 0", "capabilities:failed_builds": "!= 0"},
    {"tier": "gold", "capabilities:disk_mb_used": "= 1"},
])
def test_vector_form_equals_the_per_host_form(specs):
    import random

    rng = random.Random(str(specs))
    hosts = [fakes.fake_host(f"h{i}", memory_mb_used=rng.choice([0, 8000, 16000]),
                             vcpus_used=rng.choice([0, 4, 12]),
                             num_instances=rng.choice([0, 1, 2]),
                             stats={"tier": rng.choice(["gold", "silver"])}
                             if rng.random() < 0.8 else {})
             for i in range(40)]
    spec = fakes.fake_spec(extra_specs=specs)
    testing.check_filter(ComputeCapabilitiesFilter(cfg.CONF), hosts,
                         [fakes.ctx().request(spec)])


def test_a_host_changed_since_its_row_is_asked_itself():
    """A class's host that changed after its row was written does not answer
    for the class: each of the class's hosts is asked."""
    filt = ComputeCapabilitiesFilter(cfg.CONF)
    hosts = [fakes.fake_host(f"h{i}", stats={"tier": "gold"}) for i in range(3)]
    cols = HostColumns(hosts)
    cols.classes.register(filt.class_column(""), filt.class_key)
    hosts[0].stats = {"tier": "silver"}     # changed in place, row not rewritten
    hosts[0].version += 2
    req = filt.prepare(fakes.ctx().request(fakes.fake_spec(
        extra_specs={"capabilities:stats:tier": "gold"})))
    [(reason, mask)] = filt.refusals(cols, req)
    assert mask.tolist() == [True, False, False]


def test_usage_counters_make_it_per_instance():
    assert not ComputeCapabilitiesFilter.run_filter_once_per_request


@pytest.mark.parametrize("specs,noop", [
    ({}, True),
    ({"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"}, True),
    ({"hw:cpu_policy": "dedicated", "capabilities:": "x"}, False),
    ({"hw:maxphysaddr_bits": "40"}, False),
    ({"capabilities:hypervisor_type": "QEMU"}, False),
    ({"ssd": "true"}, False),        # unscoped: checked on hosts whose stats have it
])
def test_is_noop(specs, noop):
    filt = ComputeCapabilitiesFilter(cfg.CONF)
    assert fakes.skips(filt, fakes.fake_spec(extra_specs=specs)) is noop


@pytest.mark.parametrize("key", ["capabilities:", "capabilities::", "capabilities:cpu_info:",
                                 "capabilities::vendor"])
def test_empty_capability_name_fails_every_host(key):
    hosts = [_host(), _host(stats={"tier": "gold", "x": "1"}), _host(cpu_info={})]
    spec = fakes.fake_spec(extra_specs={key: "x"})
    assert fakes.filter_vector(ComputeCapabilitiesFilter(cfg.CONF), hosts, spec) == [False] * 3
    assert _passes(_host(), {key: "x"}) == f"extra spec {key}='x' not satisfied"


def test_flavor_maxphysaddr_bits_needs_the_host_to_report_enough():
    hosts = [_host(cpu_info={"arch": "x86_64", "maxphysaddr": {"mode": "emulate", "bits": 46}}),
             _host(cpu_info={"arch": "x86_64", "maxphysaddr": {"bits": 39}}),
             _host(cpu_info={"arch": "aarch64"}),                 # not reported: fails
             _host(cpu_info={"maxphysaddr": {"bits": "40"}})]
    spec = fakes.fake_spec(extra_specs={"hw:maxphysaddr_bits": "40"})
    assert fakes.filter_vector(ComputeCapabilitiesFilter(cfg.CONF), hosts, spec) == \
        [True, False, False, True]
    assert _passes(hosts[2], {"hw:maxphysaddr_bits": "40"}) == \
        "extra spec hw:maxphysaddr_bits='40' not satisfied"


def test_flavor_maxphysaddr_bits_replaces_the_capability_of_that_path():
    host = _host(cpu_info={"maxphysaddr": {"bits": 46}})
    assert _passes(host, {"hw:maxphysaddr_bits": "40",
                          "capabilities:cpu_info:maxphysaddr:bits": ">= 48"}) is None
    assert _passes(host, {"capabilities:cpu_info:maxphysaddr:bits": ">= 48"}) is not None
