"""Device validation and the PF/VF claim and release rules."""
from __future__ import annotations

import pytest

from pci import device as d
from pci.device import PciDevice, claim_plan, release_plan, validate_device
from pci.errors import PciClaimConflict, PciError

PF = "0000:81:00.0"
VF1 = "0000:81:02.1"
VF2 = "0000:81:02.2"


def node(pf="available", vf1="available", vf2="available", owner="i1"):
    """One PF with two VFs, plus an unrelated type-PCI device."""
    def dev(addr, dev_type, status, parent=None):
        return PciDevice(addr, "8086", "1572" if dev_type != d.TYPE_VF else "154c",
                         dev_type, parent, 0, None, status,
                         owner if status in d.IN_USE else None)
    return [dev(PF, d.TYPE_PF, pf), dev(VF1, d.TYPE_VF, vf1, PF), dev(VF2, d.TYPE_VF, vf2, PF),
            PciDevice("0000:03:00.0", "10de", "1eb8", d.TYPE_PCI)]


class TestValidateDevice:
    def test_full_vf(self):
        dev = validate_device({"address": "0000:81:02.1", "vendor_id": "8086",
                               "product_id": "154C", "dev_type": "type-VF",
                               "parent_addr": "0000:81:00.0", "numa_node": 1,
                               "physical_network": "physnet1"}, "hosts[0].pci_devices[1]")
        assert dev == PciDevice("0000:81:02.1", "8086", "154c", "type-VF", "0000:81:00.0",
                                1, "physnet1", "available")

    def test_defaults(self):
        dev = validate_device({"address": "0000:03:00.0", "vendor_id": "10de",
                               "product_id": "1eb8"}, "x")
        assert (dev.dev_type, dev.numa_node, dev.status) == ("type-PCI", None, "available")

    @pytest.mark.parametrize("data, field, words", [
        ({"address": "81:00.0"}, "p.address", "PCI address"),
        ({"address": "0000:81:00.8"}, "p.address", "PCI address"),
        ({"vendor_id": "80861"}, "p.vendor_id", "four hex digits"),
        ({"product_id": "xyz1"}, "p.product_id", "four hex digits"),
        ({"product_id": 1572}, "p.product_id", "four hex digits"),
        ({"dev_type": "VF"}, "p.dev_type", "type-PCI, type-PF, type-VF"),
        ({"dev_type": "type-VF"}, "p.parent_addr", "required for a type-VF"),
        ({"dev_type": "type-VF", "parent_addr": "0000:81:00.1"}, "p.parent_addr", "own parent"),
        ({"dev_type": "type-PF", "parent_addr": "0000:81:00.0"}, "p.parent_addr", "only a type-VF"),
        ({"numa_node": -1}, "p.numa_node", "integer >= 0"),
        ({"numa_node": True}, "p.numa_node", "integer >= 0"),
        ({"physical_network": ""}, "p.physical_network", "non-empty"),
        ({"status": "claimed"}, "p.status", "available, unavailable"),
        ({"colour": "red"}, "p.colour", "unknown key"),
    ])
    def test_errors_name_the_field(self, data, field, words):
        base = {"address": "0000:81:00.1", "vendor_id": "8086", "product_id": "1572"}
        with pytest.raises(PciError) as exc:
            validate_device({**base, **data}, "p")
        assert exc.value.field == field
        assert words in exc.value.reason
        assert isinstance(exc.value, ValueError)

    def test_missing_required(self):
        with pytest.raises(PciError) as exc:
            validate_device({"address": "0000:81:00.1", "vendor_id": "8086"}, "p")
        assert exc.value.field == "p.product_id"

    def test_not_a_mapping(self):
        with pytest.raises(PciError) as exc:
            validate_device(["0000:81:00.1"], "hosts[2].pci_devices[0]")
        assert exc.value.field == "hosts[2].pci_devices[0]"


class TestClaimPlan:
    def test_claim_pf_makes_vfs_unclaimable(self):
        assert claim_plan(node(), [PF]) == {PF: "claimed", VF1: "unclaimable",
                                            VF2: "unclaimable"}

    def test_claim_vf_makes_parent_unclaimable(self):
        assert claim_plan(node(), [VF1]) == {VF1: "claimed", PF: "unclaimable"}

    def test_second_vf_leaves_parent_alone(self):
        assert claim_plan(node(pf="unclaimable", vf1="claimed"), [VF2]) == {VF2: "claimed"}

    def test_pf_with_vf_in_use_fails(self):
        with pytest.raises(PciClaimConflict):
            claim_plan(node(pf="available", vf1="allocated"), [PF])

    def test_pf_and_its_vf_together_fail(self):
        with pytest.raises(PciClaimConflict):
            claim_plan(node(), [PF, VF1])

    @pytest.mark.parametrize("status", ["claimed", "unclaimable", "unavailable", "removed"])
    def test_only_available_devices(self, status):
        with pytest.raises(PciClaimConflict) as exc:
            claim_plan(node(vf1=status), [VF1])
        assert VF1 in exc.value.addresses

    def test_unknown_address(self):
        with pytest.raises(PciClaimConflict):
            claim_plan(node(), ["0000:00:00.0"])

    def test_plain_pci_device_has_no_cascade(self):
        assert claim_plan(node(), ["0000:03:00.0"]) == {"0000:03:00.0": "claimed"}


class TestReleasePlan:
    def test_release_pf_restores_vfs(self):
        devs = node(pf="claimed", vf1="unclaimable", vf2="unclaimable")
        assert release_plan(devs, "i1") == {PF: "available", VF1: "available",
                                            VF2: "available"}

    def test_release_last_vf_restores_parent(self):
        devs = node(pf="unclaimable", vf1="claimed")
        assert release_plan(devs, "i1") == {VF1: "available", PF: "available"}

    def test_sibling_in_use_keeps_parent_unclaimable(self):
        devs = node(pf="unclaimable", vf1="claimed")
        devs[2] = PciDevice(VF2, "8086", "154c", "type-VF", PF, 0, None, "allocated", "i2")
        assert release_plan(devs, "i1") == {VF1: "available"}

    def test_both_vfs_of_one_instance(self):
        devs = node(pf="unclaimable", vf1="claimed", vf2="claimed")
        assert release_plan(devs, "i1") == {VF1: "available", VF2: "available",
                                            PF: "available"}

    def test_other_instance_is_a_no_op(self):
        assert release_plan(node(pf="unclaimable", vf1="claimed"), "nobody") == {}

    def test_claim_then_release_round_trip(self):
        devs = node()
        plan = claim_plan(devs, [VF1])
        claimed = [PciDevice(x.address, x.vendor_id, x.product_id, x.dev_type, x.parent_addr,
                             x.numa_node, None, plan.get(x.address, x.status),
                             "i1" if plan.get(x.address) == "claimed" else None)
                   for x in devs]
        back = release_plan(claimed, "i1")
        assert {a: back.get(a, x.status) for a, x in ((x.address, x) for x in claimed)} == \
            {x.address: x.status for x in devs}


class TestCascadeStatus:
    def test_fixes_inconsistent_states(self):
        devs = node(pf="available", vf1="claimed", vf2="unclaimable")
        assert d.cascade_status(devs) == {PF: "unclaimable", VF2: "available"}


class TestTags:
    BASE = {"address": "0000:81:02.1", "vendor_id": "8086", "product_id": "154c"}

    def test_tags_are_sorted_pairs_and_canonical_json(self):
        dev = validate_device({**self.BASE, "tags": {"trusted": True, "kind": "nic",
                                                     "port": 2}}, "p")
        assert dev.tags == (("kind", "nic"), ("port", "2"), ("trusted", "true"))
        assert d.tags_text(dev.tags) == '{"kind":"nic","port":"2","trusted":"true"}'
        assert d.tags_from_text(d.tags_text(dev.tags)) == dev.tags
        assert d.tags_text(()) is None and d.tags_from_text(None) == ()

    def test_untagged_and_tagged_devices_differ(self):
        plain = validate_device(self.BASE, "p")
        tagged = validate_device({**self.BASE, "tags": {"trusted": "true"}}, "p")
        assert plain.tags == () and plain != tagged
        assert plain.hardware() != tagged.hardware()

    @pytest.mark.parametrize("tags, field, words", [
        (["trusted"], "p.tags", "mapping of tag name"),
        ({"bad key": "x"}, "p.tags.bad key", "tag name"),
        ({"-x": "x"}, "p.tags.-x", "starting with a letter or digit"),
        ({"k" * 65: "x"}, "p.tags." + "k" * 65, "tag name of 1 to 64"),
        ({"vendor_id": "8086"}, "p.tags.vendor_id", "device field, not a tag"),
        ({"physical_network": "p1"}, "p.tags.physical_network", "device field"),
        ({"trusted": ""}, "p.tags.trusted", "non-empty string"),
        ({"trusted": "yes\x1b[31m"}, "p.tags.trusted", "printable"),
        ({"note": "a\nb"}, "p.tags.note", "printable"),
        ({"trusted": None}, "p.tags.trusted", "tag value"),
        ({"trusted": ["true"]}, "p.tags.trusted", "tag value"),
        ({"note": "x" * 256}, "p.tags.note", "at most 255"),
        ({f"k{i}": "v" * 20 for i in range(12)}, "p.tags", "at most 255"),
    ])
    def test_errors_name_the_tag(self, tags, field, words):
        with pytest.raises(PciError) as exc:
            validate_device({**self.BASE, "tags": tags}, "p")
        assert exc.value.field == field
        assert words in exc.value.reason
