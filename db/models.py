"""SQLAlchemy models: the whole Berth schema.

Schema changes go through alembic migrations in ``db/migrations``; a test proves
the migrated schema equals these models.
"""
from __future__ import annotations

import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pci.device import MAX_TAGS_TEXT

# DATETIME with microseconds on MySQL/MariaDB: the changed-rows refresh compares
# updated_at values and second granularity would hide close updates.
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# JSON documents are stored as text: portable, and parsed only where needed.
JsonText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
# PCI device tags: canonical JSON short enough to be indexed (pools GROUP BY them),
# compared byte for byte on MySQL/MariaDB (their default collation would fold case
# and put ``{"a":"X"}`` and ``{"a":"x"}`` in one pool).
PCI_TAGS_LEN = MAX_TAGS_TEXT
PciTagsText = String(PCI_TAGS_LEN).with_variant(
    mysql.VARCHAR(PCI_TAGS_LEN, charset="utf8mb4", collation="utf8mb4_bin"),
    "mysql", "mariadb")


def utcnow() -> datetime.datetime:
    """Naive UTC now, the form every timestamp column stores."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class TimestampMixin:
    created_at: Mapped[datetime.datetime] = mapped_column(Timestamp, default=utcnow,
                                                          nullable=False)
    updated_at: Mapped[datetime.datetime] = mapped_column(Timestamp, default=utcnow,
                                                          onupdate=utcnow, nullable=False)


class ComputeNode(TimestampMixin, Base):
    """A hypervisor node: its description, topology and the claim generation.

    What it has of each resource class is in ``inventories`` (of its root
    provider and of its child providers, ``resource_providers``); what it
    handed out in ``allocations``. ``generation`` is bumped by every write to
    the node or its providers; claims are compare-and-swap on it.
    ``deleted`` is 0 for live rows and the row id once deleted (soft delete keeps
    the row visible to the changed-rows refresh so caches can drop it).
    """

    __tablename__ = "compute_nodes"
    __table_args__ = (
        UniqueConstraint("hypervisor_hostname", "deleted",
                         name="uniq_compute_nodes0hypervisor_hostname0deleted"),
        Index("compute_nodes_updated_at_idx", "updated_at"),
        Index("compute_nodes_host_idx", "host"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False, unique=True)
    host: Mapped[str] = mapped_column(String(255), nullable=False)
    hypervisor_hostname: Mapped[str] = mapped_column(String(255), nullable=False)
    running_vms: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    current_workload: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    failed_builds: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    hypervisor_type: Mapped[str | None] = mapped_column(String(255))
    hypervisor_version: Mapped[int | None] = mapped_column(BigInteger)
    host_ip: Mapped[str | None] = mapped_column(String(64))
    cpu_info: Mapped[str | None] = mapped_column(JsonText)
    supported_instances: Mapped[str | None] = mapped_column(JsonText)
    numa_topology: Mapped[str | None] = mapped_column(JsonText)
    stats: Mapped[str | None] = mapped_column(JsonText)
    metrics: Mapped[str | None] = mapped_column(JsonText)
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    deleted: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    deleted_at: Mapped[datetime.datetime | None] = mapped_column(Timestamp)


class Service(TimestampMixin, Base):
    """A compute service and its heartbeat (``last_seen_up``)."""

    __tablename__ = "services"
    __table_args__ = (
        UniqueConstraint("host", "binary", name="uniq_services0host0binary"),
        Index("services_updated_at_idx", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(255), nullable=False)
    binary: Mapped[str] = mapped_column(String(255), nullable=False)
    last_seen_up: Mapped[datetime.datetime | None] = mapped_column(Timestamp)
    report_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))


class PciDevice(TimestampMixin, Base):
    """One PCI device of a node. Pools are GROUP BY queries over these rows."""

    __tablename__ = "pci_devices"
    __table_args__ = (
        UniqueConstraint("compute_node_id", "address",
                         name="uniq_pci_devices0compute_node_id0address"),
        # Serves the all-nodes pools GROUP BY (WHERE status = 'available').
        Index("pci_devices_pool_idx", "status", "compute_node_id", "vendor_id",
              "product_id", "dev_type", "numa_node", "physical_network", "tags"),
        # Serves the per-node pools GROUP BY and per-node device listings.
        Index("pci_devices_node_pool_idx", "compute_node_id", "status", "vendor_id",
              "product_id", "dev_type", "numa_node", "physical_network", "tags"),
        Index("pci_devices_instance_uuid_idx", "instance_uuid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    compute_node_id: Mapped[int] = mapped_column(
        ForeignKey("compute_nodes.id", ondelete="CASCADE"), nullable=False)
    address: Mapped[str] = mapped_column(String(12), nullable=False)
    vendor_id: Mapped[str] = mapped_column(String(4), nullable=False)
    product_id: Mapped[str] = mapped_column(String(4), nullable=False)
    dev_type: Mapped[str] = mapped_column(String(8), nullable=False)
    parent_addr: Mapped[str | None] = mapped_column(String(12))
    numa_node: Mapped[int | None] = mapped_column(Integer)
    physical_network: Mapped[str | None] = mapped_column(String(255))
    tags: Mapped[str | None] = mapped_column(PciTagsText)  # pci.device.tags_text
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="available")
    instance_uuid: Mapped[str | None] = mapped_column(String(36))
    request_id: Mapped[str | None] = mapped_column(String(36))


class Aggregate(TimestampMixin, Base):
    """A host aggregate; an availability zone is its ``availability_zone`` metadata.

    Any change to an aggregate, its hosts or its metadata bumps its ``updated_at``
    so host-state caches notice with one cheap query.
    """

    __tablename__ = "aggregates"
    __table_args__ = (
        UniqueConstraint("name", "deleted", name="uniq_aggregates0name0deleted"),
        Index("aggregates_updated_at_idx", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False, unique=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    deleted: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    deleted_at: Mapped[datetime.datetime | None] = mapped_column(Timestamp)


class AggregateHost(Base):
    __tablename__ = "aggregate_hosts"
    __table_args__ = (
        UniqueConstraint("aggregate_id", "host", name="uniq_aggregate_hosts0aggregate_id0host"),
        Index("aggregate_hosts_host_idx", "host"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    aggregate_id: Mapped[int] = mapped_column(
        ForeignKey("aggregates.id", ondelete="CASCADE"), nullable=False)
    host: Mapped[str] = mapped_column(String(255), nullable=False)


class AggregateMetadata(Base):
    __tablename__ = "aggregate_metadata"
    __table_args__ = (
        UniqueConstraint("aggregate_id", "key", name="uniq_aggregate_metadata0aggregate_id0key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    aggregate_id: Mapped[int] = mapped_column(
        ForeignKey("aggregates.id", ondelete="CASCADE"), nullable=False)
    key: Mapped[str] = mapped_column(String(255), nullable=False)
    value: Mapped[str] = mapped_column(String(255), nullable=False)


class ResourceProvider(TimestampMixin, Base):
    """A resource provider of a compute node: its root provider (the node itself,
    same uuid and name) or a child of it, e.g. a physical GPU with VGPU
    inventory or an SR-IOV PF with bandwidth inventory. A node and its
    providers are one tree and change under the node's ``generation``."""

    __tablename__ = "resource_providers"
    __table_args__ = (
        UniqueConstraint("compute_node_id", "name",
                         name="uniq_resource_providers0compute_node_id0name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False, unique=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    compute_node_id: Mapped[int] = mapped_column(
        ForeignKey("compute_nodes.id", ondelete="CASCADE"), nullable=False)
    # None for the root provider.
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("resource_providers.id", ondelete="CASCADE"))
    # Its traits (``os-traits`` names and CUSTOM_*), sorted, separated by spaces:
    # read whole with the provider (the scheduler filters on them in memory).
    traits: Mapped[str] = mapped_column(JsonText, nullable=False, default="")


class ProviderInventory(Base):
    """What one provider has of one resource class (``db.inventory``'s fields),
    and ``used``: the sum of the allocations against it, written by the claims
    and releases that write those allocations, in the same transaction."""

    __tablename__ = "inventories"
    __table_args__ = (
        UniqueConstraint("provider_id", "resource_class",
                         name="uniq_inventories0provider_id0resource_class"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    provider_id: Mapped[int] = mapped_column(
        ForeignKey("resource_providers.id", ondelete="CASCADE"), nullable=False)
    resource_class: Mapped[str] = mapped_column(String(255), nullable=False)
    total: Mapped[int] = mapped_column(BigInteger, nullable=False)
    reserved: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    min_unit: Mapped[int] = mapped_column(BigInteger, nullable=False, default=1)
    max_unit: Mapped[int] = mapped_column(BigInteger, nullable=False)
    step_size: Mapped[int] = mapped_column(BigInteger, nullable=False, default=1)
    allocation_ratio: Mapped[float] = mapped_column(Float, nullable=False, default=1.0)
    used: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)


#: Consumer types: an instance holds its placement; a migration (or an
#: evacuation) holds a moving instance's source until the move ends; a
#: preempted instance gave its room to a request of higher priority and waits
#: for the caller to delete it (its allocation rows stay, uncounted).
CONSUMER_TYPES = ("instance", "migration", "evacuation", "preempted")
PREEMPTED = "preempted"


class Consumer(Base):
    """Whoever holds resources on one node: what the scheduler handed out, with
    the guest's fitted NUMA cells and claimed PCI devices. Its amounts are its
    ``allocations`` rows; a node's usage is the sum of those."""

    __tablename__ = "consumers"
    __table_args__ = (
        Index("consumers_compute_node_id_idx", "compute_node_id"),
        Index("consumers_instance_group_idx", "instance_group"),
        Index("consumers_instance_uuid_idx", "instance_uuid"),
        Index("consumers_pending_idx", "pending", "created_at"),
        # Serves the victims' search (preemptible, priority below the request's).
        Index("consumers_preemptible_idx", "preemptible", "priority", "compute_node_id"),
        # Serves the preempted listing and the per-node preemption budget.
        Index("consumers_preempted_idx", "consumer_type", "compute_node_id", "preempted_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # The consumer's own id: the instance's uuid for an instance consumer.
    uuid: Mapped[str] = mapped_column(String(36), nullable=False, unique=True)
    consumer_type: Mapped[str] = mapped_column(String(16), nullable=False,
                                               default="instance", server_default="instance")
    # The instance the consumer belongs to (itself for an instance consumer).
    instance_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    compute_node_id: Mapped[int] = mapped_column(
        ForeignKey("compute_nodes.id"), nullable=False)
    numa_cells: Mapped[str | None] = mapped_column(JsonText)
    pci_devices: Mapped[str | None] = mapped_column(JsonText)
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    instance_group: Mapped[str | None] = mapped_column(String(36))
    # The request this consumer answered, so ``reschedule`` can place it again:
    # stored once per request, in ``request_specs`` when the request has several
    # instances (their consumers share the row), else here, in ``request_spec``
    # (also where rows written before that table existed keep it).
    request_spec: Mapped[str | None] = mapped_column(JsonText)
    request_spec_id: Mapped[int | None] = mapped_column(
        ForeignKey("request_specs.id"), index=True)
    # Held until the caller confirms it (``confirm``); a pending consumer older
    # than ``[scheduler] claim_ttl`` is released by the reaper. Rows written
    # without it (tools, older releases) count as confirmed.
    pending: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False,
                                          server_default=false())
    created_at: Mapped[datetime.datetime] = mapped_column(Timestamp, default=utcnow,
                                                          nullable=False)
    # The instance's last move (its id) and how it stands: moving, confirmed or
    # reverted; a retried move, confirm or revert of that id is answered from it.
    move_id: Mapped[str | None] = mapped_column(String(36))
    move_state: Mapped[str | None] = mapped_column(String(16))
    # What the request that made it asked (``berth:priority``,
    # ``berth:preemptible``): a request of higher priority may take its room.
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0,
                                          server_default="0")
    preemptible: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False,
                                              server_default=false())
    # A preempted consumer (``consumer_type`` "preempted"): the instance that
    # took its room, and when.
    preempted_by: Mapped[str | None] = mapped_column(String(36))
    preempted_at: Mapped[datetime.datetime | None] = mapped_column(Timestamp)


class Allocation(Base):
    """An amount of one resource class a consumer holds of one provider."""

    __tablename__ = "allocations"
    __table_args__ = (
        Index("allocations_consumer_id_idx", "consumer_id"),
        Index("allocations_provider_id_idx", "provider_id", "resource_class"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), nullable=False)
    provider_id: Mapped[int] = mapped_column(
        ForeignKey("resource_providers.id"), nullable=False)
    resource_class: Mapped[str] = mapped_column(String(255), nullable=False)
    amount: Mapped[int] = mapped_column(BigInteger, nullable=False)


class RequestSpecRow(Base):
    """One request's spec (for one instance), shared by the consumers it made;
    deleted with the last of them."""

    __tablename__ = "request_specs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    spec: Mapped[str] = mapped_column(JsonText, nullable=False)
    created_at: Mapped[datetime.datetime] = mapped_column(Timestamp, default=utcnow,
                                                          nullable=False)


class ServerGroup(Base):
    """One row per server group with a hard policy: the lock a claim takes so that
    the group's policy check and the new member are one step, across schedulers."""

    __tablename__ = "server_groups"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class Lease(Base):
    """A named lease held by one process until ``expires_at`` (leader election
    through the database: e.g. the one claim reaper of a deployment)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255), nullable=False)
    expires_at: Mapped[datetime.datetime] = mapped_column(Timestamp, nullable=False)


#: What a transition row records (``db.transitions``): a consumer released by
#: a caller, by the reaper or by a reschedule; a move's holder ended.
TRANSITION_KINDS = ("released", "reaped", "rescheduled", "move-confirmed", "move-reverted")


class Transition(Base):
    """A consumer's last transition, kept for ``[scheduler] transition_ttl`` after
    its row is gone, so that a release, reschedule or move's end sent again
    (its answer lost) is answered with what the first one did."""

    __tablename__ = "transitions"
    __table_args__ = (
        Index("transitions_consumer_uuid_idx", "consumer_uuid"),
        Index("transitions_at_idx", "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    consumer_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    instance_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    # where the consumer was (no foreign key: the node may be deleted since)
    compute_node_id: Mapped[int] = mapped_column(Integer, nullable=False)
    host: Mapped[str | None] = mapped_column(String(255))
    # whose it was (a call of another project is answered as for nothing held)
    project_id: Mapped[str | None] = mapped_column(String(255))
    # a reschedule: the request it places again, so a re-sent one can finish it
    request_spec: Mapped[str | None] = mapped_column(JsonText)
    at: Mapped[datetime.datetime] = mapped_column(Timestamp, default=utcnow, nullable=False)


class NodeChange(Base):
    """One claim or release on a node, written in the transaction that bumps the
    node's ``generation`` to ``generation`` (``db.node_changes``): a host-state
    cache one generation behind takes the change from here instead of reading
    the whole node again. A generation with no row here (a host report, an
    inventory change, a move's source) is read again in full. Rows are kept
    ``[scheduler] node_change_ttl`` seconds."""

    __tablename__ = "node_changes"
    __table_args__ = (
        Index("node_changes_at_idx", "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # no foreign key: the node may be deleted before its changes are purged
    compute_node_id: Mapped[int] = mapped_column(Integer, nullable=False)
    generation: Mapped[int] = mapped_column(Integer, nullable=False)
    # the node's updated_at as the change stamped it
    at: Mapped[datetime.datetime] = mapped_column(Timestamp, nullable=False)
    # what changed (JSON, ``db.node_changes.Change``)
    change: Mapped[str] = mapped_column(JsonText, nullable=False)
