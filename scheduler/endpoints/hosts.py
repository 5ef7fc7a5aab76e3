"""Host reports (berth-agent, operators), heartbeats and host listings."""
from __future__ import annotations

import dataclasses

from oslo_log import log as logging

from db import host_reports, hosts
from scheduler import fleet, validation
from scheduler.endpoints.rpc_method import primitive, rpc_method
from scheduler.rpc import check_json

LOG = logging.getLogger(__name__)

#: Devices in one report_pci_devices.
MAX_PCI_DEVICES = 4096


class HostsEndpoint:
    """report_compute_node, report_pci_devices, heartbeat, list_hosts and
    show_host, for an endpoint with ``db`` and ``policy``."""

    @rpc_method
    def report_compute_node(self, ctxt, node) -> dict:
        """Upsert one host (fleet format): capacity, ratios, topology; heartbeats it.

        A report without ``disabled`` keeps the host's disabled state, one
        without ``stats`` or ``metrics`` keeps those (an agent does not undo
        what an operator set or imported). Capacity below current usage is
        accepted as the truth about the hardware but disables the host with a
        ``capacity below usage: ...`` reason until a report fits again; the
        reply's ``warnings`` say what is short.
        """
        check_json(node, "node")
        record = fleet.parse_host(validation.mapping(node, "node"), where="node")
        written = host_reports.write_node_report(self.db, record, given=node.keys())
        record = written.record
        LOG.info("Host %s reported: %d vCPUs, %d MB RAM, %d GB disk",
                 record.host, record.vcpus, record.memory_mb, record.local_gb)
        if written.shortfalls:
            LOG.warning("Host %s reported capacity below its usage (%s); host disabled "
                        "until it fits: %s", record.host, "; ".join(written.shortfalls),
                        record.disabled_reason)
        return dict(primitive(hosts.get_host(self.db, record.node)),
                    warnings=[hosts.CAPACITY_REASON_PREFIX + s for s in written.shortfalls])

    @rpc_method
    def heartbeat(self, ctxt, host) -> bool:
        """Record that ``host`` is up (between its full reports); NotFound if unknown."""
        hosts.heartbeat(self.db, validation.name(host, "host"))
        return True

    @rpc_method
    def report_pci_devices(self, ctxt, node, devices) -> dict:
        """Replace one node's device list; claimed devices are never dropped."""
        node = validation.name(node, "node")
        check_json(devices, "devices")
        validation.sequence(devices, "devices", MAX_PCI_DEVICES)
        parsed = fleet.parse_pci_devices(devices, "devices")
        plan = host_reports.write_pci_report(self.db, node, parsed)
        for warning in plan.warnings:
            LOG.warning("Host %s: %s", node, warning)
        if not dataclasses.is_dataclass(plan):
            return primitive(plan)
        reply = dataclasses.asdict(plan)
        for device in (*reply["add"], *reply["update"]):
            device["tags"] = dict(device["tags"])   # the report format's mapping
        return primitive(reply)

    @rpc_method
    def list_hosts(self, ctxt) -> list[dict]:
        return primitive(hosts.list_hosts(self.db))

    @rpc_method
    def show_host(self, ctxt, name) -> dict:
        return primitive(hosts.get_host(self.db, validation.name(name, "name")))
