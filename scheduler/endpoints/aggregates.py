"""Aggregate and availability-zone management (operators; an availability zone
is an aggregate's ``availability_zone``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from db import aggregates
from scheduler import exception, validation
from scheduler.endpoints.rpc_method import primitive, rpc_method
from scheduler.rpc import check_json

MAX_METADATA = 128      # keys in one aggregate metadata update
MAX_AGGREGATE_HOSTS = 10000


def _metadata(value: Any) -> dict[str, str | None]:
    """A metadata update: name -> value, or None to delete the key."""
    check_json(value, "metadata")
    return validation.metadata(value, "metadata", max_keys=MAX_METADATA, deletions=True)


def _members(host: Any, hosts: Any) -> list[str]:
    """The hosts of a membership call: ``host`` or ``hosts``, exactly one."""
    if hosts is None:
        if host is None:
            raise exception.InvalidRequest(field="host",
                                           reason="expected host (or a list in hosts)")
        return [validation.name(host, "host")]
    if host is not None:
        raise exception.InvalidRequest(field="hosts", reason="give host or hosts, not both")
    return aggregates.host_names(validation.names(hosts, "hosts", MAX_AGGREGATE_HOSTS))


class AggregatesEndpoint:
    """aggregate_create, aggregate_update, aggregate_delete, aggregate_add_host,
    aggregate_remove_host, aggregate_set_metadata and aggregate_list, for an
    endpoint with ``db`` and ``policy``."""

    @rpc_method
    def aggregate_create(self, ctxt, name, availability_zone=None, metadata=None,
                         hosts=None) -> dict:
        name = validation.name(name, "name")
        availability_zone = validation.optional(validation.name, availability_zone,
                                                "availability_zone")
        metadata = None if metadata is None else _metadata(metadata)
        host_list = validation.optional(validation.names, hosts, "hosts", MAX_AGGREGATE_HOSTS)
        return primitive(aggregates.create_aggregate(
            self.db, name, availability_zone=availability_zone, metadata=metadata,
            hosts=host_list))

    @rpc_method
    def aggregate_update(self, ctxt, name, new_name=None, **kw) -> dict:
        """Rename and/or change the zone; ``availability_zone=None`` clears it,
        leaving the argument out keeps it."""
        name = validation.name(name, "name")
        unknown = set(kw) - {"availability_zone"}
        if unknown:
            raise exception.InvalidRequest(field=sorted(unknown)[0], reason="unknown argument")
        args: dict[str, Any] = {"new_name": validation.optional(validation.name, new_name,
                                                                "new_name")}
        if "availability_zone" in kw:
            args["availability_zone"] = validation.optional(
                validation.name, kw["availability_zone"], "availability_zone")
        return primitive(aggregates.update_aggregate(self.db, name, **args))

    @rpc_method
    def aggregate_delete(self, ctxt, name) -> bool:
        aggregates.delete_aggregate(self.db, validation.name(name, "name"))
        return True

    @rpc_method
    def aggregate_add_host(self, ctxt, name, host=None, hosts=None) -> dict:
        """Add ``host`` (1.0), or every one of ``hosts`` (1.1) in one
        transaction: nothing is written when one is unknown (NotFound), a
        member already or would be in a second zone (Conflict), each naming
        the host."""
        return self._membership(name, host, hosts, aggregates.add_host, aggregates.add_hosts)

    @rpc_method
    def aggregate_remove_host(self, ctxt, name, host=None, hosts=None) -> dict:
        """Remove ``host`` (1.0), or every one of ``hosts`` (1.1) in one
        transaction: nothing is removed when one is not a member (NotFound
        naming it)."""
        return self._membership(name, host, hosts, aggregates.remove_host,
                                aggregates.remove_hosts)

    def _membership(self, name: Any, host: Any, hosts: Any, one: Callable,
                    many: Callable) -> dict:
        """A membership call: ``one(db, name, host)`` for ``host`` (1.0),
        ``many(db, name, hosts)`` for ``hosts`` (1.1)."""
        name = validation.name(name, "name")
        members = _members(host, hosts)
        if hosts is None:
            return primitive(one(self.db, name, members[0]))
        return primitive(many(self.db, name, members))

    @rpc_method
    def aggregate_set_metadata(self, ctxt, name, metadata) -> dict:
        return primitive(aggregates.set_metadata(self.db, validation.name(name, "name"),
                                                 _metadata(metadata)))

    @rpc_method
    def aggregate_list(self, ctxt) -> list[dict]:
        return primitive(aggregates.list_aggregates(self.db))
