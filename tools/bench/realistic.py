"""The realistic benchmark (issue 10): heterogeneous fleets, a mixed trace, cold replays.

Per fleet size: generate the fleet (``fleet.py``) and one seeded trace
(``trace.py``); per backend: bulk-load the fleet into a fresh database, replay the
trace cold in a fresh process (``replay.run_cold``), check the database
(``check.py``), then run the 16-thread group burst on it and check again. With
``e2e``, the same trace goes once more, on a freshly loaded copy of the fleet,
through the ``berth-scheduler`` daemon over RabbitMQ. Any violation or scheduler
error makes the run fail.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from oslo_config import cfg

from tools.bench import check as bench_check
from tools.bench import daemon as bench_daemon
from tools.bench import fleet as bench_fleet
from tools.bench import replay as bench_replay
from tools.bench import trace as bench_trace


@dataclasses.dataclass(frozen=True)
class Target:
    text: str
    size: int
    backend: str
    stat: str
    check: Callable[[float], bool]


TARGETS = (
    Target("p50 <= 3 ms", 10000, "sqlite", "p50", lambda v: v <= 3.0),
    Target("p99 <= 20 ms", 10000, "sqlite", "p99", lambda v: v <= 20.0),
    Target("max <= 50 ms", 10000, "sqlite", "max", lambda v: v <= 50.0),
    Target("p99 <= 60 ms", 100000, "sqlite", "p99", lambda v: v <= 60.0),
    Target("p99 <= 60 ms", 100000, "mariadb", "p99", lambda v: v <= 60.0),
)


@dataclasses.dataclass
class Row:
    size: int
    backend: str
    mode: str                  # "in-process cold", "e2e rpc", "burst 16 threads"
    kind: str
    stats: dict[str, Any]
    note: str = ""
    target: str = ""
    status: str = ""


@dataclasses.dataclass
class Report:
    rows: list[Row] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    violations: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    profiles: list[dict] = dataclasses.field(default_factory=list)
    #: every timed operation of every run: {"size", "backend", "mode", "records"}
    runs: list[dict] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.errors

    def add_summary(self, size: int, backend: str, mode: str, records: list[dict],
                    per_kind: bool) -> None:
        self.runs.append({"size": size, "backend": backend, "mode": mode,
                          "records": records})
        summary = bench_replay.summarize(records)
        for kind, s in summary.items():
            if not per_kind and kind != "all requests":
                continue
            row = Row(size, backend, mode, kind, s)
            if kind == "all requests" and mode == "in-process cold":
                hits = [t for t in TARGETS if t.size == size and t.backend == backend]
                row.target = ", ".join(t.text for t in hits)
                if hits and s["n"]:
                    row.status = "PASS" if all(t.check(s[t.stat]) for t in hits) else "MISS"
            self.rows.append(row)
        for r in records:
            if r["outcome"] == "error":
                self.errors.append(f"{size:,} {backend} {mode} op {r['i']} ({r['kind']}): "
                                   f"{r['reason']}")

    def derived_targets(self) -> None:
        """The targets that compare runs: MariaDB p50 within 2 ms of SQLite at the
        same size; the mean grows less than 2.5x from 1k to 10k hosts."""
        cold = {(r.size, r.backend): r.stats for r in self.rows
                if r.mode == "in-process cold" and r.kind == "all requests"}
        for (size, backend), s in sorted(cold.items()):
            lite = cold.get((size, "sqlite"))
            if backend == "mariadb" and lite:
                gap = s["p50"] - lite["p50"]
                self.notes.append(f"target MariaDB p50 within 2 ms of SQLite @{size:,}: "
                                  f"{s['p50']:.2f} - {lite['p50']:.2f} = {gap:+.2f} ms "
                                  f"{'PASS' if gap <= 2.0 else 'MISS'}")
        for backend in ("sqlite", "mariadb"):
            small, big = cold.get((1000, backend)), cold.get((10000, backend))
            if small and big:
                growth = big["mean"] / small["mean"]
                cpu = ""
                if "cpu_mean" in small and "cpu_mean" in big:
                    cpu = (f" (CPU mean {small['cpu_mean']:.2f} -> {big['cpu_mean']:.2f} ms = "
                           f"{big['cpu_mean'] / small['cpu_mean']:.2f}x)")
                self.notes.append(f"target mean growth 1k -> 10k < 2.5x ({backend}): "
                                  f"{small['mean']:.2f} -> {big['mean']:.2f} ms = "
                                  f"{growth:.2f}x {'PASS' if growth < 2.5 else 'MISS'}{cpu}")

    def table(self) -> str:
        head = ("fleet", "db", "mode", "kind", "n", "p50", "p99", "max", "mean", "cpu p50",
                "cpu mean", "placed/NoValidHost", "target", "")
        lines = []
        for r in self.rows:
            s = r.stats
            oc = s.get("outcomes", {})
            if r.kind == "release":
                outcome = f"{oc.get('released', 0)} released, {oc.get('not-held', 0)} not held"
            else:
                outcome = f"{oc.get('placed', 0)}/{oc.get('novalidhost', 0)}"
            if oc.get("error"):
                outcome += f", {oc['error']} ERRORS"
            lines.append((f"{r.size:,}", r.backend, r.mode, r.kind, str(s["n"]),
                          *(f"{s[k]:.2f}" if k in s else "—" for k in (
                              "p50", "p99", "max", "mean", "cpu_p50", "cpu_mean")),
                          outcome + (f" {r.note}" if r.note else ""), r.target, r.status))
        widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
        right = {4, 5, 6, 7, 8, 9, 10}
        out = ["  ".join((str(c).rjust(w) if i in right else str(c).ljust(w))
                         for i, (c, w) in enumerate(zip(h, widths, strict=True))).rstrip()
               for h in [head, tuple("-" * w for w in widths), *lines]]
        out.append("times in ms, wall clock; cpu = CPU time of the calling thread (in-process "
                   "only; excludes the database server); in-process cold = fresh process, "
                   "warm_up() as at daemon start, then every call timed (parse + select + "
                   "claims written; first call included); 'all requests' = every select, "
                   "releases apart")
        out.extend(f"note: {n}" for n in self.notes)
        out.extend(f"VIOLATION: {v}" for v in self.violations[:50])
        if len(self.violations) > 50:
            out.append(f"... {len(self.violations) - 50} more violations")
        out.extend(f"ERROR: {e}" for e in self.errors[:50])
        return "\n".join(out)

    def to_primitive(self) -> dict:
        return {"rows": [dataclasses.asdict(r) for r in self.rows], "notes": self.notes,
                "violations": self.violations, "errors": self.errors,
                "profiles": self.profiles, "runs": self.runs}


def _check(report: Report, label: str, db, groups, ops, records) -> None:
    exp = bench_check.Expectations.from_replay(groups, ops, records)
    found = bench_check.check(db, exp)
    report.violations.extend(f"{label}: {v}" for v in found)
    print(f"  validity ({label}): {len(found)} violation(s), {len(exp.placed)} trace "
          f"instances placed", flush=True)


def run(sizes: Sequence[int], backends: Sequence[str], trace_size: int, seed: int,
        workdir: str, *, profile_top: int = 0, e2e: bool = False,
        e2e_size: int | None = None, burst_threads: int = 16, per_kind: bool = True,
        mariadb_max: int = 100000, burst_max: int = 10000) -> Report:
    report = Report()
    plugins = bench_replay.realistic_plugins()
    bench_replay.configure(cfg.CONF, plugins)
    print(f"realistic: filters {', '.join(plugins.filters)}")
    e2e_skip = bench_daemon.e2e_available() if e2e else "not asked (--e2e)"
    if e2e and e2e_skip:
        report.notes.append(f"e2e skipped: {e2e_skip}")
    for size in sizes:
        fleet = bench_fleet.generate_fleet(size, seed)
        ops = bench_trace.generate_trace(fleet, trace_size, seed + 1)
        groups = bench_trace.group_policies(fleet, ops)
        trace_path = os.path.join(workdir, f"trace-{size}-{seed}.jsonl")
        bench_trace.dump(ops, trace_path)
        c = fleet.counts()
        print(f"\n== realistic {size:,} hosts: " + ", ".join(
            f"{c[f'model_{m}']:,} {m}" for m in bench_fleet.MODEL_NAMES)
            + f"; {c['instances']:,} instances ({c['pinned_instances']:,} pinned, "
              f"{c['group_members']:,} in {c['groups']} groups), {c['pci_devices']:,} PCI "
              f"devices ({c['pci_claimed']:,} claimed); trace of {len(ops)} operations "
              f"in {trace_path} ==", flush=True)
        size_backends = [b for b in backends if b != "mariadb" or size <= mariadb_max]
        if len(size_backends) < len(backends):
            report.notes.append(f"{size:,} MariaDB skipped (--mariadb-max)")
        for backend in size_backends:
            bdb = bench_fleet.create_database(backend, workdir)
            try:
                load_s = bench_fleet.load_fleet(bdb.db, fleet)
                pre = bench_check.check(bdb.db)
                report.violations.extend(f"{size:,} {backend} fleet as loaded: {v}"
                                         for v in pre)
                data = bench_replay.run_cold(bdb.url, trace_path, workdir, profile_top)
                print(f"-- {backend}: loaded in {load_s:.1f} s, warm_up {data['startup_s']:.2f}"
                      f" s, replay {data['wall_s']:.2f} s", flush=True)
                report.add_summary(size, backend, "in-process cold", data["records"],
                                   per_kind)
                s = next(r for r in report.rows if (r.size, r.backend, r.mode, r.kind) ==
                         (size, backend, "in-process cold", "all requests"))
                print(f"  all requests: p50 {s.stats['p50']:.2f} p99 {s.stats['p99']:.2f} "
                      f"max {s.stats['max']:.2f} mean {s.stats['mean']:.2f} ms", flush=True)
                report.notes.append(f"{size:,} {backend}: bulk load {load_s:.1f} s, "
                                    f"warm_up {data['startup_s']:.2f} s (not in the times), "
                                    f"load average {data['loadavg'][0]:.1f} -> "
                                    f"{data['loadavg'][1]:.1f} during the replay")
                if data["profile"]:
                    report.profiles.append({"size": size, "backend": backend,
                                            "text": data["profile"]})
                    print(f"\n== cProfile of the replay @ {size:,} hosts, {backend}, top "
                          f"{profile_top} by cumulative time ==\n{data['profile']}",
                          flush=True)
                _check(report, f"{size:,} {backend} replay", bdb.db, groups, ops,
                       data["records"])
                if burst_threads and size > burst_max:
                    report.notes.append(f"{size:,} {backend}: no burst (each of its "
                                        f"{burst_threads} schedulers holds a cache of the "
                                        f"fleet; --burst-max {burst_max:,})")
                elif burst_threads:
                    b = bench_replay.burst(bdb.url, burst_threads)
                    report.add_summary(size, backend, f"burst {burst_threads} threads",
                                       b["records"], per_kind=False)
                    report.rows[-1].kind = "1 anti-affinity + 1 affinity group"
                    _check(report, f"{size:,} {backend} burst", bdb.db,
                           {**groups, **b["groups"]}, b["ops"], b["records"])
            finally:
                bdb.drop()
        if e2e and not e2e_skip and size == (e2e_size or size) and size_backends:
            # on MariaDB when it is measured (the daemon's usual database)
            _e2e(report, size, "mariadb" if "mariadb" in size_backends else size_backends[0],
                 fleet, ops, groups, plugins, workdir)
        del fleet
    report.derived_targets()
    return report


def _e2e(report: Report, size: int, backend: str, fleet, ops, groups,
         plugins, workdir: str) -> None:
    """The trace through the daemon (1 worker) on a fresh copy of the fleet."""
    bdb = bench_fleet.create_database(backend, workdir)
    try:
        bench_fleet.load_fleet(bdb.db, fleet)
        bdb.db.dispose()
        with bench_daemon.running_daemon(bdb.url, 1, plugins, workdir,
                                         60 + size / 500) as (d, api):
            records = bench_replay.replay_rpc(api, ops)
        report.add_summary(size, backend, "e2e rpc", records, per_kind=False)
        report.rows[-1].note = f"(daemon ready in {d.ready_s:.1f} s)"
        print(f"-- e2e {backend}: p50 {report.rows[-1].stats['p50']:.2f} ms", flush=True)
        _check(report, f"{size:,} {backend} e2e", bdb.db, groups, ops, records)
    except Exception as e:
        report.errors.append(f"e2e {size:,} {backend}: {type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200]}")
    finally:
        bdb.drop()
