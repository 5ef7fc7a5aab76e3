"""Do a host's PCI pools satisfy a boot's PCI requests, and from which pools?

Pure functions over a host's pools (``tuple[PciPool, ...]``): nothing is
mutated or deep-copied; each call builds a few small lists of pool indices.

All the requests of one boot are satisfied together: a device serves one
request only. Matching is a transportation problem (requests need counts,
pools supply them, a request may use a pool if a spec matches and the NUMA
policy allows it): feasibility is checked with Hall's condition over subsets of
requests, and the assignment is built with augmenting paths, so a feasible
assignment is found whenever one exists.

NUMA policies, with ``numa_cells`` the host cells the instance was fitted to
(``None``: the instance has no NUMA topology, so nothing is restricted):

- ``required``: the device's NUMA node is one of ``numa_cells``.
- ``legacy`` (default): as ``required``, or the device's NUMA node is unknown.
- ``preferred``: devices on ``numa_cells`` when enough are free, else any.
- ``socket``: the device's NUMA node is on the same socket as one of
  ``numa_cells`` (``socket_of`` maps host cell -> socket; without it, nothing).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from pci.errors import PciDoesNotFit
from pci.pools import PciPool, PoolKey
from pci.request import (
    POLICY_LEGACY,
    POLICY_PREFERRED,
    POLICY_SOCKET,
    PciRequest,
)

Pick = tuple[int, PoolKey, int]  # (request index, pool key, devices taken)

# Up to this many requests, feasibility is Hall's condition over all subsets
# (2**n - 1 sums); beyond it, the assignment itself is computed.
_HALL_MAX_REQUESTS = 6


class _Numa:
    """The instance's NUMA placement, as the policies need it."""

    __slots__ = ("cells", "socket_of", "_socket_nodes")

    def __init__(self, numa_cells: Collection[int] | None,
                 socket_of: Mapping[int, int] | None) -> None:
        self.cells = numa_cells
        self.socket_of = socket_of
        self._socket_nodes: frozenset[int] | None = None

    def socket_nodes(self) -> frozenset[int] | None:
        """Host cells on the same socket as one of the instance's cells."""
        if self._socket_nodes is None and self.cells is not None and self.socket_of:
            sockets = {self.socket_of[c] for c in self.cells if c in self.socket_of}
            self._socket_nodes = frozenset(
                c for c, s in self.socket_of.items() if s in sockets)
        return self._socket_nodes

    def rule(self, policy: str) -> tuple[Collection[int], bool] | None:
        """``(NUMA nodes allowed, unknown node allowed)`` for ``policy``; None: any."""
        if self.cells is None or policy == POLICY_PREFERRED:
            return None
        if policy == POLICY_LEGACY:
            return self.cells, True
        if policy == POLICY_SOCKET:
            return self.socket_nodes() or (), False
        return self.cells, False  # required

    def affine(self, numa_node: int | None) -> bool:
        """Whether a device is on the instance's cells (``preferred`` tries these first)."""
        return self.cells is None or (numa_node is not None and numa_node in self.cells)


def _allowed(pools: Sequence[PciPool], req: PciRequest, numa: _Numa) -> list[int]:
    """Indices of the non-empty pools ``req`` may use (spec and NUMA policy)."""
    memo = req.match_memo()
    rule = numa.rule(req.numa_policy)
    found = []
    for i, pool in enumerate(pools):
        key = pool.key
        ok = memo.get(key)
        if ok is None:
            ok = req.matches(key)
        if ok and pool.count > 0 and (rule is None or (
                rule[1] if key.numa_node is None else key.numa_node in rule[0])):
            found.append(i)
    return found


def _matching(pools: Sequence[PciPool], request: PciRequest) -> list[int]:
    """Indices of the non-empty pools matching the request's specs (NUMA ignored)."""
    return _allowed(pools, request, _NO_NUMA)


def _candidates(pools: Sequence[PciPool], requests: Sequence[PciRequest],
                numa: _Numa) -> list[list[int]]:
    """Per request, the pools it may use, NUMA-affine pools first."""
    cands = []
    for req in requests:
        allowed = _allowed(pools, req, numa)
        if numa.cells is not None and req.numa_policy == POLICY_PREFERRED:
            allowed.sort(key=lambda i: not numa.affine(pools[i].key.numa_node))
        cands.append(allowed)
    return cands


_NO_NUMA = _Numa(None, None)


def _supply(pools: Sequence[PciPool], indices) -> int:
    return sum(pools[i].count for i in indices)


# Subsets of n requests, smallest first: the order Hall's condition is checked in.
_SUBSETS = {n: sorted((tuple(r for r in range(n) if mask >> r & 1)
                       for mask in range(1, 1 << n)), key=lambda m: (len(m), m))
            for n in range(1, _HALL_MAX_REQUESTS + 1)}


def _violations(pools: Sequence[PciPool], requests: Sequence[PciRequest],
                cands: Sequence[Sequence[int]]):
    """Subsets of requests that want more devices than their pools hold, smallest first."""
    for members in _SUBSETS[len(requests)]:
        demand = sum(requests[r].count for r in members)
        if len(members) == 1:
            supply = _supply(pools, cands[members[0]])
        else:
            union: set[int] = set()
            for r in members:
                union.update(cands[r])
            supply = _supply(pools, union)
        if demand > supply:
            yield members, demand, supply


def _fits(pools: Sequence[PciPool], requests: Sequence[PciRequest],
          cands: Sequence[Sequence[int]]) -> bool:
    for req, cand in zip(requests, cands, strict=True):
        if _supply(pools, cand) < req.count:
            return False
    if len(requests) == 1 or len(set().union(*cands)) == sum(len(c) for c in cands):
        return True  # each request alone fits, and no pool is shared
    if len(requests) <= _HALL_MAX_REQUESTS:
        return next(_violations(pools, requests, cands), None) is None
    return _assign(pools, requests, cands) is not None


def _assign(pools: Sequence[PciPool], requests: Sequence[PciRequest],
            cands: Sequence[Sequence[int]]) -> list[dict[int, int]] | None:
    """Devices per (request, pool) satisfying every request, or ``None``.

    Augmenting paths: when a request finds no free candidate pool, an earlier
    request is moved to another pool it may use to make room.
    """
    free = [p.count for p in pools]
    flow: list[dict[int, int]] = [{} for _ in requests]
    users: dict[int, set[int]] = {}  # pool -> requests holding devices from it
    for r, req in enumerate(requests):
        need = req.count
        while need > 0:
            path = _augmenting_path(r, cands, free, flow, users)
            if path is None:
                return None
            end_pool = path[-1][1]
            amount = min(need, free[end_pool])
            for (_, p), (y, _) in zip(path, path[1:], strict=False):
                amount = min(amount, flow[y][p])
            for i, (x, p) in enumerate(path):
                flow[x][p] = flow[x].get(p, 0) + amount
                users.setdefault(p, set()).add(x)
                if i + 1 < len(path):  # the next request gives up ``amount`` of p
                    y = path[i + 1][0]
                    flow[y][p] -= amount
                    if not flow[y][p]:
                        del flow[y][p]
                        users[p].discard(y)
            free[end_pool] -= amount
            need -= amount
    return flow


def _augmenting_path(start: int, cands: Sequence[Sequence[int]], free: list[int],
                     flow: list[dict[int, int]], users: dict[int, set[int]]):
    """Breadth-first: [(request, pool), ...] ending on a pool with free devices."""
    parent: dict[int, tuple[int, int] | None] = {start: None}
    queue = [start]
    for x in queue:
        for p in cands[x]:
            if free[p] > 0:
                path = [(x, p)]
                while parent[x] is not None:
                    x, via = parent[x]
                    path.append((x, via))
                path.reverse()
                return path
        for p in cands[x]:
            for y in sorted(users.get(p, ())):
                if y not in parent:
                    parent[y] = (x, p)
                    queue.append(y)
    return None


def _strict_preferred(pools: Sequence[PciPool], requests: Sequence[PciRequest],
                      cands: list[list[int]], numa: _Numa, relaxed: int) -> list[list[int]]:
    """Candidates with the ``preferred`` requests after the first ``relaxed`` kept affine."""
    out = []
    seen = 0
    for req, cand in zip(requests, cands, strict=True):
        if numa.cells is not None and req.numa_policy == POLICY_PREFERRED:
            seen += 1
            if seen > relaxed:
                cand = [i for i in cand if numa.affine(pools[i].key.numa_node)]
        out.append(cand)
    return out


def supports_requests(pools: Sequence[PciPool], requests: Sequence[PciRequest],
                      numa_cells: Collection[int] | None = None,
                      socket_of: Mapping[int, int] | None = None) -> bool:
    """Whether the pools can serve all ``requests`` at once."""
    if not requests:
        return True
    if not pools:
        return False
    numa = _Numa(numa_cells, socket_of)
    if len(requests) == 1:
        # The filter's common case, inlined: count usable free devices until enough.
        req = requests[0]
        need = req.count
        memo = req.match_memo()
        rule = numa.rule(req.numa_policy)
        for pool in pools:
            key = pool.key
            ok = memo.get(key)
            if ok is None:
                ok = req.matches(key)
            if ok and pool.count > 0 and (rule is None or (
                    rule[1] if key.numa_node is None else key.numa_node in rule[0])):
                need -= pool.count
                if need <= 0:
                    return True
        return False
    return _fits(pools, requests, _candidates(pools, requests, numa))


def apply_requests(pools: Sequence[PciPool], requests: Sequence[PciRequest],
                   numa_cells: Collection[int] | None = None,
                   socket_of: Mapping[int, int] | None = None,
                   ) -> tuple[tuple[PciPool, ...], tuple[Pick, ...]]:
    """The pools after serving ``requests``, and which pools served which request.

    Picks are ``(request_index, PoolKey, count)``. ``preferred`` requests use
    NUMA-affine pools when that still lets every request fit. Raises
    ``PciDoesNotFit`` (a ``PciError`` on field ``pci_requests``) otherwise.
    """
    pools = tuple(pools)
    if not requests:
        return pools, ()
    numa = _Numa(numa_cells, socket_of)
    cands = _candidates(pools, requests, numa)
    flow = None
    if _fits(pools, requests, cands):
        n_preferred = sum(1 for r in requests if r.numa_policy == POLICY_PREFERRED)
        for relaxed in range(n_preferred + 1 if numa.cells is not None else 1):
            flow = _assign(pools, requests,
                           _strict_preferred(pools, requests, cands, numa, relaxed))
            if flow is not None:
                break
    if flow is None:
        raise PciDoesNotFit("pci_requests",
                            _explain(pools, requests, numa, cands) or "does not fit")
    taken = [0] * len(pools)
    picks = []
    for r, used in enumerate(flow):
        for p in sorted(used):
            taken[p] += used[p]
            picks.append((r, pools[p].key, used[p]))
    new_pools = tuple(pool if not taken[i] else PciPool(pool.key, pool.count - taken[i])
                      for i, pool in enumerate(pools) if pool.count > taken[i])
    return new_pools, tuple(picks)


def _devices(n: int) -> str:
    return f"{n} matching device" + ("" if n == 1 else "s")


def _explain(pools: Sequence[PciPool], requests: Sequence[PciRequest], numa: _Numa,
             cands: Sequence[Sequence[int]]) -> str | None:
    for req in requests:
        matching = _supply(pools, _matching(pools, req))
        if matching < req.count:
            return f"{req.label}: need {_devices(req.count)}, {matching} free"
    for req, cand in zip(requests, cands, strict=True):
        allowed = _supply(pools, cand)
        if allowed >= req.count:
            continue
        if req.numa_policy == POLICY_SOCKET and numa.socket_nodes() is None:
            return (f"{req.label}: numa_policy socket needs the host's NUMA cells "
                    f"to know their socket")
        where = "sockets" if req.numa_policy == POLICY_SOCKET else "NUMA cells"
        return (f"{req.label}: need {_devices(req.count)} on the instance's {where} "
                f"(numa_policy {req.numa_policy}), {allowed} free there")
    if len(requests) <= _HALL_MAX_REQUESTS:
        violation = next(_violations(pools, requests, cands), None)
        if violation is not None:
            members, demand, supply = violation
            labels = " + ".join(requests[r].label for r in members)
            return f"{labels}: need {_devices(demand)} together, {supply} free"
        return None
    if _assign(pools, requests, cands) is None:
        demand = sum(r.count for r in requests)
        return f"{len(requests)} pci requests: need {_devices(demand)} together"
    return None


def explain(pools: Sequence[PciPool], requests: Sequence[PciRequest],
            numa_cells: Collection[int] | None = None,
            socket_of: Mapping[int, int] | None = None) -> str | None:
    """Why the requests do not fit, e.g. ``alias nic: need 2 matching devices, 1 free``.

    ``None`` when they fit. The first failing check decides: one request alone
    (ignoring NUMA), one request under its NUMA policy, then requests together.
    """
    if not requests:
        return None
    numa = _Numa(numa_cells, socket_of)
    return _explain(tuple(pools), requests, numa, _candidates(pools, requests, numa))
