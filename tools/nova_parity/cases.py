"""Seeded random ``berth-manage numa fit`` cases for the Nova parity check.

Plain data only (no Nova import), so the generator is tested with the unit tests.

Hosts look like what a libvirt compute reports: 1-4 cells, each with shared
(``cpuset``) and dedicated (``pcpuset``) CPUs, SMT (two threads per core) or not,
every core listed in ``siblings`` (a single-thread core as a set of one), small
pages covering the memory that is not set aside as 2 MiB or 1 GiB huge pages, and
usage that adds up: ``memory_usage`` is the memory of the pages in use, pinned
CPUs are a random set (whole cores or single threads). Every cell lists its pages, as
every Nova host does: a cell without a page list is no Nova host (Nova's own usage
accounting fails on one), so Berth's rule for those (``small``/``any`` is plain
memory there) is covered by Berth's unit tests, not here.

Guests: 1-3 cells, one CPU policy for all (shared, dedicated, mixed), every thread
policy, emulator threads shared or isolated, page size none / small / large / any /
2 MiB / 1 GiB, and limits absent (``null``) or with ratios below and above 1.
"""
from __future__ import annotations

import random

THREAD_POLICIES = (None, "prefer", "isolate", "require")
PAGE_REQUESTS = (None, None, None, "small", "large", "any", 2048, 1048576)
SMALL_KB, HUGE_2M_KB, HUGE_1G_KB = 4, 2048, 1048576


def make_case(rng: random.Random, case_id: int) -> dict:
    """One case: ``{"id", "host", "instance", "limits"}`` (the tool's format)."""
    host = _host(rng)
    instance = _instance(rng, len(host["cells"]))
    limits = None
    if rng.random() < 0.7:
        limits = {"cpu_allocation_ratio": rng.choice([0.5, 1.0, 2.0, 4.0, 16.0]),
                  "ram_allocation_ratio": rng.choice([0.5, 1.0, 1.0, 1.5, 2.0])}
    return {"id": case_id, "host": host, "instance": instance, "limits": limits}


def make_cases(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    return [make_case(rng, i) for i in range(count)]


def _host(rng: random.Random) -> dict:
    threads = rng.choice([1, 2, 2])          # one layout per host, as real hardware
    cells = []
    cpu = 0
    for cell_id in range(rng.choice([1, 2, 2, 3, 4])):
        cell, cpu = _host_cell(rng, cell_id, cpu, threads)
        cells.append(cell)
    return {"cells": cells}


def _host_cell(rng: random.Random, cell_id: int, first: int, threads: int) -> tuple[dict, int]:
    dedicated_cores = rng.choice([0, 2, 3, 4, 6, 8])
    shared_cores = rng.choice([0, 1, 2, 4])
    if dedicated_cores + shared_cores == 0:
        shared_cores = 1
    cores = []
    cpu = first
    for _ in range(dedicated_cores + shared_cores):
        cores.append(list(range(cpu, cpu + threads)))
        cpu += threads
    pcpus = [c for core in cores[:dedicated_cores] for c in core]
    shared = [c for core in cores[dedicated_cores:] for c in core]
    pinned = _pinned(rng, cores[:dedicated_cores])

    memory_mb = rng.choice([2048, 4096, 8192, 16384])
    cell = {"id": cell_id, "socket": 0, "cpuset": shared, "pcpuset": pcpus,
            "siblings": cores, "memory_mb": memory_mb,
            "cpu_usage": rng.randint(0, 2 * len(shared)), "pinned_cpus": pinned}
    huge_1g = rng.randint(0, memory_mb // 1024 - 1) if rng.random() < 0.5 else 0
    left = memory_mb - huge_1g * 1024
    huge_2m = rng.randint(0, left // 2 // 2) if rng.random() < 0.5 else 0
    small_mb = left - huge_2m * 2
    pages = [_pages(rng, SMALL_KB, small_mb * 1024 // SMALL_KB)]
    if huge_2m or rng.random() < 0.3:
        pages.append(_pages(rng, HUGE_2M_KB, huge_2m))
    if huge_1g or rng.random() < 0.3:
        pages.append(_pages(rng, HUGE_1G_KB, huge_1g))
    cell["mempages"] = pages
    cell["memory_usage"] = sum(p["used"] * p["size_kb"] for p in pages) // 1024
    return cell, cpu


def _pages(rng: random.Random, size_kb: int, total: int) -> dict:
    share = rng.choice([0, 0, 0, 0.25, 0.5, 0.9])
    used = min(total, int(total * share))
    reserved = rng.randint(0, total - used) if size_kb != SMALL_KB and rng.random() < 0.2 else 0
    return {"size_kb": size_kb, "total": total, "used": used, "reserved": reserved}


def _pinned(rng: random.Random, cores: list[list[int]]) -> list[int]:
    pinned: list[int] = []
    for core in cores:
        roll = rng.random()
        if roll < 0.15:
            pinned.extend(core)
        elif roll < 0.25:
            pinned.append(rng.choice(core))
    return sorted(pinned)


def _instance(rng: random.Random, host_cells: int) -> dict:
    count = min(host_cells, rng.choice([1, 1, 1, 2, 2, 3]))
    policy = rng.choice(["shared", "dedicated", "dedicated", "mixed"])
    thread = None if policy == "shared" else rng.choice(THREAD_POLICIES)
    pagesize = rng.choice(PAGE_REQUESTS)
    cells = []
    vcpu = 0
    for cell_id in range(count):
        if policy == "shared":
            n_pinned, n_shared = 0, rng.randint(1, 4)
        elif policy == "dedicated":
            n_pinned, n_shared = rng.randint(1, 4), 0
        else:
            n_pinned, n_shared = rng.randint(1, 4), rng.randint(1, 3)
        cpus = list(range(vcpu, vcpu + n_pinned + n_shared))
        vcpu += len(cpus)
        cells.append({"id": cell_id, "cpuset": cpus[n_pinned:], "pcpuset": cpus[:n_pinned],
                      "memory_mb": rng.choice([512, 1024, 1024, 1024, 2048, 2048, 4096]),
                      "pagesize": pagesize, "cpu_policy": policy, "cpu_thread_policy": thread})
    emulator = None
    if policy != "shared":
        emulator = rng.choice([None, None, "share", "isolate"])
    return {"cells": cells, "emulator_threads_policy": emulator}
