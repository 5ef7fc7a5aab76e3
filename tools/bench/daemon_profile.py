"""Where a placement's time goes in the real daemon: client processes, server CPU
per placement, and the worker's CPU split by phase.

    python tools/bench/daemon_profile.py --size 10000 --clients 1,4,16 \\
        --confirm auto,none --profile-clients 1,16 --py-spy PATH/py-spy

A generated fleet (``tools/bench/fleet.py``) is loaded into a throwaway MariaDB
database and ``berth-scheduler`` runs on it as a subprocess (``--workers``, the
eventlet backend). Each run starts N client *processes* (``SchedulerAPI``,
plain one-instance requests, the given confirm mode) that place for
``--seconds``; the driver reads the CPU time of the daemon, the broker
(``beam.smp``) and the database server (``mariadbd``) from /proc before and
after, and the clients report their own. With ``--py-spy`` the runs with
``--profile-clients`` clients are sampled and the samples (the eventlet hub's
poll left out) are split by phase: the innermost frame that names one decides (logging, metrics,
policy and context, payload validation, database connection checkout, cache
refresh, filter and weigh, the claim, RPC and AMQP, the eventlet hub), per RPC
method; the share of each phase times the daemon's measured CPU gives its CPU
per placement. A sample is taken whether the worker runs or waits for a CPU, so
the shares hold while the machine's load moves the absolute figures. ``--metrics`` runs the
daemon with its monitoring port and reports the select phases it measured.

``--cpus 0`` (or ``0,1``...) runs the whole experiment on those CPUs: the
daemon, the clients, and every thread of the shared broker and database
server (restored afterwards). Comparing one CPU with one worker against two
CPUs with two workers shows what a second worker adds when it has a core of
its own, which two cores shared by everything cannot show.

The machine may be shared: print ``uptime`` with the figures. The broker and
database CPU include whatever else uses them meanwhile.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid as uuidlib
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

PLAIN = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}
TICK = os.sysconf("SC_CLK_TCK")
BROKER_PORT, DATABASE_PORT = 5672, 3306


# -- the client processes ------------------------------------------------------------------

def client_main(argv: list[str]) -> int:
    """One client process: connect, print ``ready``, read the window's start
    (a time) from stdin, wait for it, place until ``seconds`` after it, print
    JSON (latencies, uuids, own CPU seconds)."""
    p = argparse.ArgumentParser()
    p.add_argument("--topic", required=True)
    p.add_argument("--transport-url", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--confirm", default="auto")
    p.add_argument("--call", choices=("select", "ping", "bare"), default="select")
    p.add_argument("--cprofile", help="write the window's cProfile stats here")
    args = p.parse_args(argv)
    from oslo_config import cfg

    from scheduler import rpc
    from scheduler.rpcapi import SchedulerAPI

    cfg.CONF([], project="berth", default_config_files=[])
    cfg.CONF.set_override("transport_url", args.transport_url)
    api = SchedulerAPI(cfg.CONF, topic=args.topic, timeout=120)
    ctxt = rpc.new_context()
    if args.call == "bare":
        import oslo_messaging
        bare = oslo_messaging.get_rpc_client(
            api.transport, oslo_messaging.Target(topic=args.topic, version="1.0"), timeout=120)
        bare.call(ctxt, "noop")                         # connections made before the window
    else:
        api.ping()                                      # connections made before the window
    # ready: the driver answers with the window's start once every client is
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    cpu0 = _own_cpu()
    threads0 = _thread_cpu()
    latencies, uuids, errors = [], [], 0
    profiler = None
    if args.cprofile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    deadline = start_at + args.seconds
    while time.time() < deadline:
        t0 = time.perf_counter()
        try:
            if args.call == "ping":
                api.ping()
            elif args.call == "bare":
                bare.call(ctxt, "noop")
            else:
                sel = api.select_destinations(ctxt, PLAIN, confirm=args.confirm)
                uuids.append(sel[0][0]["instance_uuid"])
        except Exception:       # noqa: BLE001 - counted, the run goes on
            errors += 1
            continue
        latencies.append(time.perf_counter() - t0)
    ended = time.time()
    threads = _thread_cpu()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.cprofile)
    api.close()                 # confirm="auto": sends the confirms still queued
    confirmer = api._confirmer
    lost = sum(confirmer.state(u) == "lost" for u in uuids) if confirmer else 0
    out = {"latencies": latencies, "uuids": uuids, "errors": errors,
           "cpu_s": _own_cpu() - cpu0, "ended": ended,
           "confirm_calls": confirmer.calls if confirmer else 0, "lost": lost,
           "threads": {name: cpu - threads0.get(name, 0.0) for name, cpu in threads.items()}}
    print(json.dumps(out))
    return 0


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads by name (the window's split)."""
    import threading
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = collections.defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        name = names.get(int(tid), "(not a Python thread)")
        name = re.sub(r"^Thread-\d+", "Thread", name)  # "Thread-3 (poll)" -> "Thread (poll)"
        out[name] += _proc_cpu(int(tid), "/proc/self/task/{}/stat")
    return dict(out)


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- the bare oslo.messaging server ---------------------------------------------------------

class _Noop:
    """The bare server's one method: nothing (the RPC path alone)."""

    def noop(self, ctxt):
        return None


def bare_server_main(argv: list[str]) -> int:
    """A plain oslo.messaging RPC server (eventlet executor, as the daemon runs,
    Berth's rabbit driver) answering ``noop`` on ``--topic`` until SIGTERM: the
    bare round trip, dispatched as any call is (the daemon answers ``ping`` as
    soon as it reads it, ahead of its dispatcher: cheaper than a bare call)."""
    import eventlet
    eventlet.monkey_patch()
    import signal

    import oslo_messaging
    from oslo_config import cfg

    from scheduler import rpc

    p = argparse.ArgumentParser()
    p.add_argument("--topic", required=True)
    p.add_argument("--transport-url", required=True)
    args = p.parse_args(argv)
    cfg.CONF([], project="berth", default_config_files=[])
    transport = rpc.get_transport(cfg.CONF, url=args.transport_url)
    server = oslo_messaging.get_rpc_server(
        transport, oslo_messaging.Target(topic=args.topic, server=socket.gethostname()),
        [_Noop()], executor="eventlet")
    server.start()
    stopped = eventlet.event.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.send() if not stopped.ready() else None)
    print("ready", flush=True)
    stopped.wait()
    server.stop()
    server.wait()
    transport.cleanup()
    return 0


@contextlib.contextmanager
def bare_server(transport_url: str):
    """(pid, topic) of a running bare server; stopped afterwards."""
    topic = f"berth_bare_{uuidlib.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "bare-server",
                             "--topic", topic, "--transport-url", transport_url],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the bare oslo.messaging server did not start")
        yield proc.pid, topic
    finally:
        proc.terminate()
        proc.wait(30)


# -- the driver --------------------------------------------------------------------------

def _proc_cpu(pid: int, path: str = "/proc/{}/stat") -> float:
    """utime + stime of ``pid`` (all its threads), seconds; 0 when gone."""
    try:
        with open(path.format(pid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except OSError:
        return 0.0


def _listening(port: int) -> list[int]:
    """The process listening on TCP ``port`` (the shared broker, the shared
    database: not the private servers other tests start on other ports)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in inodes:
                    return [int(entry)]
            except OSError:
                pass
    return []


def _cpu(pids: list[int]) -> float:
    return sum(_proc_cpu(p) for p in pids)


def _waited(pids: list[int]) -> float:
    """Seconds the threads of ``pids`` spent runnable but waiting for a CPU
    (``/proc/PID/task/TID/schedstat``): how much a busy machine held them back."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return total / 1e9


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(cpus: set[int] | None):
    """Run the experiment on ``cpus`` only: this process (and so the daemon and
    the clients it starts), and every thread of the shared broker and database
    server; afterwards each of their threads, those started meanwhile too,
    gets its process's own affinity back. None: as they are."""
    if not cpus:
        yield
        return
    processes: dict[int, set[int]] = {}         # pid -> its affinity before
    threads: dict[int, set[int]] = {}           # tid -> its own (a bound scheduler's)
    for pid in [os.getpid()] + _listening(BROKER_PORT) + _listening(DATABASE_PORT):
        try:
            processes[pid] = os.sched_getaffinity(pid)
        except OSError:
            continue
        for tid in _threads(pid):
            try:
                threads[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass        # a thread that ended meanwhile
        if os.sched_getaffinity(pid) != cpus:
            print(f"warning: process {pid} could not be pinned (not root?)", flush=True)
    try:
        yield
    finally:
        for pid, mask in processes.items():
            for tid in _threads(pid):
                try:
                    os.sched_setaffinity(tid, threads.get(tid, mask))
                except OSError:
                    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, str], float]:
    """(metric name, labels) -> value of the daemon's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    out = {}
    for line in text.decode().splitlines():
        m = re.match(r"^(\w+)(\{[^}]*\})? ([-+0-9.eE]+|NaN)$", line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def run_clients(topic: str, transport_url: str, clients: int, seconds: float,
                confirm: str, daemon_pids: list[int], py_spy: str | None,
                profile_path: str | None, call: str = "select",
                cprofile_dir: str | None = None) -> dict[str, Any]:
    """One measured run; the placements are released afterwards (outside it).
    ``call`` ping: bare calls (the RPC path without Berth's work).
    ``cprofile_dir``: each client writes its window's cProfile stats there."""
    procs = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "client", "--topic", topic,
         "--transport-url", transport_url,
         "--seconds", repr(seconds), "--confirm", confirm, "--call", call]
        + (["--cprofile", os.path.join(cprofile_dir, f"client-{call}-{confirm}-{i}.prof")]
           if cprofile_dir else []),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for i in range(clients)]
    for proc in procs:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a client process ended before it was ready "
                               f"(exit code {proc.wait()})")
    # every client is connected: the window starts for all at once
    start_at = time.time() + 0.5
    for proc in procs:
        proc.stdin.write(f"{start_at!r}\n")
        proc.stdin.flush()
    broker, database = _listening(BROKER_PORT), _listening(DATABASE_PORT)
    time.sleep(max(0.0, start_at - time.time()))
    spy = None
    if py_spy and profile_path:
        worker = daemon_pids[1] if len(daemon_pids) > 1 else daemon_pids[0]  # not the supervisor
        spy = subprocess.Popen([py_spy, "record", "--pid", str(worker), "--rate",
                                "250", "--nonblocking", "--format", "raw", "--duration",
                                str(int(seconds)), "-o", profile_path],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before = (_cpu(daemon_pids), _cpu(broker), _cpu(database), time.time(),
              _waited(daemon_pids))
    results = [json.loads(p.communicate()[0]) for p in procs]
    after = (_cpu(daemon_pids), _cpu(broker), _cpu(database), time.time(),
             _waited(daemon_pids))
    if spy is not None:
        spy.wait()
    ended = max(r["ended"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    uuids = [u for r in results for u in r["uuids"]]
    placed = len(latencies)
    wall = ended - start_at
    return {"clients": clients,
            "confirm": confirm if call == "select" else f"({call})",
            "placed": placed,
            "errors": sum(r["errors"] for r in results), "wall_s": wall,
            "per_s": placed / wall if wall else 0.0,
            "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
            "p99_ms": _pct(latencies, 99) * 1000 if latencies else None,
            "server_cpu_ms": (after[0] - before[0]) * 1000 / max(placed, 1),
            "broker_cpu_ms": (after[1] - before[1]) * 1000 / max(placed, 1),
            "db_cpu_ms": (after[2] - before[2]) * 1000 / max(placed, 1),
            "client_cpu_ms": sum(r["cpu_s"] for r in results) * 1000 / max(placed, 1),
            "server_busy": (after[0] - before[0]) / (after[3] - before[3]),
            "server_waited": (after[4] - before[4]) / (after[3] - before[3]),
            "confirm_calls": sum(r.get("confirm_calls", 0) for r in results),
            "lost": sum(r.get("lost", 0) for r in results),
            "threads": _summed_threads(r.get("threads", {}) for r in results),
            "uuids": uuids}


def _summed_threads(splits) -> dict[str, float]:
    total: dict[str, float] = collections.Counter()
    for split in splits:
        total.update(split)
    return dict(total)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


# -- the profile's phases ----------------------------------------------------------------------

#: (phase, path fragments, functions or None for any): the innermost frame of a
#: sample that matches decides its phase. Socket I/O through eventlet counts for
#: whoever called it (the database driver under a claim, amqp under RPC); only
#: what no phase claims is the eventlet hub's own work.
PHASES: tuple[tuple[str, tuple[str, ...], frozenset[str] | None], ...] = (
    ("logging", ("/logging/", "oslo_log/"), None),
    ("metrics", ("prometheus_client/", "scheduler/metrics.py"), None),
    ("policy+context", ("oslo_policy/", "oslo_context/", "scheduler/policy.py"), None),
    ("policy+context", ("scheduler/rpc.py",),
     frozenset({"serialize_context", "deserialize_context", "new_context"})),
    ("validation", ("scheduler/request_spec.py", "scheduler/validation.py",
                    "numa/request.py", "pci/request.py"), None),
    ("validation", ("scheduler/rpc.py",), frozenset({"check_json", "walk"})),
    ("db: pool", ("sqlalchemy/pool/",), None),
    ("db: pool", ("oslo_db/",), frozenset({"_connect_ping_listener"})),
    ("refresh", ("scheduler/host_manager.py", "db/host_states.py"), None),
    ("db: claims", ("db/claims.py", "db/pci.py"), None),
    ("db: claims", ("db/api.py",), frozenset({"Database.hot_writer", "Database._take_kept",
                                              "Database._give_back"})),
    ("filter+weigh", ("scheduler/cycle.py", "scheduler/filters/", "scheduler/weights/",
                      "scheduler/host_columns.py", "scheduler/host_classes.py"), None),
    ("scheduler other", ("scheduler/filter_scheduler.py", "scheduler/host_state.py",
                         "scheduler/selection.py", "scheduler/deadline.py"), None),
    ("endpoint", ("scheduler/endpoints/", "scheduler/manager.py"), None),
    ("rpc+amqp", ("oslo_messaging/", "kombu/", "amqp/", "oslo_serialization/",
                  "/json/", "vine/"), None),
)
#: The RPC method a sample serves: an endpoint frame of that name.
METHODS = ("select_destinations", "confirm", "release")
#: Innermost frames of a worker waiting for work: py-spy counts the eventlet hub's
#: poll as running (it cannot tell), so these samples are left out.
IDLE = frozenset({"Hub.do_poll", "Hub.wait"})


def _frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) per frame of one py-spy raw stack, root first."""
    out = []
    for frame in stack.split(";"):
        m = re.match(r"^(.*) \((.*?)(?::\d+)?\)$", frame.strip())
        out.append((m.group(1), m.group(2)) if m else (frame.strip(), ""))
    return out


def classify(stack: str) -> tuple[str, str, str]:
    """(method, phase, innermost frame that decided the phase) of one sample;
    phase ``idle`` for the hub waiting."""
    frames = _frames(stack)
    if frames and frames[-1][0] in IDLE:
        return "idle", "idle", frames[-1][0]
    method = "(no method)"
    for func, path in frames:
        name = func.rsplit(".", 1)[-1]
        if name in METHODS and ("endpoints/" in path or "manager.py" in path):
            method = name
            break
    for func, path in reversed(frames):
        for phase, fragments, funcs in PHASES:
            if any(f in path for f in fragments) and (funcs is None or func in funcs):
                return method, phase, func
    leaf = frames[-1][0] if frames else ""
    if any("eventlet/" in path or "greenlet" in path for _, path in frames):
        return method, "eventlet hub", leaf
    return method, "other", leaf


def read_profile(path: str) -> tuple[collections.Counter, collections.Counter, int]:
    """From py-spy's raw (collapsed) output: (method, phase) -> samples,
    (phase, deciding frame) -> samples, and the idle samples."""
    counts: collections.Counter = collections.Counter()
    frames: collections.Counter = collections.Counter()
    idle = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not (stack and n.isdigit()):
                continue
            method, phase, frame = classify(stack)
            if phase == "idle":
                idle += int(n)
                continue
            counts[method, phase] += int(n)
            frames[phase, frame] += int(n)
    return counts, frames, idle


def profile_table(counts: collections.Counter, server_cpu_ms: float) -> str:
    """Share of the busy samples per phase and method, and the phase's CPU per
    placement (the share of the daemon's measured CPU)."""
    total = sum(counts.values()) or 1
    methods = sorted({m for m, _ in counts}, key=lambda m: -sum(
        v for (mm, _), v in counts.items() if mm == m))
    phases = sorted({p for _, p in counts}, key=lambda p: -sum(
        v for (_, pp), v in counts.items() if pp == p))
    lines = [f"{'phase':<18}" + "".join(f"{m:>22}" for m in methods) + f"{'all':>10}"
             + f"{'ms/placement':>14}"]
    for phase in phases:
        row = [counts.get((m, phase), 0) / total * 100 for m in methods]
        share = sum(row)
        lines.append(f"{phase:<18}" + "".join(f"{v:>21.1f}%" for v in row)
                     + f"{share:>9.1f}%" + f"{share / 100 * server_cpu_ms:>14.2f}")
    lines.append(f"{'(samples)':<18}" + "".join(
        f"{sum(v for (mm, _), v in counts.items() if mm == m):>22}" for m in methods)
        + f"{total:>10}")
    return "\n".join(lines)


# -- the endpoint in-process ------------------------------------------------------------------

def inprocess_split(requests: int, confirm: bool, log_file: str) -> dict[str, float]:
    """CPU (``time.process_time``) per placement of the daemon's endpoint work
    without RPC: the real SchedulerManager over a FilterScheduler on the
    configured database, called as the dispatcher calls it, one request at a
    time (no other green thread, so each phase's CPU is its own). Phases are
    timed inclusively around the functions that do them."""
    import logging

    from oslo_config import cfg
    from oslo_log import log

    from db import claims
    from db.api import Database
    from scheduler import metrics, rpc
    from scheduler.endpoints import placement
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager
    from scheduler.manager import SchedulerManager

    # logged as the daemon logs: INFO lines to a file, oslo.log's format
    cfg.CONF.set_override("log_file", log_file)
    cfg.CONF.set_override("use_stderr", False)
    log.setup(cfg.CONF, "berth")
    db = Database.from_conf(cfg.CONF)
    sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
    sched.warm_up()
    manager = SchedulerManager(db, sched, cfg.CONF)
    spent: collections.Counter = collections.Counter()
    patched: list[tuple[Any, str, Any]] = []

    def timed(owner: Any, attr: str, phase: str) -> None:
        original = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            t0 = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[phase] += time.process_time() - t0
        patched.append((owner, attr, owner.__dict__.get(attr) if isinstance(owner, type)
                        else original))
        setattr(owner, attr, wrapper)

    timed(placement, "check_json", "validation")
    timed(sched, "parse_request", "validation")
    timed(manager.policy._get(), "enforce", "policy")
    timed(claims, "allocations_for", "confirm: policy lookup (allocations_for)")
    timed(claims, "confirm", "confirm: the UPDATE (claims.confirm)")
    timed(claims, "claim", "select: claim transaction")
    timed(sched.host_manager, "refresh", "select: refresh")
    timed(metrics, "count_request", "metrics")
    timed(metrics.SelectTimings, "record", "metrics")
    timed(logging.Logger, "_log", "logging")
    serializer = rpc.ContextSerializer()
    wire_context = rpc.new_context().to_dict()
    placed = []
    walls: list[float] = []
    try:
        for _ in range(requests):
            w0 = time.perf_counter()
            t0 = time.process_time()
            ctxt = serializer.deserialize_context(wire_context)
            spent["context"] += time.process_time() - t0
            t0 = time.process_time()
            sel = manager.select_destinations(ctxt, PLAIN, [str(uuidlib.uuid4())],
                                              pending=confirm)
            spent["select: endpoint total"] += time.process_time() - t0
            walls.append(time.perf_counter() - w0)
            placed.append(sel[0][0]["instance_uuid"])
            if confirm:
                t0 = time.process_time()
                manager.confirm(ctxt, placed[-1:])
                spent["confirm: endpoint total"] += time.process_time() - t0
    finally:
        for owner, attr, original in reversed(patched):
            if original is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        for uuid in placed:
            manager.release(ctxt, uuid)
        db.dispose()
    split = {k: v * 1000 / requests for k, v in spent.items()}
    # the wall time of the select alone (the caller's wait in-process; the
    # confirm is a call of its own), every call counted, the first included
    split[WALL_P50] = _pct([w * 1000 for w in walls], 50)
    return split


#: In the in-process split: the select's wall-clock p50 (not a CPU share).
WALL_P50 = "select: wall-clock p50 (not CPU)"


def _print_split(split: dict[str, float], confirm: bool) -> None:
    print(f"\nin-process endpoint CPU per placement (confirm {'auto' if confirm else 'none'}), "
          f"ms:", flush=True)
    for phase, ms in sorted(split.items(), key=lambda kv: -kv[1]):
        if phase != WALL_P50:
            print(f"   {ms:7.3f}  {phase}")
    print(f"   select wall-clock p50 (every call, one at a time): {split[WALL_P50]:.3f} ms")


# -- main --------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    if argv[:1] == ["client"]:
        return client_main(argv[1:])
    if argv[:1] == ["bare-server"]:
        return bare_server_main(argv[1:])
    p = argparse.ArgumentParser(prog="daemon_profile", description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=10000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--clients", default="1,4,16")
    p.add_argument("--confirm", default="auto,none",
                   help="confirm modes, comma-separated: auto (in the background), "
                        "sync (before the call returns), none")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--py-spy", help="path of py-spy: profile the --profile-clients runs")
    p.add_argument("--profile-clients", default="1,16")
    p.add_argument("--top", type=int, default=25, help="frames listed per profile")
    p.add_argument("--inprocess", type=int, default=0, metavar="N",
                   help="also time N placements through the endpoint in-process")
    p.add_argument("--ping", action="store_true",
                   help="also measure ping calls (answered by the daemon as soon as read) "
                        "and bare oslo.messaging calls (a no-op method of a plain "
                        "oslo.messaging server, dispatched as any call)")
    p.add_argument("--metrics", action="store_true",
                   help="serve the daemon's metrics and report its select phases")
    p.add_argument("--client-cprofile", action="store_true",
                   help="profile the client processes (cProfile: slower clients; read "
                        "the shares, not the rates) and list their costliest functions")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.OPTION=VALUE",
                   help="a daemon config option (repeatable), e.g. "
                        "filter_scheduler.near_best_spread=0.1")
    p.add_argument("--cpus", help="CPUs to run the experiment on, e.g. 0 or 0,1: the "
                                  "daemon, the clients, the bare server and the shared "
                                  "broker and database (their affinity is restored after)")
    p.add_argument("--workdir")
    args = p.parse_args(argv)
    cpus = {int(c) for c in args.cpus.split(",")} if args.cpus else None
    with pinned(cpus):
        return _measure(args)


def _measure(args: argparse.Namespace) -> int:

    from oslo_config import cfg
    from oslo_log import log

    from tools.bench import fleet as bench_fleet
    from tools.bench.daemon import TRANSPORT_URL, running_daemon
    from tools.bench.run import configure

    workdir = args.workdir or tempfile.mkdtemp(prefix="berth-profile-")
    os.makedirs(workdir, exist_ok=True)
    if args.cpus:
        print(f"pinned to CPU(s) {args.cpus}: this driver, the daemon, the clients, "
              f"the broker and the database server", flush=True)
    log.register_options(cfg.CONF)      # before configure() parses: --inprocess logs
    plugins = configure()
    t0 = time.perf_counter()
    fleet = bench_fleet.generate_fleet(args.size, args.seed)
    bdb = bench_fleet.create_database("mariadb", workdir)
    try:
        bench_fleet.load_fleet(bdb.db, fleet)
        del fleet
        bdb.db.dispose()
        print(f"fleet of {args.size:,} hosts loaded in {time.perf_counter() - t0:.0f} s; "
              f"workdir {workdir}", flush=True)
        cfg.CONF.set_override("connection", bdb.url, group="database")
        inprocess_p50: dict[str, float] = {}
        for confirm in (True, False) if args.inprocess else ():
            split = inprocess_split(args.inprocess, confirm,
                                    os.path.join(workdir, "inprocess.log"))
            _print_split(split, confirm)
            inprocess_p50["auto" if confirm else "none"] = split[WALL_P50]
        ping_p50: dict[int, float] = {}
        port = _free_port() if args.metrics else None
        extra = f"\n[metrics]\nenabled = true\nport = {port}\n" if port else ""
        for setting in args.set:
            name, _, value = setting.partition("=")
            section, _, option = name.rpartition(".")
            extra += f"\n[{section or 'DEFAULT'}]\n{option} = {value}\n"
        with running_daemon(bdb.url, args.workers, plugins, workdir, 60 + args.size / 500,
                            config_extra=extra) as (daemon, api):
            pids = daemon.pids()
            for _ in range(8):
                api.release(None, api.select_destinations(None, PLAIN)[0][0]["instance_uuid"])
            for clients in (int(c) for c in args.clients.split(",")) if args.ping else ():
                load = os.getloadavg()[0]
                cdir = _cprofile_dir(workdir, args.client_cprofile, f"ping-c{clients}")
                run = run_clients(daemon.topic, TRANSPORT_URL, clients, args.seconds,
                                  "none", pids, None, None, call="ping", cprofile_dir=cdir)
                ping_p50[clients] = run["p50_ms"]
                _print_run(run, load)
                _print_client_profile(cdir, run["placed"], args.top)
                with bare_server(TRANSPORT_URL) as (bare_pid, bare_topic):
                    load = os.getloadavg()[0]
                    run = run_clients(bare_topic, TRANSPORT_URL, clients, args.seconds,
                                      "none", [bare_pid], None, None, call="bare")
                    _print_run(run, load)
            for confirm in args.confirm.split(","):
                for clients in (int(c) for c in args.clients.split(",")):
                    profiled = args.py_spy and str(clients) in args.profile_clients.split(",")
                    path = os.path.join(workdir, f"profile-c{clients}-{confirm}.txt") \
                        if profiled else None
                    before = _scrape(port) if port else None
                    load = os.getloadavg()[0]
                    cdir = _cprofile_dir(workdir, args.client_cprofile,
                                         f"select-c{clients}-{confirm}")
                    run = run_clients(daemon.topic, TRANSPORT_URL, clients, args.seconds,
                                      confirm, pids, args.py_spy if profiled else None, path,
                                      cprofile_dir=cdir)
                    after = _scrape(port) if port else None
                    with concurrent.futures.ThreadPoolExecutor(8) as pool:
                        list(pool.map(lambda u: api.release(None, u), run.pop("uuids")))
                    _print_run(run, load)
                    bound_of = inprocess_p50.get(confirm)
                    if clients == 1 and bound_of is not None and 1 in ping_p50:
                        # issue 26's rule: one client's p50 within the in-process
                        # select's p50 plus two bare round trips, same run
                        bound = bound_of + 2 * ping_p50[1]
                        print(f"   one client vs in-process p50 {bound_of:.2f} + 2 x ping "
                              f"p50 {ping_p50[1]:.2f} = {bound:.2f} ms: p50 "
                              f"{run['p50_ms']:.2f} ms "
                              f"({'within' if run['p50_ms'] <= bound else 'OVER'})",
                              flush=True)
                    if before is not None:
                        _print_phases(before, after)
                    _print_client_profile(cdir, run["placed"], args.top)
                    if path and os.path.exists(path):
                        counts, frames, idle = read_profile(path)
                        busy = sum(counts.values())
                        print(f"   py-spy: {busy} busy samples, {idle} idle (hub poll) "
                              f"left out", flush=True)
                        print(profile_table(counts, run["server_cpu_ms"]), flush=True)
                        print("   top frames deciding a phase (share of busy samples):")
                        for (phase, frame), n in frames.most_common(args.top):
                            print(f"   {n / max(busy, 1) * 100:5.1f}%  {phase:<16} {frame}")
    finally:
        bdb.drop()
        cfg.CONF.reset()
    return 0


def _print_run(run: dict[str, Any], load: float) -> None:
    print(f"\n{run['clients']:>2} client process(es), confirm={run['confirm']}, "
          f"{run['placed']} calls in {run['wall_s']:.1f} s ({run['errors']} errors), "
          f"load {load:.1f}: {run['per_s']:.1f}/s, p50 {run['p50_ms']:.1f} ms, "
          f"p99 {run['p99_ms']:.1f} ms", flush=True)
    server = "bare server" if run["confirm"] == "(bare)" else "daemon"
    print(f"   CPU per placement: {server} {run['server_cpu_ms']:.2f} ms (on a CPU "
          f"{run['server_busy'] * 100:.0f}% of the time, waiting for one "
          f"{run['server_waited'] * 100:.0f}%), broker {run['broker_cpu_ms']:.2f} ms, "
          f"MariaDB {run['db_cpu_ms']:.2f} ms, clients {run['client_cpu_ms']:.2f} ms",
          flush=True)
    per = max(run["placed"], 1)
    if run.get("threads"):
        print("   clients' CPU by thread, ms per call: " + ", ".join(
            f"{name} {cpu * 1000 / per:.2f}" for name, cpu in
            sorted(run["threads"].items(), key=lambda kv: -kv[1])), flush=True)
    if run["confirm_calls"]:
        print(f"   background confirms: {run['confirm_calls']} calls for {run['placed']} "
              f"placements ({run['confirm_calls'] / max(run['placed'], 1):.2f} per "
              f"placement), {run['lost']} lost", flush=True)


def _cprofile_dir(workdir: str, wanted: bool, name: str) -> str | None:
    if not wanted:
        return None
    path = os.path.join(workdir, f"cprofile-{name}")
    os.makedirs(path, exist_ok=True)
    return path


def _print_client_profile(cdir: str | None, calls: int, top: int) -> None:
    """The clients' cProfile stats merged: own time per call of the costliest
    functions (cProfile's overhead included: read them as shares)."""
    if not cdir:
        return
    import pstats
    files = [os.path.join(cdir, f) for f in sorted(os.listdir(cdir))]
    if not files:
        return
    stats = pstats.Stats(*files)
    total = stats.total_tt
    print(f"   clients' cProfile: {total * 1000 / max(calls, 1):.2f} ms per call in all "
          f"(profiled); own time of the costliest functions, us per call:", flush=True)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (path, line, func), (_cc, ncalls, tt, ct, _callers) in rows:
        where = "/".join(path.split("/")[-2:])
        print(f"   {tt * 1e6 / max(calls, 1):8.1f}  {ncalls / max(calls, 1):6.1f}x  "
              f"cum {ct * 1e6 / max(calls, 1):8.1f}  {func} ({where}:{line})", flush=True)


def _print_phases(before: dict, after: dict) -> None:
    def delta(name: str, label: str) -> float:
        return after.get((name, label), 0.0) - before.get((name, label), 0.0)
    selects = delta("berth_request_duration_seconds_count", '{method="select_destinations"}')
    if not selects:
        return
    parts = []
    for phase in ("refresh", "filter", "weigh", "claim"):
        s = delta("berth_select_phase_duration_seconds_sum", f'{{phase="{phase}"}}')
        parts.append(f"{phase} {s * 1000 / selects:.2f}")
    for method in ("select_destinations", "confirm"):
        n = delta("berth_request_duration_seconds_count", f'{{method="{method}"}}')
        s = delta("berth_request_duration_seconds_sum", f'{{method="{method}"}}')
        if n:
            parts.append(f"{method} whole {s * 1000 / n:.2f}")
    print("   daemon's own timings, ms per call (wall): " + ", ".join(parts), flush=True)
    conflicts = sum(after[k] - before.get(k, 0.0) for k in after
                    if k[0] == "berth_claim_conflicts_total")
    retries = sum(after[k] - before.get(k, 0.0) for k in after
                  if k[0] == "berth_claim_retries_total")
    reloaded = delta("berth_cache_nodes_reloaded_total", "")
    applied = delta("berth_cache_node_changes_applied_total", "")
    refreshes = sum(after[k] - before.get(k, 0.0) for k in after
                    if k[0] == "berth_cache_refreshes_total")
    changed = delta("berth_cache_refresh_changed_rows_sum", "")
    print(f"   claim conflicts per placement {conflicts / selects:.3f}, retries "
          f"{retries / selects:.3f}; per placement: {refreshes / selects:.2f} refreshes, "
          f"{changed / selects:.2f} changed rows probed, {reloaded / selects:.2f} nodes "
          f"re-read, {applied / selects:.2f} journalled changes applied", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
