"""Mixed client load on a real daemon, what each client knows it holds, and the
reconciliation of that knowledge against the database after a fault.

``Load`` runs client threads of the realistic trace's request kinds (plain,
image properties, pinned CPUs with every thread policy, mixed, page sizes, two
NUMA cells, SR-IOV VFs and GPUs, server groups, multi-create, hints, zones) on a
generated heterogeneous fleet with usage already on it; each thread keeps a
bounded number of its own instances alive and releases the oldest beyond that,
so the fleet stays at a steady fill however long the load runs.

The ``Ledger`` is what the clients know: instances they hold (placement received
and confirmed), instances they released, and instances whose fate they cannot
know (the call failed without an answer that says "nothing claimed"). After
the fault, ``reconcile`` compares it with the allocations in the database:
nothing held may be missing, nothing released may be there, and whatever is
there that no client holds (an orphan) must be one of the uncertain ones and
pending, so that the reaper gives it back after ``claim_ttl``.
"""
from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time
import urllib.request
from collections.abc import Iterable

import oslo_messaging
import sqlalchemy as sa

from db import models
from scheduler import exception
from tools.bench import check as bench_check
from tools.bench import fleet as bench_fleet
from tools.bench import trace as bench_trace

#: Kinds of request the clients send, weighted as in the realistic trace
#: (releases are the clients' own, below).
SELECT_KINDS = {k: w for k, w in bench_trace.KINDS.items() if k != "release"}

#: Answers that say "nothing is claimed for this request".
REFUSALS = (exception.NoValidHost, exception.InvalidRequest, exception.RequestTimeout,
            exception.ClaimExpired)
REFUSAL_NAMES = tuple(e.__name__ for e in REFUSALS)

#: Outcomes that are the daemon's own answer (counted for recovery times).
ANSWERED = frozenset({"placed", "NoValidHost", "released", "not_held"})


@dataclasses.dataclass
class Op:
    """One client call: start and end (monotonic seconds), what, how it ended."""

    t0: float
    t1: float
    op: str
    kind: str
    outcome: str

    @property
    def ms(self) -> float:
        return (self.t1 - self.t0) * 1000


class Ledger:
    """What the clients know of their instances."""

    def __init__(self, existing: Iterable[str]) -> None:
        self.lock = threading.Lock()
        self.held: set[str] = set(existing)
        self.released: set[str] = set()
        self.uncertain: set[str] = set()
        self.release_uncertain: set[str] = set()
        #: held by a client, yet its release answered "holds nothing": a lost claim
        self.lost_on_release: set[str] = set()
        self.specs: dict[str, dict] = {}
        self.sent: list[dict] = []

    def placed(self, uuids: list[str], spec: dict) -> None:
        with self.lock:
            self.held.update(uuids)
            self.uncertain.difference_update(uuids)
            for u in uuids:
                self.specs[u] = spec

    def unsure(self, uuids: list[str]) -> None:
        with self.lock:
            self.uncertain.update(uuids)

    def gone(self, uuid: str) -> None:
        with self.lock:
            self.held.discard(uuid)
            self.release_uncertain.discard(uuid)
            self.uncertain.discard(uuid)
            self.released.add(uuid)

    def release_unsure(self, uuid: str) -> None:
        with self.lock:
            self.held.discard(uuid)
            self.release_uncertain.add(uuid)


def outcome_name(error: BaseException) -> str:
    """The error's type as the daemon named it (oslo.messaging rebuilds remote
    errors as ``<Name>_Remote`` subclasses)."""
    return type(error).__name__.removesuffix("_Remote")


class Client(threading.Thread):
    """One client thread: selects of random kinds, releases of its own oldest
    instances beyond ``keep``."""

    def __init__(self, load: Load, index: int) -> None:
        super().__init__(name=f"chaos-client-{index}", daemon=True)
        self.load = load
        self.rng = random.Random(load.seed * 1000 + index)
        self.gen = bench_trace._Gen(self.rng, load.fleet)
        self.live: collections.deque[str] = collections.deque()
        self.ops: list[Op] = []

    def run(self) -> None:
        load = self.load
        names, weights = list(SELECT_KINDS), list(SELECT_KINDS.values())
        while not load.stopping.is_set():
            if len(self.live) > load.keep:
                self.release(self.live.popleft())
            else:
                self.select(self.rng.choices(names, weights)[0])
            if self.ops and self.ops[-1].outcome not in ANSWERED and \
                    not self.ops[-1].outcome.startswith(REFUSAL_NAMES):
                time.sleep(0.2)         # a failed call: back off a little, as clients do
            elif load.pause:
                time.sleep(load.pause)

    def select(self, kind: str) -> None:
        load = self.load
        spec = self.gen.spec(kind)
        uuids = list(spec["instance_uuids"])
        with load.ledger.lock:
            load.ledger.sent.append(spec)
        t0 = time.monotonic()
        try:
            load.api.select_destinations(None, spec)
            load.api.wait_confirmed(uuids)      # confirmed in the background
        except REFUSALS as e:
            outcome = outcome_name(e)
        except Exception as e:      # noqa: BLE001 - every other failure is recorded
            outcome = outcome_name(e)
            load.ledger.unsure(uuids)
        else:
            outcome = "placed"
            load.ledger.placed(uuids, spec)
            self.live.extend(uuids)
        self.ops.append(Op(t0, time.monotonic(), "select", kind, outcome))

    def release(self, uuid: str) -> None:
        load = self.load
        t0 = time.monotonic()
        try:
            held = load.api.release(None, uuid)
        except Exception as e:      # noqa: BLE001
            outcome = outcome_name(e)
            load.ledger.release_unsure(uuid)
        else:
            outcome = "released" if held else "not_held"
            if not held:
                with load.ledger.lock:
                    if uuid in load.ledger.held:
                        load.ledger.lost_on_release.add(uuid)
            load.ledger.gone(uuid)
        self.ops.append(Op(t0, time.monotonic(), "release", "release", outcome))


class Load:
    """``threads`` clients on ``api`` until ``stop()``."""

    def __init__(self, api, fleet: bench_fleet.BenchFleet, threads: int = 16,
                 keep: int = 12, seed: int = 1, pause: float = 0.0) -> None:
        self.api = api
        self.fleet = fleet
        self.seed = seed
        self.keep = keep
        self.pause = pause
        self.stopping = threading.Event()
        self.ledger = Ledger(fleet.instance_uuids())
        self.clients = [Client(self, i) for i in range(threads)]
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        for c in self.clients:
            c.start()

    def stop(self, timeout: float = 180) -> None:
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for c in self.clients:
            c.join(max(0.1, deadline - time.monotonic()))
        alive = [c.name for c in self.clients if c.is_alive()]
        assert not alive, f"clients still blocked in a call after {timeout} s: {alive}"

    @property
    def ops(self) -> list[Op]:
        return sorted((op for c in self.clients for op in c.ops), key=lambda o: o.t0)

    def outcomes(self, since: float = 0.0, until: float = float("inf")) -> dict[str, int]:
        """Calls by ``op:outcome`` among those that started in [since, until)."""
        counts: collections.Counter = collections.Counter(
            f"{op.op}:{op.outcome}" for op in self.ops if since <= op.t0 < until)
        return dict(sorted(counts.items()))

    def first_answer_after(self, t: float) -> float | None:
        """Seconds from ``t`` until the first call the daemon answered that ended
        after it (None: none)."""
        ends = [op.t1 for op in self.ops if op.t1 >= t and op.outcome in ANSWERED]
        return min(ends) - t if ends else None

    def release_the_uncertain(self, attempts: int = 20) -> int:
        """Send the releases that got no answer again (release is idempotent), as
        a client does once the service is back; returns how many were resent."""
        sent = 0
        for uuid in sorted(self.ledger.release_uncertain):
            for attempt in range(attempts):
                try:
                    self.api.release(None, uuid)
                except (exception.ServiceUnavailable, oslo_messaging.MessagingTimeout,
                        oslo_messaging.MessageDeliveryFailure):
                    time.sleep(min(2 ** attempt * 0.2, 3))
                    continue
                self.ledger.gone(uuid)
                sent += 1
                break
        return sent


def latency_stats(ops: list[Op]) -> dict[str, float]:
    samples = sorted(op.ms for op in ops)
    if not samples:
        return {"n": 0}

    def pct(q: float) -> float:
        return samples[min(len(samples) - 1, max(0, int(round(q / 100 * len(samples))) - 1))]

    return {"n": len(samples), "p50": round(pct(50), 1), "p99": round(pct(99), 1),
            "max": round(samples[-1], 1)}


# -- the database's side -------------------------------------------------------------

def allocations(db) -> dict[str, bool]:
    """instance_uuid -> pending, straight from SQL."""
    a = models.Consumer
    with db.reader_connection() as conn:
        return {u: bool(p) for u, p in conn.execute(sa.select(a.instance_uuid, a.pending))}


@dataclasses.dataclass
class Reconciliation:
    lost: set[str]                  # held by a client, no allocation (at the end, or
                                    # found by the client's own release on the way)
    resurrected: set[str]           # released by a client, allocation present
    orphans_pending: set[str]       # allocation nobody holds, pending (reapable)
    orphans_confirmed: set[str]     # allocation nobody holds, confirmed (stays forever)
    unexplained: set[str]           # orphans whose call the client saw succeed or refused

    def problems(self) -> list[str]:
        out = []
        for name in ("lost", "resurrected", "orphans_confirmed", "unexplained"):
            items = getattr(self, name)
            if items:
                out.append(f"{len(items)} {name}: {sorted(items)[:5]}")
        return out


def reconcile(db, ledger: Ledger) -> Reconciliation:
    held_in_db = allocations(db)
    present = set(held_in_db)
    orphans = present - ledger.held
    return Reconciliation(
        lost=(ledger.held - present) | ledger.lost_on_release,
        resurrected=ledger.released & present,
        orphans_pending={u for u in orphans if held_in_db[u]},
        orphans_confirmed={u for u in orphans if not held_in_db[u]},
        unexplained=orphans - ledger.uncertain)


def invariant_problems(db, fleet: bench_fleet.BenchFleet, ledger: Ledger) -> list[str]:
    """The realistic benchmark's SQL checks (capacity, usage = sum of
    allocations, pinning, pages, hard groups, PCI claims against allocations,
    zones, forced/ignored hosts, held and released instances)."""
    exp = bench_check.Expectations(
        groups=bench_trace.group_policies(fleet, ({"spec": s} for s in ledger.sent)),
        specs=dict(ledger.specs), placed=set(ledger.held) - set(fleet.instance_uuids()),
        released=set(ledger.released))
    return bench_check.check(db, exp)


# -- the daemon's metrics ------------------------------------------------------------------

def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of the daemon's /metrics, by (name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))
