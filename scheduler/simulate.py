"""Scenario runner behind ``berth-manage simulate`` and the functional scenarios.

A scenario (doc/source/reference/file-formats.rst) is a fleet, optional config
overrides and steps. It runs in-process on a throwaway SQLite database; after
every step the runner checks,
on the hosts that step touched, that each node's usage equals the sum of its
allocations and stays within (total - reserved) x allocation ratio (NUMA usage
included), and once more on every host at the end.

Instances may be named by any label (``a1``, ``web-1``) wherever a UUID goes
(``instance_uuids``, ``release``, ``reschedule``, ``same_host``/``different_host``
hints, ``instance_group.uuid``, ``expect.same_host_as``): a label maps to a
stable UUID (:func:`label_uuid`) and the output shows the label.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import tempfile
import time
import uuid as uuidlib
from collections.abc import Iterator, Mapping
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg

from db import migration, models
from db.api import Database
from scheduler import exception

_STEP_KINDS = ("select", "release", "reschedule", "report", "expect_usage", "move",
               "confirm_move", "revert_move")
_EXPECT_KEYS = frozenset({"hosts", "host_in", "not_hosts", "hosts_distinct", "hosts_same",
                          "same_host_as", "error", "reason_contains", "alternates",
                          "allocations", "preempted"})
#: ``expect_usage`` counters besides resource class names (VGPU: 2): the root
#: provider's classic ones, and the node's instances.
USAGE_COUNTERS = ("vcpus_used", "pcpus_used", "memory_mb_used", "local_gb_used",
                  "disk_mb_used", "running_vms")


class ScenarioError(Exception):
    """The scenario file itself is malformed."""


@dataclasses.dataclass
class StepResult:
    index: int
    kind: str
    ok: bool
    placements: list[dict] = dataclasses.field(default_factory=list)
    error: str | None = None
    message: str = ""
    failures: list[str] = dataclasses.field(default_factory=list)

    def to_primitive(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ScenarioResult:
    description: str
    steps: list[StepResult]
    #: The invariants on every host once all steps ran.
    final_failures: list[str] = dataclasses.field(default_factory=list)
    #: Seconds spent loading the fleet, running the steps and the final check
    #: (not in the output: it differs from run to run).
    timing: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps) and not self.final_failures

    def to_primitive(self) -> dict:
        return {"description": self.description, "ok": self.ok,
                "steps": [s.to_primitive() for s in self.steps],
                "final_failures": list(self.final_failures)}


#: Labels of one scenario map to UUIDs in this namespace (uuid5), so a label
#: names the same instance in every step, every run and every output.
LABEL_NAMESPACE = uuidlib.UUID("5d1c4ea3-2a43-4b52-9d7e-5b2f3c1e8a60")


def label_uuid(label: str) -> str:
    """The UUID an instance label stands for; a UUID stands for itself."""
    try:
        return str(uuidlib.UUID(label))
    except (ValueError, TypeError, AttributeError):
        pass
    if not isinstance(label, str) or not label.strip() or len(label) > 255:
        raise ScenarioError(f"instance label: expected a non-empty string of at most 255 "
                            f"characters, got {label!r}")
    return str(uuidlib.uuid5(LABEL_NAMESPACE, label))


class Labels:
    """The labels a scenario used, both ways."""

    def __init__(self) -> None:
        self.by_uuid: dict[str, str] = {}

    def uuid(self, label: Any) -> str:
        if isinstance(label, int) and not isinstance(label, bool):
            label = str(label)        # YAML reads `release: 1` as a number
        value = label_uuid(label)
        self.by_uuid.setdefault(value, label)
        return value

    def label(self, value: str) -> str:
        return self.by_uuid.get(value, value)

    def request(self, body: Any) -> Any:
        """A copy of a select payload with its labels replaced by UUIDs."""
        if not isinstance(body, dict):
            return body
        out = dict(body)
        if isinstance(out.get("instance_uuids"), list):
            out["instance_uuids"] = [self.uuid(v) for v in out["instance_uuids"]]
        hints = out.get("scheduler_hints")
        if isinstance(hints, dict):
            hints = dict(hints)
            for key in ("same_host", "different_host"):
                value = hints.get(key)
                if isinstance(value, str):
                    value = [value]
                if isinstance(value, list):
                    hints[key] = [self.uuid(v) for v in value]
            if isinstance(hints.get("group"), str):
                hints["group"] = self.uuid(hints["group"])
            out["scheduler_hints"] = hints
        group = out.get("instance_group")
        if isinstance(group, dict) and isinstance(group.get("uuid"), str):
            out["instance_group"] = {**group, "uuid": self.uuid(group["uuid"])}
        return out


def load_scenario(path: str) -> dict:
    from scheduler.fleet import load_yaml

    with open(path, encoding="utf-8") as f:
        data = load_yaml(f)
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level")
    unknown = set(data) - {"description", "config", "fleet", "steps"}
    if unknown:
        raise ScenarioError(f"{path}: unknown top-level key(s): {', '.join(sorted(unknown))}")
    if "fleet" not in data or "steps" not in data:
        raise ScenarioError(f"{path}: 'fleet' and 'steps' are required")
    return data


@contextlib.contextmanager
def config_overrides(conf: cfg.ConfigOpts, overrides: Mapping | None) -> Iterator[None]:
    """Apply ``{group: {option: value}}`` for the duration of the block."""
    from scheduler import opts

    opts.list_opts()        # imports (so registers) every module that declares options
    applied = []
    try:
        for group, opts in (overrides or {}).items():
            if not isinstance(opts, dict):
                raise ScenarioError(f"config.{group}: expected a mapping")
            grp = None if group in ("DEFAULT", "default") else group
            for name, value in opts.items():
                try:
                    conf.set_override(name, value, group=grp)
                except (cfg.NoSuchOptError, cfg.NoSuchGroupError, ValueError) as e:
                    raise ScenarioError(f"config.{group}.{name}: {e}") from None
                applied.append((name, grp))
        yield
    finally:
        for name, grp in applied:
            conf.clear_override(name, group=grp)


@contextlib.contextmanager
def throwaway_scheduler(fleet, conf: cfg.ConfigOpts = cfg.CONF, seed: int | None = None
                        ) -> Iterator[tuple[Database, Any]]:
    """A FilterScheduler over ``fleet`` (a validated ``Fleet``) imported into a
    temporary SQLite database, warmed up; everything is removed afterwards."""
    from db import hosts as db_hosts
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    with tempfile.TemporaryDirectory(prefix="berth-sim-") as tmp:
        db = Database(f"sqlite:///{os.path.join(tmp, 'sim.sqlite')}")
        scheduler = None
        try:
            migration.db_sync(db)
            db_hosts.import_fleet(db, fleet)
            scheduler = FilterScheduler(HostManager(db, conf), conf, seed=seed)
            scheduler.warm_up()
            yield db, scheduler
        finally:
            if scheduler is not None:
                scheduler.host_manager.close()
            db.dispose()


def run_scenario(data: dict, conf: cfg.ConfigOpts = cfg.CONF) -> ScenarioResult:
    """Run one scenario on a throwaway SQLite database."""
    from scheduler import fleet as fleet_mod

    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    with config_overrides(conf, data.get("config")):
        fleet_data = data["fleet"]
        fleet = fleet_mod.load_fleet(fleet_data)
        steps = data["steps"]
        if not isinstance(steps, list):
            raise ScenarioError("steps: expected a list")
        with throwaway_scheduler(fleet, conf) as (db, scheduler):
            runner = _Runner(db, scheduler, fleet_data)
            t1 = time.perf_counter()
            try:
                results = [runner.run_step(i, step) for i, step in enumerate(steps)]
                t2 = time.perf_counter()
                final = check_invariants(db, conn=runner.check_conn)
            finally:
                runner.close()
            timing = {"setup_s": t1 - t0, "steps_s": t2 - t1,
                      "final_check_s": time.perf_counter() - t2}
    return ScenarioResult(description=data.get("description", ""), steps=results,
                          final_failures=final, timing=timing)


class _Runner:
    def __init__(self, db: Database, scheduler, fleet_data: dict) -> None:
        self.db = db
        self.scheduler = scheduler
        self.hosts_data = {h["host"]: dict(h) for h in fleet_data.get("hosts", [])}
        self.placed: dict[str, str] = {}     # instance uuid -> host
        self.moving: dict[str, str] = {}     # instance uuid -> its move's id
        self.labels = Labels()
        # One connection for every step's check (a pooled checkout pings first).
        self.check_conn = db.engine.connect()

    def close(self) -> None:
        self.check_conn.close()

    def run_step(self, index: int, step: Any) -> StepResult:
        if not isinstance(step, dict):
            raise ScenarioError(f"steps[{index}]: expected a mapping")
        kinds = [k for k in _STEP_KINDS if k in step]
        if len(kinds) != 1:
            raise ScenarioError(f"steps[{index}]: exactly one of {', '.join(_STEP_KINDS)} "
                                f"is required")
        kind = kinds[0]
        unknown = set(step) - {kind, "expect", "dry_run", "alternates", "description",
                               "allow_preemption"}
        if unknown:
            raise ScenarioError(f"steps[{index}]: unknown key(s) {', '.join(sorted(unknown))}")
        expect = step.get("expect") or {}
        bad = set(expect) - _EXPECT_KEYS
        if bad:
            raise ScenarioError(f"steps[{index}].expect: unknown key(s) "
                                f"{', '.join(sorted(bad))}")
        result = StepResult(index=index, kind=kind, ok=True)
        handler = getattr(self, f"_step_{kind}")
        touched: set[str] = set()
        try:
            handler(step[kind], step, result, touched)
        except (exception.NoValidHost, exception.InvalidRequest, exception.NotFound,
                exception.PluginError, exception.Conflict) as e:
            result.error = type(e).__name__
            result.message = self._with_labels(str(e))
        self._check_expect(expect, result)
        if not step.get("dry_run"):
            touched.update(p["host"] for p in result.placements)
        if touched:
            result.failures.extend(check_invariants(self.db, touched, self.check_conn))
        result.ok = not result.failures
        return result

    # -- steps ---------------------------------------------------------------
    def _with_labels(self, text: str) -> str:
        for value, label in self.labels.by_uuid.items():
            if value != label:
                text = text.replace(value, label)
        return text

    def _placement(self, chosen, alternates) -> dict:
        return {"instance": self.labels.label(chosen.instance_uuid),
                "instance_uuid": chosen.instance_uuid, "host": chosen.host,
                "node": chosen.node, "weight": round(chosen.weight, 4),
                "alternates": [s.host for s in alternates],
                "resources": dict(chosen.resources),
                "numa_cells": chosen.numa_cells, "pci_devices": list(chosen.pci_devices),
                **({"preempted": [self.labels.label(v["instance_uuid"])
                                  for v in chosen.preempted]} if chosen.preempted else {})}

    def _step_select(self, body, step, result: StepResult, touched: set[str]) -> None:
        spec = self.scheduler.parse_request(self.labels.request(body))
        answers = self.scheduler.select_destinations(
            spec, return_alternates=bool(step.get("alternates")),
            dry_run=bool(step.get("dry_run")),
            allow_preemption=bool(step.get("allow_preemption")))
        for per_instance in answers:
            chosen = per_instance[0]
            if not step.get("dry_run"):
                self.placed[chosen.instance_uuid] = chosen.host
                for victim in chosen.preempted:
                    self.placed.pop(victim["instance_uuid"], None)
            result.placements.append(self._placement(chosen, per_instance[1:]))

    def _step_release(self, body, step, result: StepResult, touched: set[str]) -> None:
        label = body.get("instance_uuid") if isinstance(body, dict) else body
        uuid = self.labels.uuid(label)
        host = self.placed.pop(uuid, None)
        if host is None:
            from db import claims

            alloc = claims.get_allocation(self.db, uuid)
            host = alloc["host"] if alloc else None
        released = self.scheduler.release(uuid)
        if host:
            touched.add(host)
        result.message = "released" if released else "nothing to release"

    def _step_reschedule(self, body, step, result: StepResult, touched: set[str]) -> None:
        if not isinstance(body, dict) or "instance_uuid" not in body \
                or "failed_host" not in body:
            raise ScenarioError("reschedule: instance_uuid and failed_host are required")
        touched.add(body["failed_host"])
        sels = self.scheduler.reschedule(self.labels.uuid(body["instance_uuid"]),
                                         body["failed_host"],
                                         return_alternates=bool(step.get("alternates")))
        chosen = sels[0]
        self.placed[chosen.instance_uuid] = chosen.host
        result.placements.append(self._placement(chosen, sels[1:]))

    def _step_report(self, body, step, result: StepResult, touched: set[str]) -> None:
        from db import hosts as db_hosts
        from scheduler import fleet as fleet_mod

        body = dict(body)
        name = body.get("host")
        if name not in self.hosts_data:
            raise ScenarioError(f"report: unknown host {name!r}")
        age = body.pop("heartbeat_age", None)
        merged = dict(self.hosts_data[name])
        merged.update(body)
        rec = fleet_mod.parse_host(merged)
        with self.db.writer() as session:
            db_hosts.upsert_host(session, rec)
        self.hosts_data[name] = merged
        if age is not None:
            seen = models.utcnow() - datetime.timedelta(seconds=float(age))
            svc = models.Service.__table__
            with self.db.writer_connection() as conn:
                conn.execute(sa.update(svc).where(svc.c.host == name)
                             .values(last_seen_up=seen, updated_at=models.utcnow()))
            # Heartbeats are read on an interval; a scenario wants it now.
            self.scheduler.host_manager._heartbeat_read_at = 0.0
        touched.add(name)
        result.message = f"reported {name}"

    def _step_move(self, body, step, result: StepResult, touched: set[str]) -> None:
        from scheduler.moves import Mover, MoveRequest

        if not isinstance(body, dict) or "instance_uuid" not in body or "kind" not in body:
            raise ScenarioError("move: instance_uuid and kind are required")
        data = dict(body)
        uuid = self.labels.uuid(data["instance_uuid"])
        data["instance_uuid"] = uuid
        if "migration_uuid" in data:
            data["migration_uuid"] = self.labels.uuid(data["migration_uuid"])
        else:
            data["migration_uuid"] = self.labels.uuid(f"{data['kind']}-of-"
                                                      f"{body['instance_uuid']}-{result.index}")
        if isinstance(data.get("request_spec"), dict):
            data["request_spec"] = self.labels.request(data["request_spec"])
        source = self.placed.get(uuid)
        sels = Mover(self.scheduler).move(MoveRequest.from_primitive(data),
                                          return_alternates=bool(step.get("alternates")))
        chosen = sels[0]
        if body["kind"] not in ("rebuild", "unshelve"):
            self.moving[uuid] = chosen.migration_uuid
        self.placed[uuid] = chosen.host
        if source:
            touched.add(source)
        result.placements.append(self._placement(chosen, sels[1:]))

    def _end_move(self, body, result: StepResult, touched: set[str], how: str) -> None:
        from scheduler.moves import Mover

        label = body.get("instance_uuid") if isinstance(body, dict) else body
        uuid = self.labels.uuid(label)
        migration = self.moving.get(uuid)
        if isinstance(body, dict) and "migration_uuid" in body:
            migration = self.labels.uuid(body["migration_uuid"])
        if migration is None:
            raise ScenarioError(f"{how}_move: {label} has no move to end")
        touched.update(self.hosts_data)        # source and destination, wherever they are
        getattr(Mover(self.scheduler), how)(uuid, migration)
        if how == "revert":
            from db import claims

            alloc = claims.get_allocation(self.db, uuid)
            if alloc:
                self.placed[uuid] = alloc["host"]
        result.message = f"{how}ed move {self.labels.label(migration)}"

    def _step_confirm_move(self, body, step, result: StepResult, touched: set[str]) -> None:
        self._end_move(body, result, touched, "confirm")

    def _step_revert_move(self, body, step, result: StepResult, touched: set[str]) -> None:
        self._end_move(body, result, touched, "revert")

    def _step_expect_usage(self, body, step, result: StepResult, touched: set[str]) -> None:
        usage = node_usage(self.db)
        for host, counters in (body or {}).items():
            have = usage.get(host)
            if have is None:
                result.failures.append(f"expect_usage: unknown host {host}")
                continue
            for counter, want in counters.items():
                if counter not in USAGE_COUNTERS and not _is_class(counter):
                    raise ScenarioError(f"expect_usage.{host}.{counter}: unknown counter "
                                        f"(a resource class, or one of "
                                        f"{', '.join(USAGE_COUNTERS)})")
                if have.get(counter, 0) != want:
                    result.failures.append(
                        f"expect_usage: {host} {counter} is {have.get(counter, 0)}, "
                        f"expected {want}")

    # -- checks --------------------------------------------------------------
    def _check_expect(self, expect: Mapping, result: StepResult) -> None:
        fails = result.failures
        want_error = expect.get("error")
        if want_error:
            if result.error != want_error:
                fails.append(f"expected error {want_error}, got "
                             f"{result.error or 'success'}")
        elif result.error:
            fails.append(f"unexpected {result.error}: {result.message}")
        if "reason_contains" in expect and expect["reason_contains"] not in result.message:
            fails.append(f"reason does not contain {expect['reason_contains']!r}: "
                         f"{result.message}")
        chosen = [p["host"] for p in result.placements]
        if "hosts" in expect and chosen != list(expect["hosts"]):
            fails.append(f"hosts: expected {expect['hosts']}, got {chosen}")
        if "host_in" in expect and not all(h in expect["host_in"] for h in chosen):
            fails.append(f"host_in: {chosen} not all in {expect['host_in']}")
        if "host_in" in expect and not chosen:
            fails.append("host_in: nothing was placed")
        if "not_hosts" in expect and any(h in expect["not_hosts"] for h in chosen):
            fails.append(f"not_hosts: {chosen} uses one of {expect['not_hosts']}")
        if expect.get("hosts_distinct") and len(set(chosen)) != len(chosen):
            fails.append(f"hosts_distinct: {chosen}")
        if expect.get("hosts_same") and len(set(chosen)) > 1:
            fails.append(f"hosts_same: {chosen}")
        if "same_host_as" in expect:
            ref = self.placed.get(self.labels.uuid(expect["same_host_as"]))
            if ref is None or any(h != ref for h in chosen) or not chosen:
                fails.append(f"same_host_as {expect['same_host_as']} ({ref}): {chosen}")
        if "alternates" in expect:
            counts = [len(p["alternates"]) for p in result.placements]
            if any(c != expect["alternates"] for c in counts):
                fails.append(f"alternates: expected {expect['alternates']} each, got {counts}")
        if "preempted" in expect:
            want = expect["preempted"]
            if not isinstance(want, list):
                raise ScenarioError("expect.preempted: expected a list of instance labels")
            got = sorted(label for p in result.placements for label in p.get("preempted", ()))
            if sorted(self.labels.label(self.labels.uuid(w)) for w in want) != got:
                fails.append(f"preempted: expected {sorted(map(str, want))}, got {got}")
        if "allocations" in expect:
            want = expect["allocations"]
            if not isinstance(want, dict) or not all(_is_class(k) for k in want):
                raise ScenarioError("expect.allocations: expected {RESOURCE_CLASS: amount}")
            if not result.placements:
                fails.append("allocations: nothing was placed")
            for p in result.placements:
                held = {rc: n for rc, n in p["resources"].items() if n}
                wanted = {rc: n for rc, n in want.items() if n}
                if held != wanted:
                    fails.append(f"allocations: {p['instance']} holds {held}, expected "
                                 f"{wanted}")


def _is_class(name: Any) -> bool:
    from db import inventory

    try:
        inventory.check_class(name, "class")
    except inventory.InventoryError:
        return False
    return True


def node_usage(db: Database) -> dict[str, dict[str, Any]]:
    """host -> what it holds: every resource class (over the node's providers),
    the root's classic counters and running_vms (``db.invariants``)."""
    from db import invariants

    with db.reader_connection() as conn:
        return invariants.usage_by_host(conn)


def check_invariants(db: Database, hosts: set[str] | None = None, conn=None) -> list[str]:
    """Usage equals the sum of allocations and stays within capacity x ratio
    (``db.invariants``), on the nodes of ``hosts`` (the ones a step touched;
    None: all). ``conn``: an open connection to read on."""
    from db import invariants

    if conn is None:
        with db.reader_connection() as conn:
            return check_invariants(db, hosts, conn)
    with contextlib.nullcontext() if conn.in_transaction() else conn.begin():
        return invariants.check(conn, hosts)


def format_table(result: ScenarioResult) -> str:
    lines = []
    if result.description:
        lines.append(result.description)
    for s in result.steps:
        status = "ok  " if s.ok else "FAIL"
        if s.placements:
            for p in s.placements:
                alt = f"  alternates: {', '.join(p['alternates'])}" if p["alternates"] else ""
                name = p.get("instance", p["instance_uuid"])
                lines.append(f"{status} step {s.index} {s.kind}: {name} -> {p['host']}{alt}")
        else:
            detail = f"{s.error}: {s.message}" if s.error else s.message
            lines.append(f"{status} step {s.index} {s.kind}: {detail}")
        for f in s.failures:
            lines.append(f"     ! {f}")
    for f in result.final_failures:
        lines.append(f"FAIL final check: {f}")
    lines.append("PASSED" if result.ok else "FAILED")
    return "\n".join(lines)


def dumps(result: ScenarioResult) -> str:
    return json.dumps(result.to_primitive(), indent=2, sort_keys=True, default=str)
