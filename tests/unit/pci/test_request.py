"""Aliases, flavor extra specs and explicit pci_requests."""
from __future__ import annotations

import json

import pytest

from pci.errors import PciError
from pci.request import (
    Alias,
    PciRequest,
    parse_aliases,
    requests_from_extra_spec,
    requests_from_primitive,
)

NIC = json.dumps({"name": "nic", "vendor_id": "8086", "product_id": "154c",
                  "device_type": "type-VF", "numa_policy": "required"})
GPU = json.dumps({"name": "gpu", "vendor_id": "10DE", "product_id": "1eb8"})
EXTRA = "flavor.extra_specs.pci_passthrough:alias"


class TestParseAliases:
    def test_nova_style_json(self):
        aliases = parse_aliases([NIC, GPU])
        assert aliases["nic"] == Alias("nic", ({"vendor_id": "8086", "product_id": "154c",
                                                "dev_type": "type-VF"},), "required",
                                       "type-VF")
        assert aliases["gpu"] == Alias("gpu", ({"vendor_id": "10de", "product_id": "1eb8"},),
                                       "legacy", None)

    def test_same_name_adds_alternative_specs(self):
        other = json.dumps({"name": "gpu", "vendor_id": "10de", "product_id": "2204"})
        assert len(parse_aliases([GPU, other])["gpu"].specs) == 2

    def test_list_in_one_value(self):
        aliases = parse_aliases([json.dumps([json.loads(NIC), json.loads(GPU)])])
        assert set(aliases) == {"nic", "gpu"}

    @pytest.mark.parametrize("text, field, words", [
        ("{not json", "pci.alias[1]", "not valid JSON"),
        ('"nic"', "pci.alias[1]", "JSON object"),
        ("[]", "pci.alias[1]", "empty list"),
        ('{"vendor_id": "8086", "product_id": "154c"}', "pci.alias[1].name", "non-empty name"),
        ('{"name": "a:b", "vendor_id": "8086"}', "pci.alias[1].name", "without"),
        ('{"name": "x"}', "pci.alias[1]", "vendor_id and/or product_id"),
        ('{"name": "x", "vendor_id": "86"}', "pci.alias[1].vendor_id", "four hex digits"),
        ('{"name": "x", "vendor_id": "8086", "device_type": "PF"}', "pci.alias[1].device_type",
         "type-PCI"),
        ('{"name": "x", "vendor_id": "8086", "numa_policy": "strict"}',
         "pci.alias[1].numa_policy", "required, legacy, preferred, socket"),
        ('{"name": "x", "vendor_id": "8086", "colour": [1]}', "pci.alias[1].colour",
         "expected a tag value"),
        ('{"name": "x", "vendor_id": "8086", "col our": "red"}', "pci.alias[1].col our",
         "unknown key"),
        ('{"name": "x", "vendor_id": "8086", "address": "0000:81:00.0"}',
         "pci.alias[1].address", "unknown key"),
        ('[{"name": "x", "vendor_id": "8086"}, {"name": "y"}]', "pci.alias[1][1]",
         "vendor_id and/or"),
        ('{"name": "nic", "vendor_id": "8086", "numa_policy": "legacy"}', "pci.alias[1]",
         "different numa_policy"),
    ])
    def test_errors(self, text, field, words):
        with pytest.raises(PciError) as exc:
            parse_aliases([NIC, text])
        assert exc.value.field == field
        assert words in exc.value.reason


class TestExtraSpec:
    aliases = parse_aliases([NIC, GPU])

    def test_counts_and_policy(self):
        reqs = requests_from_extra_spec("nic:2, gpu:1", self.aliases)
        assert [(r.alias_name, r.count, r.numa_policy) for r in reqs] == [
            ("nic", 2, "required"), ("gpu", 1, "legacy")]
        assert len({r.request_id for r in reqs}) == 2

    def test_count_defaults_to_one(self):
        assert requests_from_extra_spec("gpu", self.aliases)[0].count == 1

    def test_empty(self):
        assert requests_from_extra_spec("", self.aliases) == ()

    def test_policy_override(self):
        reqs = requests_from_extra_spec("nic:1", self.aliases, numa_policy="preferred")
        assert reqs[0].numa_policy == "preferred"

    def test_unknown_alias(self):
        with pytest.raises(PciError) as exc:
            requests_from_extra_spec("nic:1,fpga:1", self.aliases)
        assert exc.value.field == EXTRA
        assert "unknown PCI alias 'fpga'" in exc.value.reason
        assert "gpu, nic" in exc.value.reason

    @pytest.mark.parametrize("value", ["nic:0", "nic:two", "nic:-1", "nic:"])
    def test_bad_count(self, value):
        with pytest.raises(PciError) as exc:
            requests_from_extra_spec(value, self.aliases)
        assert exc.value.field == EXTRA

    def test_not_a_string(self):
        with pytest.raises(PciError):
            requests_from_extra_spec(["nic:1"], self.aliases)


class TestPrimitive:
    def test_design_example(self):
        (req,) = requests_from_primitive(
            [{"count": 1, "spec": [{"vendor_id": "8086", "product_id": "154C"}],
              "numa_policy": "legacy"}])
        assert req.count == 1 and req.specs == ({"vendor_id": "8086", "product_id": "154c"},)
        assert req.alias_name is None and req.numa_policy == "legacy" and req.request_id

    def test_round_trip(self):
        req = PciRequest(2, ({"vendor_id": "8086", "dev_type": "type-VF",
                              "physical_network": "physnet1"},), "nic", "socket", "r1")
        assert requests_from_primitive([req.to_primitive()]) == (req,)

    def test_none_is_no_request(self):
        assert requests_from_primitive(None) == ()

    @pytest.mark.parametrize("item, field", [
        ({"count": 0, "spec": [{}]}, "pci_requests[0].count"),
        ({"count": "1", "spec": [{}]}, "pci_requests[0].count"),
        ({"count": 1}, "pci_requests[0].spec"),
        ({"count": 1, "spec": []}, "pci_requests[0].spec"),
        ({"count": 1, "spec": [{"vendor_id": "808"}]}, "pci_requests[0].spec[0].vendor_id"),
        ({"count": 1, "spec": [{}, {"numa_node": 1}]}, "pci_requests[0].spec[1].numa_node"),
        ({"count": 1, "spec": [{}], "numa_policy": "x"}, "pci_requests[0].numa_policy"),
        ({"count": 1, "spec": [{}], "colour": 1}, "pci_requests[0].colour"),
        ({"count": 1, "spec": [{}], "request_id": 5}, "pci_requests[0].request_id"),
        ("nic", "pci_requests[0]"),
    ])
    def test_errors_name_the_field(self, item, field):
        with pytest.raises(PciError) as exc:
            requests_from_primitive([item])
        assert exc.value.field == field

    def test_not_a_list(self):
        with pytest.raises(PciError) as exc:
            requests_from_primitive({"count": 1})
        assert exc.value.field == "pci_requests"


class TestTagSpecs:
    def test_non_field_keys_are_tags_in_requests(self):
        (req,) = requests_from_primitive(
            [{"count": 1, "spec": [{"vendor_id": "8086", "trusted": True, "kind": "nic"}]}])
        assert req.specs == ({"vendor_id": "8086", "trusted": "true", "kind": "nic"},)
        assert requests_from_primitive([req.to_primitive()]) == (req,)

    def test_alias_with_a_tag(self):
        alias = parse_aliases([json.dumps({"name": "tnic", "vendor_id": "8086",
                                           "device_type": "type-VF", "trusted": "true"})])
        assert alias["tnic"].specs == ({"vendor_id": "8086", "dev_type": "type-VF",
                                        "trusted": "true"},)

    @pytest.mark.parametrize("spec, field, words", [
        ({"trusted": ""}, "pci_requests[0].spec[0].trusted", "non-empty"),
        ({"trusted": "x\x07"}, "pci_requests[0].spec[0].trusted", "printable"),
        ({"bad key": "x"}, "pci_requests[0].spec[0].bad key", "tag name"),
        ({"address": "0000:81:00.0"}, "pci_requests[0].spec[0].address", "cannot be matched"),
        ({f"k{i}": "v" * 30 for i in range(9)}, "pci_requests[0].spec[0]", "at most 255"),
    ])
    def test_tag_errors_name_the_field(self, spec, field, words):
        with pytest.raises(PciError) as exc:
            requests_from_primitive([{"count": 1, "spec": [spec]}])
        assert exc.value.field == field
        assert words in exc.value.reason


class TestPhysicalNetwork:
    """``physical_network`` names compare case-insensitively on both sides."""

    @pytest.mark.parametrize("asked, device, matches", [
        ("PHYSNET2", "physnet2", True),
        ("physnet2", "PhysNet2", True),
        ("physnet2", "physnet2", True),
        ("physnet2", "physnet3", False),
        ("physnet2", None, False),
    ])
    def test_case_insensitive(self, asked, device, matches):
        from pci.pools import PoolKey
        from pci.request import spec_matches

        (req,) = requests_from_primitive(
            [{"count": 1, "spec": [{"vendor_id": "8086", "physical_network": asked}]}])
        key = PoolKey("8086", "154c", "type-VF", 0, device)
        assert spec_matches(req.specs[0], key) is matches
        assert req.matches(key) is matches
