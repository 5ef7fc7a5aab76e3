"""Move operations: resize, migrate, live-migrate, evacuate, rebuild and unshelve.

A move names the instance, its kind and a move id (the migration's uuid, chosen
by the caller so that a retry of the same move is recognised). For resize,
migrate, live-migrate and evacuate the scheduler places the instance again —
with its stored request, the new flavor for a resize — and claims the
destination in the same transaction that hands the instance's source over to a
*holder* consumer whose uuid is the move id (``db.claims``: ``migration``, or
``evacuation``). Usage never counts the instance twice on a host it is not on
twice, and the source's room stays held until the move ends:

* ``confirm``: the holder is released (the source is free);
* ``revert``: the destination is released and the source handed back to the
  instance (it always fits: its room was held);
* a move nobody confirms or reverts is reverted after ``[scheduler] move_ttl``
  (the claim reaper does it, with a WARNING line and ``berth_moves_reverted_total``);
* an evacuation's holder is released once its source host is heard from again
  (a report or heartbeat after the evacuation), or by an operator
  (``berth-manage allocations release MOVE_ID``).

Rebuild claims nothing: only the image-dependent filters run on the instance's
host (ImagePropertiesFilter, IsolatedHostsFilter, AggregateImagePropertiesIsolation
when enabled, and the image's required traits). Unshelve places an instance that
holds nothing, from the request the caller sends (as ``select_destinations``).

Every call is idempotent by instance and move id: a move, confirm or revert sent
again answers as the first did (the instance's consumer records its last move
and how it ended).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from db import claims
from db import moves as db_moves
from db.models import utcnow
from scheduler import exception, metrics
from scheduler.request_spec import Flavor, Image, RequestSpec
from scheduler.selection import Selection

LOG = logging.getLogger(__name__)

KINDS = ("resize", "migrate", "live-migrate", "evacuate", "rebuild", "unshelve")
#: Filters a rebuild asks on the instance's own host (those that read the image).
IMAGE_FILTERS = ("ImagePropertiesFilter", "IsolatedHostsFilter",
                 "AggregateImagePropertiesIsolation")

move_opts = [
    cfg.BoolOpt("allow_resize_to_same_host", default=False,
                help="Let a resize land on the instance's own host (then that host must "
                     "hold the old and the new flavor at once until the resize is "
                     "confirmed or reverted). Migrations never stay on their host."),
    cfg.IntOpt("move_ttl", default=86400, min=0,
               help="Seconds a move (resize, migrate, live-migrate) may wait for its "
                    "confirm or revert before the claim reaper reverts it, giving its "
                    "destination back and its source to the instance. 0: never."),
]
cfg.CONF.register_opts(move_opts, group="scheduler")
LIST_OPTS = [("scheduler", move_opts)]

_KEYS = frozenset({"instance_uuid", "kind", "migration_uuid", "flavor", "image",
                   "request_spec", "destination", "force", "availability_zone"})


@dataclasses.dataclass(frozen=True)
class MoveRequest:
    """A validated move (``from_primitive`` raises InvalidRequest naming the field)."""

    instance_uuid: str
    kind: str
    migration_uuid: str
    flavor: Mapping | None = None           # resize: the new flavor
    image: Mapping | None = None            # rebuild: the new image
    request_spec: Mapping | None = None     # unshelve: the instance's request
    destination: str | None = None          # a host or node name
    force: bool = False                     # live-migrate only: no filters
    availability_zone: str | None = None    # unshelve

    @classmethod
    def from_primitive(cls, data: Any) -> MoveRequest:
        if not isinstance(data, dict):
            raise exception.InvalidRequest(field="move", reason="expected an object")
        unknown = sorted(str(k) for k in data if k not in _KEYS)
        if unknown:
            raise exception.InvalidRequest(field=f"move.{unknown[0]}", reason="unknown key")
        kind = data.get("kind")
        if kind not in KINDS:
            raise exception.InvalidRequest(field="move.kind",
                                           reason=f"expected one of {', '.join(KINDS)}, got "
                                                  f"{kind!r}")
        instance = _uuid(data.get("instance_uuid"), "move.instance_uuid")
        migration = data.get("migration_uuid")
        migration = str(uuidlib.uuid4()) if migration is None else \
            _uuid(migration, "move.migration_uuid")
        if migration == instance:
            raise exception.InvalidRequest(field="move.migration_uuid",
                                           reason="must differ from the instance's uuid")
        force = data.get("force", False)
        if not isinstance(force, bool):
            raise exception.InvalidRequest(field="move.force", reason="expected true or false")
        if force and kind != "live-migrate":
            raise exception.InvalidRequest(field="move.force",
                                           reason="only a live-migrate may be forced")
        wanted = {"resize": "flavor", "rebuild": "image", "unshelve": "request_spec"}
        needed = wanted.get(kind)
        for key in ("flavor", "image", "request_spec"):
            if key == needed and data.get(key) is None:
                raise exception.InvalidRequest(field=f"move.{key}",
                                               reason=f"required for a {kind}")
            if key != needed and data.get(key) is not None:
                raise exception.InvalidRequest(field=f"move.{key}",
                                               reason=f"not taken by a {kind}")
        if data.get("availability_zone") is not None and kind != "unshelve":
            raise exception.InvalidRequest(field="move.availability_zone",
                                           reason="only an unshelve takes a zone")
        if data.get("destination") is not None and kind == "rebuild":
            raise exception.InvalidRequest(field="move.destination",
                                           reason="a rebuild stays on its host")
        for key in ("destination", "availability_zone"):
            value = data.get(key)
            if value is not None and (not isinstance(value, str) or not value
                                      or len(value) > 255):
                raise exception.InvalidRequest(field=f"move.{key}",
                                               reason="expected a name of 1 to 255 "
                                                      "characters")
        return cls(instance_uuid=instance, kind=kind, migration_uuid=migration,
                   flavor=data.get("flavor"), image=data.get("image"),
                   request_spec=data.get("request_spec"),
                   destination=data.get("destination"), force=force,
                   availability_zone=data.get("availability_zone"))


def _stored_request(req: MoveRequest, alloc: Mapping) -> dict:
    """The instance's stored request, for one instance, to place it again."""
    if not alloc.get("request_spec"):
        raise exception.Conflict(reason=f"instance {req.instance_uuid} was placed without a "
                                        f"stored request: it cannot be "
                                        f"{'rebuilt' if req.kind == 'rebuild' else 'moved'}")
    data = json.loads(alloc["request_spec"])
    data.pop("instance_uuids", None)
    data["num_instances"] = 1
    return data


def _uuid(value: Any, field: str) -> str:
    try:
        if not isinstance(value, str):
            raise ValueError
        return str(uuidlib.UUID(value))
    except ValueError:
        raise exception.InvalidRequest(field=field, reason=f"not a UUID: {value!r}") from None


class Mover:
    """The moves of one scheduler (a FilterScheduler: its cache, filters, claims)."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.db = scheduler.db
        self.conf = scheduler.conf
        self.hm = scheduler.host_manager

    # -- moving -------------------------------------------------------------------------
    def move(self, req: MoveRequest, *, return_alternates: bool = False,
             pending: bool = False) -> list[Selection]:
        """Carry out ``req``: the chosen host first (with ``migration_uuid``), then
        alternates when asked (their claims are the caller's to try: none is held)."""
        if req.kind == "unshelve":
            return self._unshelve(req, return_alternates, pending)
        alloc = claims.get_allocation(self.db, req.instance_uuid)
        earlier = self._earlier(req, alloc)
        if earlier is not None:
            return earlier
        if alloc is None or alloc["consumer_type"] != "instance":
            raise exception.NotFound(kind="Instance allocation", name=req.instance_uuid)
        if req.kind == "rebuild":
            return self._rebuild(req, alloc)
        holder = db_moves.holder_of(self.db, req.instance_uuid)
        if holder is not None:
            raise exception.Conflict(reason=f"instance {req.instance_uuid} is moving already "
                                            f"(move {holder.uuid}): confirm or revert it first")
        self.hm.refresh()
        source = self.hm.get(alloc["compute_node_id"])
        if req.kind == "evacuate":
            self._check_source_down(alloc, source)
        spec, kept = self._spec(req, alloc)
        hold_type = "evacuation" if req.kind == "evacuate" else "migration"
        try:
            chosen, selections = self.scheduler.place_move(
                spec, req.instance_uuid,
                claims.MoveFrom(alloc["compute_node_id"], req.migration_uuid, hold_type),
                kept_spec=kept, force=req.force, return_alternates=return_alternates,
                pending=pending)
        except exception.Conflict:
            # The claim's COMMIT went through but its answer was lost: its retry
            # found the instance moved already, by this very move.
            now = claims.get_allocation(self.db, req.instance_uuid)
            earlier = self._earlier(req, now)
            if earlier is None:
                raise
            self.hm.refresh_nodes([alloc["compute_node_id"], now["compute_node_id"]])
            return earlier
        metrics.count_move(req.kind)
        LOG.info("Moving %s (%s %s) from %s to %s", req.instance_uuid, req.kind,
                 req.migration_uuid, alloc["host"], chosen.host)
        return [dataclasses.replace(s, migration_uuid=req.migration_uuid) for s in selections]

    def _earlier(self, req: MoveRequest, alloc: Mapping | None) -> list[Selection] | None:
        """The answer to a move sent again (its reply was lost): where the instance
        is now; Conflict when that move was reverted. None: a new move."""
        if alloc is None or alloc.get("move_id") != req.migration_uuid:
            return None
        if alloc.get("move_state") == "reverted":
            raise exception.Conflict(reason=f"move {req.migration_uuid} of "
                                            f"{req.instance_uuid} was reverted")
        LOG.info("Move %s of %s was made already (a retry): returning its placement",
                 req.migration_uuid, req.instance_uuid)
        return [dataclasses.replace(self.scheduler._held_selection(req.instance_uuid, alloc),
                                    migration_uuid=req.migration_uuid)]

    def _spec(self, req: MoveRequest, alloc: Mapping) -> tuple[RequestSpec, RequestSpec]:
        """The instance's stored request for one more placement of it (without
        its source, or only the requested destination), and the request kept
        with the new placement (the new flavor, no move's constraints)."""
        data = _stored_request(req, alloc)
        if req.kind == "resize":
            Flavor.from_primitive(req.flavor)       # its errors name move.flavor below
            data["flavor"] = req.flavor
        kept = dict(data)
        same_host = req.kind == "resize" and self.conf.scheduler.allow_resize_to_same_host
        data["ignore_hosts"] = sorted(set(data.get("ignore_hosts") or ())
                                      | (set() if same_host else {alloc["host"]}))
        data.pop("force_hosts", None)
        data.pop("force_nodes", None)
        if req.destination is not None:
            data.update(self._destination(req.destination))
        try:
            return self.scheduler.parse_request(data), self.scheduler.parse_request(kept)
        except exception.InvalidRequest as e:
            field = e.kwargs.get("field", "")
            if field.startswith("flavor"):
                raise exception.InvalidRequest(field=f"move.{field}",
                                               reason=e.kwargs.get("reason", "")) from None
            raise

    def _destination(self, name: str) -> dict:
        """``force_hosts`` or ``force_nodes`` for a requested destination: only
        it is considered (every filter still runs, unless forced)."""
        if self.hm.hosts_named(name):
            return {"force_hosts": [name]}
        if any(h.nodename == name for h in self.hm.host_states()):
            return {"force_nodes": [name]}
        raise exception.NotFound(kind="Host", name=name)

    def _check_source_down(self, alloc: Mapping, source) -> None:
        if source is None:
            return
        down_time = self.conf.service_down_time
        heard = source.last_heartbeat
        up = heard is None or heard >= utcnow() - datetime.timedelta(seconds=down_time)
        if up and not source.disabled:
            raise exception.InvalidRequest(
                field="move.kind", reason=f"the instance's host {alloc['host']} is up and "
                                          f"enabled: migrate the instance instead")

    # -- the kinds that claim no source ------------------------------------------------
    def _unshelve(self, req: MoveRequest, return_alternates: bool, pending: bool
                  ) -> list[Selection]:
        if claims.get_allocation(self.db, req.instance_uuid) is not None:
            raise exception.Conflict(reason=f"instance {req.instance_uuid} holds an "
                                            f"allocation: it is not shelved")
        data = dict(req.request_spec)
        data["num_instances"] = 1
        data["instance_uuids"] = [req.instance_uuid]
        if req.availability_zone is not None:
            data["availability_zone"] = req.availability_zone
        if req.destination is not None:
            data.update(self._destination(req.destination))
        spec = self.scheduler.parse_request(data)
        kw = {"pending": True} if pending else {}
        placed = self.scheduler.select_destinations(spec, [req.instance_uuid],
                                                    return_alternates, **kw)[0]
        metrics.count_move(req.kind)
        return [dataclasses.replace(s, migration_uuid=req.migration_uuid) for s in placed]

    def _rebuild(self, req: MoveRequest, alloc: Mapping) -> list[Selection]:
        """The instance's host answers the image-dependent filters with the new
        image; nothing is claimed."""
        from scheduler import cycle as cycles
        from scheduler import resource_request
        from scheduler.plugins import RequestContext

        data = _stored_request(req, alloc)
        image = Image.from_primitive(req.image)
        data["image"] = image.to_primitive()
        spec = self.scheduler.parse_request(data)
        self.hm.refresh()
        host = self.hm.get(alloc["compute_node_id"])
        if host is None:
            raise exception.NotFound(kind="Compute node", name=alloc["host"])
        traits = resource_request.image_traits(image)
        missing = sorted(traits - host.traits)
        reasons: dict[str, int] = {}
        if missing:
            reasons[f"ImageTraits: lacks trait {missing[0]}"] = 1
        flts = [f for f in self.scheduler.filters if f.name in IMAGE_FILTERS]
        if not reasons and flts:
            one = cycles.Cycle(cycles.plan(flts), (), self.hm.columns, 1)
            reason = one.recheck(RequestContext(spec=spec, now=utcnow(), conf=self.conf),
                                 host)
            if reason:
                reasons[reason] = 1
        if reasons:
            summary = {"hosts": 1, "available": 0, "instance_index": 0,
                       "filters": [{"filter": "rebuild", "removed": 1, "reasons": reasons}]}
            raise exception.NoValidHost(reason=f"the instance's host {host.host} refuses "
                                               f"the image: {next(iter(reasons))}",
                                        summary=summary)
        metrics.count_move(req.kind)
        return [dataclasses.replace(self.scheduler._held_selection(req.instance_uuid, alloc),
                                    migration_uuid=req.migration_uuid)]

    # -- ending a move ------------------------------------------------------------------
    def confirm(self, instance_uuid: str, migration_uuid: str) -> bool:
        """The move is done: its source is released. True when it is confirmed
        (now or before); NotFound for a move the instance never made; Conflict
        when it was reverted."""
        released = db_moves.confirm(self.db, instance_uuid, migration_uuid)
        if released is None:
            return self._ended(instance_uuid, migration_uuid, "confirmed")
        self._given_back(released)
        LOG.info("Confirmed move %s of %s: released its source on %s", migration_uuid,
                 instance_uuid, released.host)
        return True

    def revert(self, instance_uuid: str, migration_uuid: str, why: str | None = None) -> bool:
        """The move is undone: the destination is released and the instance has its
        source back. True when it is reverted (now or before); NotFound for a move
        the instance never made; Conflict when it was confirmed."""
        reverted = db_moves.revert(self.db, instance_uuid, migration_uuid)
        if reverted is None:
            return self._ended(instance_uuid, migration_uuid, "reverted")
        if reverted.released is not None:
            self.hm.note_released(instance_uuid)
            self._given_back(reverted.released)
        self.hm.refresh_nodes([reverted.source_node_id])
        (LOG.warning if why else LOG.info)(
            "Reverted move %s of %s%s", migration_uuid, instance_uuid,
            f": {why}" if why else "")
        return True

    def _ended(self, instance_uuid: str, migration_uuid: str, wanted: str) -> bool:
        state = db_moves.move_state(self.db, instance_uuid, migration_uuid)
        if state not in ("confirmed", "reverted"):
            raise exception.NotFound(kind="Move", name=migration_uuid)
        if state != wanted:
            raise exception.Conflict(reason=f"move {migration_uuid} of {instance_uuid} "
                                            f"was {state} already")
        return True

    def _given_back(self, released: claims.Released) -> None:
        self.hm.note_released(released.instance_uuid)
        if not self.hm.apply_release(released):
            self.hm.refresh_nodes([released.node_id])

    # -- the reaper's part ----------------------------------------------------------------
    def reap(self, now: datetime.datetime | None = None) -> int:
        """Revert the moves older than ``move_ttl``; release the evacuations whose
        source host was heard from after it; how many holders were ended."""
        now = now or utcnow()
        ended = 0
        ttl = self.conf.scheduler.move_ttl
        if ttl > 0:
            cutoff = now - datetime.timedelta(seconds=ttl)
            for holder in db_moves.holders(self.db, hold_type="migration", older_than=cutoff):
                try:
                    self.revert(holder.instance_uuid, holder.uuid,
                                why=f"neither confirmed nor reverted within [scheduler] "
                                    f"move_ttl ({ttl} s)")
                except exception.BerthError:
                    continue        # ended meanwhile
                metrics.count_move_reverted()
                ended += 1
        for holder in db_moves.holders(self.db, hold_type="evacuation"):
            if self._heard_from(holder):
                released = claims.release(self.db, holder.uuid)
                if released is not None:
                    self._given_back(released)
                    LOG.info("Released evacuated instance %s's place on %s: the host is back",
                             holder.instance_uuid, holder.host)
                    ended += 1
        return ended

    def _heard_from(self, holder: db_moves.Holder) -> bool:
        """Whether the evacuated host reported or heartbeated after the evacuation."""
        for hs in self.hm.hosts_named(holder.host):
            if hs.last_heartbeat is not None and hs.last_heartbeat > holder.created_at:
                return True
        return False
