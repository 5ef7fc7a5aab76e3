"""Conformance helpers for filter and weigher authors (the built-ins use them too).

``check_filter(flt, hosts, requests, reference=None)`` runs a filter the way the
scheduler does — over the columns of many hosts (its vector form, or its
per-host form asked once per class), and on one host at a time (the recheck
before a claim) — and checks, for every request and host:

* every answer is ``None`` or a non-empty string;
* all paths give the same answer;
* the answer equals the per-host form's (a filter with both forms), or
  ``reference(host, request)`` when given (a vector-only filter);
* hosts with equal ``class_key`` get equal answers from the per-host form
  (the class key covers what the rule reads);
* every host a ``screen`` refuses fails the per-host form too, and every host
  ``sure_passes`` passes passes it.

``check_weigher`` does the same for raw weights. Both raise
:class:`ConformanceError` naming the request, the host and both answers.
``answers`` and ``raw_weights`` return what the framework answers, for tests
of a plugin's own behaviour. Example::

    from scheduler import testing

    def test_gold_only(hosts, specs):
        testing.check_filter(GoldOnlyFilter(conf), hosts,
                             [testing.request(s) for s in specs])
"""
from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from scheduler import cycle as cycles
from scheduler.host_columns import HostColumns
from scheduler.plugins import SKIP, RequestContext, overrides

__all__ = ["SKIP", "ConformanceError", "answers", "check_filter", "check_weigher", "raw_weights",
           "request"]


class ConformanceError(AssertionError):
    """A plugin's answers disagree between paths, or with its reference."""


def request(spec, *, now: datetime.datetime | None = None, conf=None,
            group_hosts: Mapping[str, int] | None = None,
            instance_nodes: Mapping[str, int] | None = None, index: int = 0
            ) -> RequestContext:
    """A RequestContext for ``spec`` (now, the global config, no group members)."""
    if conf is None:
        from oslo_config import cfg

        conf = cfg.CONF
    return RequestContext(spec=spec, now=now or datetime.datetime.utcnow(), conf=conf,
                          group_hosts=dict(group_hosts or {}),
                          instance_nodes=dict(instance_nodes or {}), index=index)


def _step(flt) -> cycles.Step:
    return cycles.plan([flt])[-1]


def _classes(flt, cols: HostColumns) -> None:
    if flt.has_classes:
        for column, key_fn in flt.class_columns().items():
            if column not in cols.classes.names:
                cols.classes.register(column, key_fn)


def answers(flt, hosts: Sequence, req: RequestContext) -> list[str | None]:
    """What the scheduler answers for each host (``None``: passes), through the
    same path it uses over many hosts."""
    cols = HostColumns(list(hosts))
    _classes(flt, cols)
    return _answers(_step(flt), cols, req)


def _answers(step: cycles.Step, cols: HostColumns, req: RequestContext) -> list[str | None]:
    cyc = cycles.Cycle([step], [], cols, keep=1)
    v = cyc._new_verdicts(step, req, cols)
    if v is SKIP:
        return [None] * cols.n
    cycles.ensure_answers(v, cols, np.arange(cols.n), reasons=True)
    return [None if c == 0 else v.reasons[c - 1] for c in v.codes.tolist()]


def check_filter(flt, hosts: Sequence, requests: Sequence[RequestContext],
                 reference: Callable[[Any, RequestContext], str | None] | None = None
                 ) -> None:
    """Check ``flt`` on ``hosts`` for every request (see the module's docstring)."""
    step = _step(flt)
    cols = HostColumns(list(hosts))
    _classes(flt, cols)
    both = flt.has_vector and flt.has_per_host
    for req in requests:
        if flt.has_classes and flt.has_per_host:
            _check_classes(flt, hosts, req)
        if flt.has_screen or flt.has_sure_passes:
            _check_screen(flt, cols, req)
        many = _answers(step, cols, req)
        for host, got in zip(hosts, many, strict=True):
            one_cols = HostColumns([host], cols.classes)
            alone = _answers(step, one_cols, req)[0]
            if alone != got:
                raise ConformanceError(
                    f"{flt.name} on {host.host}: {got!r} among {len(hosts)} hosts but "
                    f"{alone!r} alone (request {req.spec.to_primitive()})")
            if not (both or reference is not None):
                continue
            state = flt.prepare(req)
            if state is SKIP:
                want = None
            elif both:
                want = cycles.ask_host(flt, host, state)
            else:
                want = reference(host, req)
            if want != got:
                raise ConformanceError(
                    f"{flt.name} on {host.host}: {got!r}, but the "
                    f"{'per-host form' if both else 'reference'} says {want!r} "
                    f"(request {req.spec.to_primitive()})")


def _check_screen(flt, cols: HostColumns, req: RequestContext) -> None:
    """A screened host fails the per-host check (a screen is a necessary condition)."""
    state = flt.prepare(req)
    if state is SKIP:
        return
    if flt.has_screen:
        for r in np.flatnonzero(cycles.screened_rows(flt, state, cols)).tolist():
            host = cols.hosts[r]
            if cycles.ask_host(flt, host, state) is None:
                raise ConformanceError(
                    f"{flt.name}: the screen refuses {host.host}, which passes "
                    f"(request {req.spec.to_primitive()})")
    if flt.has_sure_passes:
        sure = cycles.screened_rows(flt, state, cols, method="sure_passes")
        for r in np.flatnonzero(sure).tolist():
            host = cols.hosts[r]
            reason = cycles.ask_host(flt, host, state)
            if reason is not None:
                raise ConformanceError(
                    f"{flt.name}: sure_passes passes {host.host}, which fails: {reason} "
                    f"(request {req.spec.to_primitive()})")


def _check_classes(flt, hosts: Sequence, req: RequestContext) -> None:
    """Hosts with equal class keys get equal answers from the per-host form."""
    state = flt.prepare(req)
    which = None if state is SKIP else flt.class_for(state)
    if which is None:
        return
    key_fn = flt.class_keys()[which]
    seen: dict[Any, tuple[Any, str | None]] = {}
    for host in hosts:
        key = key_fn(host)
        direct = cycles.ask_host(flt, host, state)
        if key in seen and seen[key][1] != direct:
            raise ConformanceError(
                f"{flt.name}: {seen[key][0].host} and {host.host} have the same class "
                f"key but answer {seen[key][1]!r} and {direct!r}")
        seen.setdefault(key, (host, direct))


def raw_weights(weigher, hosts: Sequence, req: RequestContext) -> list[float] | None:
    """The weigher's raw weights of ``hosts`` as the scheduler computes them, or
    None when it weighs them all the same (skipped)."""
    cols = HostColumns(list(hosts))
    state = weigher.prepare(req)
    if state is SKIP:
        return None
    raw = cycles.raw_weights(weigher, state, cols, np.arange(cols.n))
    return None if raw is None else raw.tolist()


def check_weigher(weigher, hosts: Sequence, requests: Sequence[RequestContext],
                  reference: Callable[[Any, RequestContext], float] | None = None) -> None:
    """The weigher's raw weights over many hosts equal its per-host ``weigh`` (when
    it has both forms) or ``reference(host, request)``; a request it skips (or
    weighs as one number) must weigh every host the same."""
    from scheduler.weights import BaseWeigher

    both = weigher.has_vector and overrides(weigher, BaseWeigher, "weigh")
    for req in requests:
        got = raw_weights(weigher, hosts, req)
        state = weigher.prepare(req)
        if reference is not None:
            want = [float(reference(h, req)) for h in hosts]
        elif both and state is not SKIP:
            want = [float(weigher.weigh(h, state)) for h in hosts]
        else:
            continue
        if got is None:
            if len(set(want)) > 1:
                raise ConformanceError(f"{weigher.name} weighs every host the same but "
                                       f"expected {want} (request {req.spec.to_primitive()})")
            continue
        for host, have, expected in zip(hosts, got, want, strict=True):
            if have != expected:
                raise ConformanceError(
                    f"{weigher.name} on {host.host}: {have!r}, expected {expected!r} "
                    f"(request {req.spec.to_primitive()})")
