"""select_destinations round trip over RabbitMQ, end to end through the daemon.

Starts a real berth-scheduler per concurrency backend on a fresh MariaDB
database holding a 1,000-host fleet, then times select_destinations from 1 and
from 16 concurrent clients (p50/p99, ms). Every placement is a real claim.

    python tools/bench_rpc.py [--hosts 1000] [--requests 400] [--backends eventlet threading]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
warnings.filterwarnings("ignore")

from tests.functional.daemon import Daemon, small_fleet  # noqa: E402

SPEC = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 5}}


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def measure(daemon: Daemon, clients: int, requests: int) -> tuple[list[float], float]:
    api = daemon.api(timeout=60)
    for _ in range(5):                      # warm the cache and the connections
        api.select_destinations(None, SPEC)
    lat: list[float] = []
    lock = threading.Lock()
    per_client = max(1, requests // clients)

    def client() -> None:
        mine = []
        for _ in range(per_client):
            t = time.perf_counter()
            api.select_destinations(None, SPEC)
            mine.append((time.perf_counter() - t) * 1000)
        with lock:
            lat.extend(mine)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--backends", nargs="+", default=["eventlet", "threading"])
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args()
    print(f"fleet {args.hosts} hosts, {args.requests} requests per run, "
          f"{args.workers} worker(s)")
    print(f"{'backend':10} {'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7}")
    for backend in args.backends:
        d = Daemon(Path(tempfile.mkdtemp()), backend=backend, workers=args.workers,
                   fleet=small_fleet(n=args.hosts, vcpus=512, memory_mb=2 ** 20,
                                     local_gb=100000))
        try:
            d.start()
            for clients in (1, 16):
                lat, took = measure(d, clients, args.requests)
                print(f"{backend:10} {clients:7d} {percentile(lat, 50):8.1f} "
                      f"{percentile(lat, 99):8.1f} {len(lat) / took:7.0f}", flush=True)
            d.assert_consistent()
            if d.stop() != 0:
                print("daemon did not exit 0:\n" + d.log_tail())
                return 1
        finally:
            d.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
