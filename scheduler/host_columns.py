"""HostColumns: the cached hosts' numbers as numpy columns, kept up to date.

The fast path of the filter scheduler evaluates the cheap, numeric filters and
weighers over all hosts at once on these columns instead of calling Python
per host. Row ``i`` is ``HostManager``'s i-th host (ordered by node id). A
column row is rewritten whenever its HostState changes (``HostState.touch``),
so nothing is rebuilt per request; the columns are rebuilt only when hosts
are added or removed.

Derived columns, named for the HostState expression they hold: ``vcpus_usable``
(vcpus - reserved), ``memory_usable`` (memory_mb - reserved), ``disk_usable``
(local_gb * 1024 - reserved), ``disk_total`` (local_gb * 1024); ``az_extra``
is True when the host's aggregates name a zone besides ``availability_zone``
(so the zone column alone can't answer for it).
"""
from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_EPOCH = datetime.datetime(1970, 1, 1)


class HostColumns:
    """Per-host numeric columns over a fixed list of HostStates."""

    FLOAT_FIELDS = ("memory_used", "memory_limit", "memory_usable", "vcpus", "vcpus_used",
                    "vcpus_limit", "vcpus_usable", "disk_used", "disk_limit", "disk_usable",
                    "disk_total", "free_ram", "free_disk",
                    "heartbeat", "num_io_ops", "num_instances", "failed_builds",
                    "hypervisor_version", "pci_free", "cpu_ratio", "ram_ratio",
                    "disk_ratio")
    BOOL_FIELDS = ("disabled", "has_numa", "has_aggregates", "az_extra")

    def __init__(self, hosts: Sequence) -> None:
        n = len(hosts)
        self.n = n
        self.hosts = list(hosts)
        for name in self.FLOAT_FIELDS:
            setattr(self, name, np.zeros(n, dtype=np.float64))
        for name in self.BOOL_FIELDS:
            setattr(self, name, np.zeros(n, dtype=bool))
        self.az_code = np.zeros(n, dtype=np.int32)
        self._az_codes: dict[str | None, int] = {}
        self.index_by_host: dict[str, list[int]] = {}
        #: aggregate metadata key -> (values, present), see ``aggregate_min``.
        self._agg_min: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        #: Per row, the (aggregates, zone) the aggregate columns were computed from.
        self._agg_source: list[tuple | None] = [None] * n
        #: id(aggregate) -> (aggregate, its rows); rebuilt after aggregates change.
        self._agg_rows: dict[int, tuple[Any, list[int]]] | None = None
        #: key -> (known, answer) bool rows, see ``memoised``.
        self._memo: dict = {}
        for i, hs in enumerate(self.hosts):
            hs.attach_columns(self, i)
            self.index_by_host.setdefault(hs.host, []).append(i)
            self.update(i, hs)

    def az(self, name: str | None) -> int:
        """The integer code of an availability zone name (-1: no host has it)."""
        return self._az_codes.get(name, -1)

    def update(self, i: int, hs) -> None:
        """Rewrite row ``i`` from its HostState."""
        for known, _answer in self._memo.values():
            known[i] = False
        self.memory_used[i] = hs.memory_mb_used
        self.memory_limit[i] = hs.memory_mb_limit
        self.memory_usable[i] = hs.memory_mb - hs.reserved_host_memory_mb
        self.vcpus[i] = hs.vcpus
        self.vcpus_used[i] = hs.vcpus_used
        self.vcpus_limit[i] = hs.vcpus_limit
        self.vcpus_usable[i] = hs.vcpus - hs.reserved_host_cpus
        self.disk_used[i] = hs.disk_mb_used
        self.disk_limit[i] = hs.disk_mb_limit
        self.disk_total[i] = hs.local_gb * 1024
        self.disk_usable[i] = hs.local_gb * 1024 - hs.reserved_host_disk_mb
        self.free_ram[i] = hs.free_ram_mb
        self.free_disk[i] = hs.free_disk_mb
        hb = hs.last_heartbeat
        self.heartbeat[i] = np.inf if hb is None else seconds(hb)
        self.num_io_ops[i] = hs.num_io_ops
        self.num_instances[i] = hs.num_instances
        self.failed_builds[i] = hs.failed_builds
        self.hypervisor_version[i] = hs.hypervisor_version or 0
        free = 0
        for pool in hs.pci_pools:
            free += pool.count
        self.pci_free[i] = free
        self.cpu_ratio[i] = hs.cpu_allocation_ratio
        self.ram_ratio[i] = hs.ram_allocation_ratio
        self.disk_ratio[i] = hs.disk_allocation_ratio
        self.disabled[i] = hs.disabled
        self.has_numa[i] = hs.numa_topology is not None
        aggs, zone = hs.aggregates, hs.availability_zone
        source = self._agg_source[i]
        if source is None or source[0] is not aggs or source[1] != zone:
            # Only when the aggregates changed (set_aggregates), not on every consume.
            self._agg_source[i] = (aggs, zone)
            self._agg_rows = None
            self.has_aggregates[i] = bool(aggs)
            self.az_extra[i] = bool(aggs) and _names_other_zone(hs)
            for key, (values, present) in self._agg_min.items():
                _aggregate_min_row(hs, key, i, values, present)
        code = self._az_codes.get(hs.availability_zone)
        if code is None:
            code = self._az_codes[hs.availability_zone] = len(self._az_codes)
        self.az_code[i] = code

    def aggregate_min(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, present) per row: ``present`` where the host's aggregates give
        ``key`` a valid float value, ``values`` the smallest of them (exactly
        ``HostState.aggregate_min_float``). Built on first use for a key, then
        kept up to date by ``update`` like the other columns."""
        cached = self._agg_min.get(key)
        if cached is None:
            values = np.zeros(self.n, dtype=np.float64)
            present = np.zeros(self.n, dtype=bool)
            # Only rows in an aggregate that mentions the key can have a value
            # (usually none: a per-host walk cost 1.6 s at 100,000 hosts).
            rows: set[int] = set()
            for agg, agg_rows in self._aggregate_rows().values():
                if key in agg.metadata:
                    rows.update(agg_rows)
            for i in sorted(rows):
                _aggregate_min_row(self.hosts[i], key, i, values, present)
            cached = self._agg_min[key] = (values, present)
        return cached

    def _aggregate_rows(self) -> dict[int, tuple[Any, list[int]]]:
        """Each distinct aggregate of the rows, with the rows that have it."""
        if self._agg_rows is None:
            by_agg: dict[int, tuple[Any, list[int]]] = {}
            for i, source in enumerate(self._agg_source):
                if source is None:
                    continue
                for agg in source[0]:
                    entry = by_agg.get(id(agg))
                    if entry is None:
                        entry = by_agg[id(agg)] = (agg, [])
                    entry[1].append(i)
            self._agg_rows = by_agg
        return self._agg_rows

    def memoised(self, key, rows: np.ndarray, answer: Callable[[Any], bool]) -> np.ndarray:
        """A bool per row: ``answer(host)`` for the hosts at ``rows`` (others
        False), remembered per ``key`` until the row's host changes (``update``).
        For expensive per-host answers that depend only on the host's state and
        on what ``key`` names (e.g. NUMA fitting of one guest topology)."""
        entry = self._memo.get(key)
        if entry is None:
            if len(self._memo) >= 64:
                self._memo.clear()
            entry = self._memo[key] = (np.zeros(self.n, dtype=bool),
                                       np.zeros(self.n, dtype=bool))
        known, ok = entry
        hosts = self.hosts
        for i in rows[~known[rows]].tolist():
            ok[i] = answer(hosts[i])
            known[i] = True
        out = np.zeros(self.n, dtype=bool)
        out[rows] = ok[rows]
        return out

    def host_indexes(self, names) -> list[int]:
        out: list[int] = []
        for name in names:
            out.extend(self.index_by_host.get(name, ()))
        return out


def _names_other_zone(hs) -> bool:
    """Whether an aggregate of ``hs`` lists a zone other than its own (the
    AvailabilityZoneFilter reads every listed zone, not only the first)."""
    zone = hs.availability_zone
    for agg in hs.aggregates:
        value = agg.metadata.get("availability_zone")
        if value and any(z.strip() != zone for z in value.split(",")):
            return True
    return False


def _aggregate_min_row(hs, key: str, i: int, values: np.ndarray, present: np.ndarray) -> None:
    value = hs.aggregate_min_float(key, None) if hs.aggregates else None
    present[i] = value is not None
    values[i] = 0.0 if value is None else value


def seconds(dt: datetime.datetime) -> float:
    """Seconds since the epoch of a naive UTC datetime (heartbeat columns)."""
    return (dt - _EPOCH).total_seconds()
