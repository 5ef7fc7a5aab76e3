"""CPU the client library spends per call, without a broker or a daemon.

    python tools/bench/client_overhead.py --calls 2000 --repeat 5 --latency 0.002

``SchedulerAPI`` sends over oslo.messaging's fake driver, whose ``send`` is
replaced by an answer shaped like the daemon's (a one-instance selection, the
confirm answer a select carries, a confirm's answer), given after
``--latency`` seconds of sleep: a round trip's wait, which keeps the
background confirmer's batches the size they have at a real call rate. The
calling thread's CPU per call (``time.thread_time``) and the process's
(``time.process_time``: with the background confirmer's thread) are printed
for ``select_destinations`` in each confirm mode, for ``ping``, and for a bare
``RPCClient.call`` on the same transport: the difference is what Berth's
client layer costs on top of oslo.messaging. The transport's own work on a
real broker (JSON, AMQP, the reply thread) is not in these figures; compare
runs of one tree with another's (``PYTHONPATH=TREE``), median of ``--repeat``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid as uuidlib
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

PLAIN = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}
NODE = str(uuidlib.uuid4())


def _selection(instance_uuid: str) -> dict:
    """One selection as the daemon sends it for ``PLAIN``."""
    return {"instance_uuid": instance_uuid, "host": "compute-00042", "node": "compute-00042",
            "node_uuid": NODE, "weight": 1.5,
            "allocation": {"vcpus": 1, "memory_mb": 512, "disk_mb": 1024},
            "resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1},
            "allocations": {NODE: {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}},
            "numa_cells": None, "pci_devices": [], "alternate": False}


def _answer(message: dict) -> Any:
    """What the daemon answers to ``message`` (the methods the bench calls)."""
    method, args = message["method"], message["args"]
    if method == "select_destinations":
        uuids = args["instance_uuids"] or [str(uuidlib.uuid4())]
        placements = [[_selection(u)] for u in uuids]
        if "confirm_instances" in args:
            return {"placements": placements,
                    "confirmed": {"confirmed": list(args["confirm_instances"]),
                                  "unknown": []}}
        return placements
    if method == "confirm":
        return {"confirmed": list(args["instance_uuids"]), "unknown": []}
    if method == "ping":
        return {"version": "1.4"}
    return None


def answering_transport(conf, latency: float):
    """A fake-driver transport that answers every call after ``latency`` s."""
    import oslo_messaging

    transport = oslo_messaging.get_rpc_transport(conf, url="fake:/")

    def send(target, ctxt, message, wait_for_reply=None, timeout=None,
             call_monitor_timeout=None, retry=None, transport_options=None):
        if latency:
            time.sleep(latency)
        return _answer(message)

    transport._driver.send = send
    return transport


def measure(call, calls: int) -> tuple[float, float]:
    """(calling thread, process) CPU microseconds per call of ``call()``."""
    t0, p0 = time.thread_time(), time.process_time()
    for _ in range(calls):
        call()
    return ((time.thread_time() - t0) / calls * 1e6,
            (time.process_time() - p0) / calls * 1e6)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--latency", type=float, default=0.002,
                   help="seconds each call waits for its answer")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cases", default="bare,ping,select-none,select-auto,select-sync")
    args = p.parse_args(argv)

    import oslo_messaging
    from oslo_config import cfg

    from scheduler import rpc
    from scheduler.rpcapi import SchedulerAPI

    conf = cfg.CONF
    conf([], project="berth", default_config_files=[])
    transport = answering_transport(conf, args.latency)
    api = SchedulerAPI(conf, transport=transport, topic="bench", timeout=120)
    ctxt = rpc.new_context()
    bare = oslo_messaging.get_rpc_client(
        transport, oslo_messaging.Target(topic="bench", version="1.0"), timeout=120)
    cases = {
        "bare": lambda: bare.call(ctxt, "noop"),
        "ping": lambda: api.ping(ctxt),
        "select-none": lambda: api.select_destinations(ctxt, PLAIN, confirm="none"),
        "select-auto": lambda: api.select_destinations(ctxt, PLAIN, confirm="auto"),
        "select-sync": lambda: api.select_destinations(ctxt, PLAIN, confirm="sync"),
    }
    print(f"scheduler from {os.path.dirname(rpc.__file__)}; us per call, median of "
          f"{args.repeat} x {args.calls} calls (calling thread / process)")
    for name in args.cases.split(","):
        call = cases[name]
        measure(call, min(200, args.calls))        # warm up
        runs = [measure(call, args.calls) for _ in range(args.repeat)]
        thread = statistics.median(r[0] for r in runs)
        process = statistics.median(r[1] for r in runs)
        print(f"  {name:12s} {thread:7.1f} / {process:7.1f}   (least {min(r[0] for r in runs):.1f}"
              f" / {min(r[1] for r in runs):.1f})", flush=True)
    api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
