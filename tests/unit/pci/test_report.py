"""Host device reports: add, update, remove, never drop a claimed device."""
from __future__ import annotations

import dataclasses

import pytest

from pci.device import PciDevice
from pci.errors import PciError
from pci.report import ReportPlan, plan_report

PF = "0000:81:00.0"
VF1 = "0000:81:02.1"
VF2 = "0000:81:02.2"
GPU = "0000:03:00.0"


def pf(status="available", **kw):
    return PciDevice(PF, "8086", "1572", "type-PF", None, 0, None, status, **kw)


def vf(addr, status="available", **kw):
    return PciDevice(addr, "8086", "154c", "type-VF", PF, 0, "physnet1", status, **kw)


def gpu(status="available", numa=0, **kw):
    return PciDevice(GPU, "10de", "1eb8", "type-PCI", None, numa, None, status, **kw)


def test_first_report_adds_everything():
    plan = plan_report([], [pf(), vf(VF1), gpu()])
    assert plan == ReportPlan(add=(gpu(), pf(), vf(VF1)))


def test_same_report_is_a_no_op():
    devs = [pf(), vf(VF1), gpu()]
    assert plan_report(devs, devs).empty


def test_changed_hardware_is_updated():
    plan = plan_report([gpu()], [gpu(numa=1)])
    assert plan == ReportPlan(update=(gpu(numa=1),))


def test_vanished_free_device_is_removed():
    plan = plan_report([gpu(), pf()], [pf()])
    assert plan.remove == (GPU,) and not plan.add and not plan.update


def test_removed_device_comes_back():
    plan = plan_report([gpu("removed")], [gpu()])
    assert plan.update == (gpu(),) and not plan.remove


def test_already_removed_stays_quiet():
    assert plan_report([gpu("removed")], []).empty


@pytest.mark.parametrize("status", ["claimed", "allocated"])
def test_vanished_claimed_device_is_kept_with_a_warning(status):
    held = gpu(status, instance_uuid="i1", request_id="r1")
    plan = plan_report([held], [])
    assert plan.empty
    assert plan.warnings == (f"device {GPU} is no longer reported but is {status} by "
                             "instance i1; kept",)


def test_claim_survives_a_report():
    held = gpu("claimed", instance_uuid="i1", request_id="r1")
    plan = plan_report([held], [gpu(numa=1)])
    assert plan.update == (dataclasses.replace(held, numa_node=1),)
    assert plan.warnings == ()


def test_claimed_device_changing_identity_warns():
    held = gpu("claimed", instance_uuid="i1")
    new = dataclasses.replace(gpu(), product_id="2204")
    plan = plan_report([held], [new])
    assert plan.update[0].status == "claimed"
    assert "now reported as 10de:2204" in plan.warnings[0]


def test_host_marks_device_unavailable_and_back():
    plan = plan_report([gpu()], [gpu("unavailable")])
    assert plan.update == (gpu("unavailable"),)
    plan = plan_report([gpu("unavailable")], [gpu()])
    assert plan.update == (gpu(),)


def test_new_vf_of_a_claimed_pf_is_unclaimable():
    held = pf("claimed", instance_uuid="i1")
    plan = plan_report([held, vf(VF1, "unclaimable")], [pf(), vf(VF1), vf(VF2)])
    assert plan.add == (vf(VF2, "unclaimable"),)
    assert plan.update == ()


def test_vanished_vf_frees_its_parent():
    devs = [pf("unclaimable"), vf(VF1, "claimed", instance_uuid="i1"), vf(VF2)]
    plan = plan_report(devs, [pf(), vf(VF2)])
    # The claimed VF is kept (warning) so the PF stays unclaimable.
    assert plan.update == () and plan.remove == () and len(plan.warnings) == 1


def test_duplicate_address_is_an_error():
    with pytest.raises(PciError) as exc:
        plan_report([], [gpu(), gpu()], field="hosts[0].pci_devices")
    assert exc.value.field == "hosts[0].pci_devices[1].address"
