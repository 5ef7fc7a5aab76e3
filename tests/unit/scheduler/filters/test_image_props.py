import pytest
from oslo_config import cfg

from scheduler.filters.image_props import (
    ImagePropertiesFilter,
    hypervisor_version_tuple,
    parse_version_requirement,
)
from tests.unit.scheduler import fakes


def _passes(host, **props):
    return fakes.passes(ImagePropertiesFilter(cfg.CONF),
        host, fakes.fake_spec(image={"properties": props}), fakes.ctx())


def _host(**attrs):
    attrs.setdefault("supported_instances", [("x86_64", "kvm", "hvm"), ("i686", "kvm", "hvm")])
    attrs.setdefault("hypervisor_version", 8002000)
    return fakes.fake_host(**attrs)


def test_no_relevant_properties_passes_every_host():
    assert _passes(_host(supported_instances=[]), hw_disk_bus="virtio") is None


@pytest.mark.parametrize("props", [
    {"hw_architecture": "x86_64"},
    {"hw_architecture": "amd64"},                     # canonicalised
    {"hw_architecture": "i386"},
    {"hw_architecture": "X86_64", "img_hv_type": "KVM", "hw_vm_mode": "HVM"},
    {"img_hv_type": "kvm", "hw_vm_mode": "hv"},
    {"hw_architecture": "x86_64", "img_hv_requested_version": ">=8.0, <9"},
    {"img_hv_requested_version": "==8.2"},
    {"hypervisor_version_requires": ">= 8.2.0"},      # the older property name
])
def test_supported(props):
    assert _passes(_host(), **props) is None


@pytest.mark.parametrize("props,reason", [
    ({"hw_architecture": "aarch64"},
     "image properties not supported: hw_architecture=aarch64"),
    ({"hw_architecture": "x86_64", "img_hv_type": "xen"},
     "image properties not supported: hw_architecture=x86_64, img_hv_type=xen"),
    ({"hw_vm_mode": "pv"},
     "image properties not supported: hw_vm_mode=xen"),
    ({"hw_architecture": "x86_64", "img_hv_requested_version": ">=9.0"},
     "image properties not supported: hw_architecture=x86_64, "
     "img_hv_requested_version=>=9.0"),
    ({"img_hv_requested_version": "<8.2"},
     "image properties not supported: img_hv_requested_version=<8.2"),
    ({"img_hv_requested_version": "newest please"},
     "invalid image property img_hv_requested_version: 'newest please'"),
])
def test_not_supported_and_reason(props, reason):
    assert _passes(_host(), **props) == reason


def test_host_without_supported_instances_fails():
    assert _passes(_host(supported_instances=[]), hw_architecture="x86_64") == \
        "image properties not supported: hw_architecture=x86_64"


def test_values_must_come_from_one_entry():
    host = _host(supported_instances=[("x86_64", "kvm", "hvm"), ("aarch64", "qemu", "hvm")])
    assert _passes(host, hw_architecture="aarch64", img_hv_type="qemu") is None
    assert _passes(host, hw_architecture="aarch64", img_hv_type="kvm") is not None


def test_unknown_hypervisor_version_passes_version_check():
    assert _passes(_host(hypervisor_version=None), img_hv_requested_version=">=9") is None


@pytest.mark.parametrize("version,expected", [
    (8002000, (8, 2)), (6000000, (6,)), (1002003, (1, 2, 3)), (0, (0,)), (7, (7,)),
])
def test_hypervisor_version_tuple(version, expected):
    assert hypervisor_version_tuple(version) == expected


def test_version_requirement():
    check = parse_version_requirement(">= 6.0, < 7, != 6.1")
    assert [check(v) for v in (5009000, 6000000, 6001000, 6002005, 7000000)] == \
        [False, True, False, True, False]
    assert parse_version_requirement("~6") is None


def test_once_per_request():
    assert ImagePropertiesFilter.run_filter_once_per_request


@pytest.mark.parametrize("props,noop", [
    ({}, True),
    ({"hw_disk_bus": "virtio", "hw_architecture": ""}, True),
    ({"hw_architecture": "x86_64"}, False),
    ({"img_hv_requested_version": ">=8"}, False),
    ({"img_hv_requested_version": "newest please"}, False),
])
def test_is_noop(props, noop):
    spec = fakes.fake_spec(image={"properties": props})
    assert fakes.skips(ImagePropertiesFilter(cfg.CONF), spec) is noop


@pytest.mark.parametrize("props,want", [
    ({"img_hv_requested_version": ">=8.0, <9"}, [True, False, True, True]),
    ({"hypervisor_version_requires": "==7.2"}, [False, True, True, True]),
    ({"img_hv_requested_version": "newest please"}, [False] * 4),
    ({"hw_architecture": "x86_64"}, [True] * 4),    # all support x86_64
])
def test_vector_form(props, want):
    hosts = [_host(hypervisor_version=8002000), _host(hypervisor_version=7002000),
             _host(hypervisor_version=None), _host(hypervisor_version=0)]
    spec = fakes.fake_spec(image={"properties": props})
    assert fakes.filter_vector(ImagePropertiesFilter(cfg.CONF), hosts, spec) == want


@pytest.mark.parametrize("supported", [
    [("X86_64", "KVM", "hvm")], [("amd64", "kvm", "HV")], [("x86_64", "QEMU", "hvm"),
                                                            ("AMD64", "Kvm", "hvm")],
])
def test_host_supported_instances_are_canonicalised(supported):
    host = _host(supported_instances=supported)
    assert _passes(host, img_hv_type="kvm") is None
    assert _passes(host, hw_architecture="x86_64", img_hv_type="kvm", hw_vm_mode="hvm") is None
    assert _passes(host, img_hv_type="xen") is not None


@pytest.mark.parametrize("props,reason", [
    ({"vm_mode": "xen"}, "image properties not supported: vm_mode=xen"),
    ({"architecture": "aarch64"}, "image properties not supported: architecture=aarch64"),
    ({"hypervisor_type": "xen"}, "image properties not supported: hypervisor_type=xen"),
    ({"architecture": "aarch64", "hw_architecture": "x86_64", "vm_mode": "pv"},
     "image properties not supported: hw_architecture=x86_64, vm_mode=xen"),
])
def test_legacy_property_names(props, reason):
    assert _passes(_host(), **props) == reason
    assert _passes(_host(supported_instances=[]), **props) == reason


@pytest.mark.parametrize("props", [
    {"architecture": "x86_64"}, {"hypervisor_type": "KVM", "vm_mode": "hvm"},
    {"architecture": "aarch64", "hw_architecture": "x86_64"},   # the current name wins
])
def test_legacy_property_names_satisfied(props):
    assert _passes(_host(), **props) is None


@pytest.mark.parametrize("requirement,want", [
    (">=v8", [True, False, False]),
    ("<v8.2", [False, True, True]),
    (">8.2rc1", [True, False, False]),          # a pre-release sorts before 8.2
    ("<8.2rc1", [False, True, True]),
    (">1.0.post1, <8.1", [False, True, False]),
    ("==8.2.0, !=8.1", [True, False, False]),
    ("==V8.2", [True, False, False]),
    (">=8.2.dev1", [True, False, False]),
    (">= 1!0", [False, False, False]),          # an epoch is above every plain version
])
def test_version_predicates_as_python_packaging_reads_them(requirement, want):
    hosts = [_host(hypervisor_version=8002000), _host(hypervisor_version=7002000),
             _host(hypervisor_version=1000000)]
    spec = fakes.fake_spec(image={"properties": {"img_hv_requested_version": requirement}})
    assert fakes.filter_vector(ImagePropertiesFilter(cfg.CONF), hosts, spec) == want


@pytest.mark.parametrize("requirement", ["~=8.0", "==8.*", ">=8,", "8 9", "=>8", ">=eight"])
def test_malformed_version_predicates_are_invalid(requirement):
    assert _passes(_host(), img_hv_requested_version=requirement) == \
        f"invalid image property img_hv_requested_version: {requirement!r}"


def test_image_maxphysaddr_bits():
    hosts = [_host(cpu_info={"maxphysaddr": {"mode": "passthrough", "bits": 46}}),
             _host(cpu_info={"maxphysaddr": {"bits": 39}}),
             _host(cpu_info={"arch": "x86_64"}),          # not reported: passes (as Nova)
             _host(cpu_info={})]
    spec = fakes.fake_spec(image={"properties": {"hw_maxphysaddr_bits": "40"}})
    assert fakes.filter_vector(ImagePropertiesFilter(cfg.CONF), hosts, spec) == \
        [True, False, True, True]
    assert _passes(hosts[1], hw_maxphysaddr_bits="40") == \
        "image properties not supported: hw_maxphysaddr_bits=40"
    assert _passes(hosts[1], hw_maxphysaddr_bits="39") is None
