"""What a host's own reports write (``report_compute_node``,
``report_pci_devices``): one transaction each.

A capacity report describes the hardware as it is now. A report without
``disabled`` keeps the node's disabled state, one without ``stats`` or
``metrics`` keeps those (an agent does not undo what an operator set or
imported). Capacity below current usage is accepted as the truth but disables
the node with a ``capacity below usage: ...`` reason until a report fits again.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from db import errors as exception
from db import hosts, limits, models
from db import pci as db_pci
from db.api import Database
from db.records import HostRecord
from pci.device import PciDevice
from pci.report import ReportPlan

#: Fields a report keeps from the stored node when it does not name them.
KEPT_WHEN_ABSENT = ("stats", "metrics")


@dataclasses.dataclass(frozen=True)
class NodeReport:
    """A capacity report as written: the record (disabled state decided, absent
    fields kept) and what of the node's usage its capacity cannot hold."""

    record: HostRecord
    shortfalls: list[str]


def write_node_report(db: Database, record: HostRecord, given: Collection[str]) -> NodeReport:
    """Upsert the node of ``record`` and heartbeat its host; ``given``: the
    fields the report named."""
    with db.writer() as session:
        current = hosts.node_for_update(session, record.node)
        shortfalls = hosts.capacity_shortfalls(current, record) if current else []
        record = _disabled_state(record, current, "disabled" in given, shortfalls)
        if current is not None:
            kept = {f: json.loads(getattr(current, f) or "{}")
                    for f in KEPT_WHEN_ABSENT if f not in given}
            record = dataclasses.replace(record, **kept)
        hosts.upsert_host(session, record)
    return NodeReport(record=record, shortfalls=shortfalls)


def _disabled_state(record: HostRecord, current: models.ComputeNode | None, explicit: bool,
                    shortfalls: list[str]) -> HostRecord:
    """The report's disabled state: as it says, else as stored; a capacity
    reason is decided anew by each report."""
    prefix = hosts.CAPACITY_REASON_PREFIX
    if explicit:
        disabled, reason = record.disabled, record.disabled_reason
    elif current is not None:
        disabled, reason = current.disabled, current.disabled_reason
    else:
        disabled, reason = False, None
    if reason and reason.startswith(prefix):
        disabled, reason = False, None      # recomputed from this report
    if shortfalls and not disabled:
        disabled = True
        reason = (prefix + "; ".join(shortfalls))[:limits.MAX_NAME]
    return dataclasses.replace(record, disabled=disabled, disabled_reason=reason)


def write_pci_report(db: Database, name: str, devices: Sequence[PciDevice]) -> ReportPlan:
    """Replace the device list of node ``name`` (see ``db.pci.report_devices``:
    claimed devices are never dropped); the plan applied."""
    with db.writer_connection() as conn:
        return db_pci.report_devices(conn, node_id_by_name(conn, name), devices)


def node_id_by_name(conn: Connection, name: str) -> int:
    """The live node called ``name``, or the only node of host ``name``;
    InvalidRequest when the host has several, NotFound when there is none."""
    nodes = models.ComputeNode
    for column in (nodes.hypervisor_hostname, nodes.host):
        ids = list(conn.execute(sa.select(nodes.id).where(
            column == name, nodes.deleted == 0)).scalars())
        if len(ids) == 1:
            return ids[0]
        if ids:
            raise exception.InvalidRequest(
                field="node", reason=f"host {name} has {len(ids)} nodes: name the node")
    raise exception.NotFound(kind="Compute node", name=name)
