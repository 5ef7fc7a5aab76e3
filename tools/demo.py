"""Berth in one command (``tox -e demo``): the real daemon on embedded defaults.

Creates a throwaway state directory with a SQLite database, migrates it and
imports ``etc/berth/fleet.sample.yaml`` with ``berth-manage``, starts
``berth-scheduler`` on the local RabbitMQ (or, when no broker answers, serves
in this process over an in-process transport and says so), sends a burst of
varied requests through the client library, prints placements and the
NoValidHost explanation, releases everything and shuts the daemon down with
SIGTERM, checking that it exits 0.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEET = os.path.join(ROOT, "etc", "berth", "fleet.sample.yaml")
BIN = os.path.dirname(sys.executable)

warnings.filterwarnings("ignore")


def say(text: str = "") -> None:
    print(text, flush=True)


def title(text: str) -> None:
    say()
    say(f"== {text}")


def broker_answers(host: str = "127.0.0.1", port: int = 5672) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def tool(name: str) -> str:
    path = os.path.join(BIN, name)
    return path if os.path.exists(path) else name


def write_config(state: str, backend: str, transport_url: str) -> str:
    run = uuid.uuid4().hex[:8]
    path = os.path.join(state, "berth.conf")
    with open(path, "w") as f:
        f.write(f"""[DEFAULT]
host = demo
state_path = {state}
transport_url = {transport_url}
control_exchange = berth_demo_{run}
concurrency_backend = {backend}
[scheduler]
topic = scheduler_demo_{run}
graceful_shutdown_timeout = 10
[oslo_messaging_rabbit]
amqp_auto_delete = true
""")
    return path


def manage(config: str, *args: str) -> None:
    cmd = [tool("berth-manage"), "--config-file", config, *args]
    say("$ berth-manage " + " ".join(args))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.strip().splitlines()[-3:]:
        say("  " + line)


def requests_to_send() -> list[tuple[str, dict]]:
    group = str(uuid.uuid4())
    return [
        ("plain: 1 x m1.small", {"flavor": {"name": "m1.small", "vcpus": 1,
                                            "memory_mb": 2048, "root_gb": 20}}),
        ("multi-instance: 3 x m1.large", {"num_instances": 3,
                                          "flavor": {"name": "m1.large", "vcpus": 4,
                                                     "memory_mb": 8192, "root_gb": 40}}),
        ("anti-affinity group: 3 x m1.medium, one per host",
         {"num_instances": 3, "instance_group": {"uuid": group, "policy": "anti-affinity"},
          "flavor": {"name": "m1.medium", "vcpus": 2, "memory_mb": 4096, "root_gb": 20}}),
        ("availability zone az2", {"availability_zone": "az2",
                                   "flavor": {"vcpus": 2, "memory_mb": 4096,
                                              "root_gb": 20}}),
        ("pinned CPUs (hw:cpu_policy=dedicated)",
         {"flavor": {"name": "nfv.small", "vcpus": 4, "memory_mb": 4096, "root_gb": 10,
                     "extra_specs": {"hw:cpu_policy": "dedicated"}}}),
        ("cannot fit: 2 TiB of RAM", {"flavor": {"name": "huge", "vcpus": 8,
                                                 "memory_mb": 2 * 1024 * 1024,
                                                 "root_gb": 10}}),
    ]


def run_burst(api, client_mod, exception, errors: list[str]) -> list[str]:
    held: list[str] = []
    for label, spec in requests_to_send():
        title(label)
        started = time.monotonic()
        try:
            result = api.select_destinations(None, spec, return_alternates=True)
        except exception.NoValidHost as e:
            say(client_mod.format_no_valid_host(e))
            continue
        except exception.InvalidRequest as e:
            say(f"refused: {e.message}")
            continue
        say(client_mod.format_selections(result))
        say(f"({(time.monotonic() - started) * 1000:.1f} ms)")
        held.extend(alts[0]["instance_uuid"] for alts in result)

    title("a burst: 8 clients x 10 requests at once")
    lock = threading.Lock()
    latencies: list[float] = []
    refused = [0]

    def one_client() -> None:
        for _ in range(10):
            t = time.monotonic()
            try:
                sel = api.select_destinations(None, {"flavor": {"vcpus": 1,
                                                                "memory_mb": 1024,
                                                                "root_gb": 10}})
            except exception.NoValidHost:
                with lock:
                    refused[0] += 1
                continue
            except Exception as e:  # reported as a failure of the demo
                with lock:
                    errors.append(str(e).splitlines()[0][:160])
                continue
            with lock:
                latencies.append((time.monotonic() - t) * 1000)
                held.append(sel[0][0]["instance_uuid"])

    started = time.monotonic()
    threads = [threading.Thread(target=one_client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()
    for text in sorted(set(errors)):
        say(f"ERROR x{errors.count(text)}: {text}")
    if latencies:
        say(f"{len(latencies)} placed, {refused[0]} refused in "
            f"{time.monotonic() - started:.2f} s; round trip p50 "
            f"{latencies[len(latencies) // 2]:.1f} ms, max {latencies[-1]:.1f} ms")
    return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["eventlet", "threading"], default="eventlet")
    parser.add_argument("--in-process", action="store_true",
                        help="do not use RabbitMQ even if it answers")
    parser.add_argument("--state-dir", help="keep state here (default: a temp dir, removed)")
    args = parser.parse_args()

    state = args.state_dir or tempfile.mkdtemp(prefix="berth-demo-")
    os.makedirs(state, exist_ok=True)
    use_broker = not args.in_process and broker_answers()
    from scheduler import rpc

    url = rpc.DEFAULT_TRANSPORT_URL if use_broker else rpc.IN_PROCESS_TRANSPORT_URL
    config = write_config(state, args.backend if use_broker else "threading", url)
    title(f"state in {state} (SQLite)")
    manage(config, "db", "sync")
    manage(config, "host", "import", FLEET)

    from oslo_config import cfg

    from scheduler import exception
    from scheduler.cmd import client as client_mod
    from scheduler.rpcapi import SchedulerAPI

    cfg.CONF(["--config-file", config], project="berth", prog="berth-demo")
    daemon = None
    service = None
    transport = rpc.get_transport(cfg.CONF)
    if use_broker:
        title(f"starting berth-scheduler ({args.backend} backend) on RabbitMQ {url}")
        log = open(os.path.join(state, "berth-scheduler.log"), "wb")
        daemon = subprocess.Popen([tool("berth-scheduler"), "--config-file", config],
                                  stdout=log, stderr=subprocess.STDOUT)
    else:
        title("RabbitMQ is not answering on 127.0.0.1:5672: serving IN THIS PROCESS over "
              f"the in-process transport {url} (threading backend)")
        from scheduler.service import SchedulerService

        service = SchedulerService(cfg.CONF, backend="threading", transport=transport)
        service.start()
    api = SchedulerAPI(cfg.CONF, transport=transport, timeout=30)
    rc = 0
    try:
        deadline = time.monotonic() + 30
        # Short timeouts while it starts: a call sent before the daemon has
        # declared its queue is dropped by the broker and never answered.
        probe = SchedulerAPI(cfg.CONF, transport=transport, timeout=1)
        while True:
            try:
                info = probe.ping(None)
                break
            except Exception:
                if daemon is not None and daemon.poll() is not None:
                    say("berth-scheduler exited early; its log:")
                    say(open(os.path.join(state, "berth-scheduler.log")).read()[-3000:])
                    return 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        say(f"ping: {info['host']} pid {info['pid']}, {info['backend']} backend, "
            f"API {info['version']}")
        if use_broker:
            out = subprocess.run([tool("berth"), "--config-file", config, "ping"],
                                 capture_output=True, text=True)
            say("$ berth ping\n  " + (out.stdout or out.stderr).strip())

        errors: list[str] = []
        held = run_burst(api, client_mod, exception, errors)
        rc = 1 if errors else 0

        title("hosts after the burst")
        say(client_mod.format_hosts(api.list_hosts(None)))

        title(f"releasing {len(held)} instances")
        released = sum(1 for u in held if api.release(None, u))
        again = api.release(None, held[0]) if held else False
        used = sum(h["vcpus_used"] for h in api.list_hosts(None))
        say(f"released {released}; releasing again answers the same ({again}); "
            f"vCPUs in use now: {used}")
    finally:
        if daemon is not None:
            title("SIGTERM to berth-scheduler")
            daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                code = -9
            say(f"berth-scheduler exited with status {code}")
            rc = rc or (0 if code == 0 else 1)
        if service is not None:
            drained = service.stop(10)
            title(f"in-process server stopped ({'drained' if drained else 'NOT drained'})")
        transport.cleanup()
        if not args.state_dir:
            shutil.rmtree(state, ignore_errors=True)
    return rc


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
