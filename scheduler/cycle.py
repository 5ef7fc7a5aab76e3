"""The request cycle: one request's filters, weighers and explanation over one
snapshot of the hosts.

A :class:`Cycle` takes the host columns once, when the request starts, and
every step of the request reads those same rows: filtering, weighing, the
explanation of a NoValidHost and the recheck of a host before its claim
(learned from kube-scheduler's per-cycle snapshot). The row mapping never
changes under it; row values move only as claims and releases land, and the
claim re-checks the chosen host under its lock.

Each filter is evaluated through one path, whatever form its rule takes:

* a vector filter's ``refusals`` over all rows (one numpy pass);
* a per-host filter with classes: asked once per class of hosts that are
  still candidates (its ``class_key`` codes), the answers remembered per memo
  key across requests;
* any other per-host filter: asked per candidate host.

Cheap steps run first (force/ignore, then every vector filter), then the
per-host ones on the survivors only (Nomad's stack order); the explanation
walks the filters in their configured order over the same answers, asking
what the fast order skipped. Every answer is checked against the contract in
one place (``_checked``), so a bad plugin fails the same way on every path.

The request's :class:`scheduler.deadline.Deadline` paces every loop over hosts
or classes of hosts and every step (filter or weigher): a request past its
deadline stops there, and a long one lets the other requests of its worker run.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import numpy as np
from oslo_log import log as logging

from scheduler import exception
from scheduler.deadline import Deadline
from scheduler.explanation import Explanation
from scheduler.filters import BaseHostFilter
from scheduler.host_classes import PASS, SCREENED, UNKNOWN, ClassAnswers
from scheduler.host_columns import HostColumns
from scheduler.plugins import SKIP, RequestContext
from scheduler.weights import BaseWeigher

LOG = logging.getLogger(__name__)


# -- force / ignore, as filters of their own ----------------------------------------------

class _ListedHosts(BaseHostFilter):
    """``ignore_hosts`` / ``force_hosts`` / ``force_nodes``: the request's own
    lists of host (or node) names, as the first filters of every request."""

    run_filter_once_per_request = True

    def __init__(self, field: str, by_node: bool, keep_listed: bool, reason: str) -> None:
        super().__init__(None)
        self.field, self.by_node, self.keep_listed, self.reason = \
            field, by_node, keep_listed, reason

    @property
    def name(self) -> str:
        return self.field

    def prepare(self, request):
        return getattr(request.spec, self.field) or SKIP

    def refusals(self, cols, names):
        if self.by_node:
            listed = cols.nodename_mask(names)
        else:
            listed = np.zeros(cols.n, dtype=bool)
            listed[cols.host_indexes(names)] = True
        return [(self.reason, ~listed if self.keep_listed else listed)]


REQUEST_STEPS: tuple[BaseHostFilter, ...] = (
    _ListedHosts("ignore_hosts", by_node=False, keep_listed=False, reason="host is ignored"),
    _ListedHosts("force_hosts", by_node=False, keep_listed=True, reason="not a forced host"),
    _ListedHosts("force_nodes", by_node=True, keep_listed=True, reason="not a forced node"),
)


# -- one filter's answers ----------------------------------------------------------------

VECTOR, CLASSES, PER_HOST = "vector", "classes", "per-host"


@dataclasses.dataclass(frozen=True)
class Step:
    """One filter as the cycle runs it."""

    flt: BaseHostFilter
    kind: str
    position: int               # in the configured order (request steps first)
    #: The filter's name, read once (every step of every request reports under it).
    name: str = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.flt.name)


class Plan(tuple):
    """The steps of a filter list (a tuple of :class:`Step`), with the order
    the cycle runs them in (``run_order``), worked out once."""

    run_order: tuple[Step, ...]

    def __new__(cls, steps: Sequence[Step]) -> Plan:
        self = super().__new__(cls, steps)
        self.run_order = _run_order(self)
        return self


def _run_order(steps: Sequence[Step]) -> tuple[Step, ...]:
    """Vector steps first, then the others, each group in configured order."""
    return tuple(sorted(steps, key=lambda s: (s.kind != VECTOR, s.position)))


def plan(filters: Sequence[BaseHostFilter], builtin: Sequence[BaseHostFilter] = ()
         ) -> Plan:
    """The steps of a filter list: the request's own lists, the configured
    filters in their order, then the ``builtin`` filters every request runs
    (they explain what no configured filter refused)."""
    steps = []
    for position, flt in enumerate((*REQUEST_STEPS, *filters, *builtin)):
        if flt.has_vector:
            kind = VECTOR
        elif flt.has_per_host:
            kind = CLASSES if flt.has_classes else PER_HOST
        else:
            raise exception.PluginError(
                plugin=flt.name, reason="a filter must define host_passes or refusals")
        steps.append(Step(flt, kind, position))
    return Plan(steps)


class Verdicts:
    """One step's answers for one instance of a request: per row ``UNKNOWN``,
    ``PASS`` or ``k`` for ``reasons[k - 1]``.

    A vector filter's answers are its refusal masks (``refused``: (code, mask)
    pairs, the first mask that refuses a row gives its code); the per-row codes
    are made from them when first read (``codes``): filtering reads the masks."""

    __slots__ = ("step", "state", "n", "_codes", "answers", "classed", "refused", "fresh")

    def __init__(self, step: Step, state: Any, n: int, answers: ClassAnswers,
                 classed: str | None, codes: np.ndarray | None = None,
                 refused: list[tuple[int, np.ndarray]] | None = None) -> None:
        self.step = step
        self.state = state
        self.n = n
        #: True while no row has an answer (every code UNKNOWN).
        self.fresh = codes is None and refused is None
        if codes is None and refused is None:
            codes = np.empty(n, dtype=np.int32)
            codes.fill(UNKNOWN)
        self._codes = codes
        self.answers = answers
        self.classed = classed
        #: A vector filter's (code, refused rows) pairs (empty: every row passes).
        self.refused = refused

    @property
    def codes(self) -> np.ndarray:
        codes = self._codes
        if codes is None:
            codes = self._codes = _refusal_codes(self.refused, self.n)
        return codes

    def passed(self, alive: np.ndarray | None) -> np.ndarray:
        """A vector filter's passing rows as a bool mask: ANDed into ``alive``
        (in place) when given, else a new mask."""
        for _, refused in self.refused:
            if refused.ndim == 0:           # every row refused
                if alive is None:
                    alive = np.zeros(self.n, dtype=bool)
                else:
                    alive.fill(False)
            elif alive is None:
                alive = ~refused
            else:
                np.greater(alive, refused, out=alive)      # alive and not refused
        if alive is None:
            alive = np.ones(self.n, dtype=bool)
        return alive

    @property
    def reasons(self) -> list[str]:
        return self.answers.reasons

    def reason_counts(self, codes: np.ndarray) -> dict[str, int]:
        counts = np.bincount(codes, minlength=len(self.reasons) + 1)
        return {self.reasons[k - 1]: int(c) for k, c in enumerate(counts.tolist())
                if k and c}


def _checked(flt: BaseHostFilter, reason: Any, where: str) -> str | None:
    """A reason as the contract allows it (None or a non-empty string)."""
    if reason is None or (isinstance(reason, str) and reason):
        return reason
    raise exception.PluginError(
        plugin=flt.name,
        reason=f"returned {reason!r} {where}: a filter answers None or a non-empty string")


def ask_host(flt: BaseHostFilter, host, state) -> str | None:
    """``flt.host_passes(host, state)``, held to the contract."""
    try:        # inline, not _plugin_call: this runs once per class asked
        reason = flt.host_passes(host, state)
    except exception.BerthError:
        raise
    except Exception as e:
        LOG.exception("Filter %s failed on host %s", flt.name, host.host)
        raise exception.PluginError(plugin=flt.name,
                                    reason=f"host_passes failed: {e!r}") from None
    return _checked(flt, reason, f"for host {host.host}")


def _plugin_call(flt: BaseHostFilter, what: str, call):
    """``call()``; an exception other than Berth's own is the plugin's fault:
    logged, and raised as a PluginError naming the filter and ``what`` failed."""
    try:
        return call()
    except exception.BerthError:
        raise
    except Exception as e:
        LOG.exception("Filter %s failed", flt.name)
        raise exception.PluginError(plugin=flt.name, reason=f"{what} failed: {e!r}") \
            from None


def _bool_mask(flt: BaseHostFilter, value, n: int, what: str) -> np.ndarray:
    """``value`` as a bool array of ``n`` rows (or one bool), else a PluginError
    saying ``what`` it must be."""
    mask = np.asarray(value)
    if mask.dtype != bool or mask.shape not in ((), (n,)):
        raise exception.PluginError(
            plugin=flt.name, reason=f"{what} of {n} rows, got {mask.dtype} {mask.shape}")
    return mask


def vector_verdicts(step: Step, state: Any, cols: HostColumns) -> Verdicts:
    """Every row's answer from the filter's ``refusals``: the masks that refuse
    some row, each with its code."""
    flt = step.flt
    n = cols.n
    answers = _NO_ANSWERS
    pairs = _plugin_call(flt, "refusals", lambda: list(flt.refusals(cols, state)))
    refused_by: list[tuple[int, np.ndarray]] = []
    for reason, refused in pairs:
        reason = _checked(flt, reason, "as a reason")
        if reason is None:
            raise exception.PluginError(plugin=flt.name, reason="a refusal needs a reason")
        refused = _bool_mask(flt, refused, n, "refusals must be bool masks")
        if not refused.any():
            continue            # no row refused for it: nothing to write
        if answers is _NO_ANSWERS:
            answers = ClassAnswers(0)
        if not refused.flags.owndata:
            # a view of the live columns (e.g. ``cols.disabled``), which a
            # refresh rewrites in place: the request keeps this moment's answer
            refused = refused.copy()
        refused_by.append((answers.code_of(reason), refused))
    return Verdicts(step, state, n, answers, classed=None, refused=refused_by)


#: The answers of a vector filter that refused no row: no reasons (never
#: written: its rows all pass, so nothing is asked or remembered).
_NO_ANSWERS = ClassAnswers(0)


def _refusal_codes(refused_by: list[tuple[int, np.ndarray]], n: int) -> np.ndarray:
    """Per row ``PASS`` or the code of the first mask of ``refused_by`` that
    refuses it."""
    codes = None
    for code, refused in refused_by:
        if codes is None:
            # the first refusal: the answers are new, its code is 1 (True as an
            # int), every other row passes (0)
            codes = refused.astype(np.int32) if refused.ndim else np.full(n, code, np.int32)
        elif refused.ndim == 0:
            np.copyto(codes, code, where=codes == PASS)
        else:
            np.copyto(codes, code, where=refused & (codes == PASS))
    return np.zeros(n, dtype=np.int32) if codes is None else codes


def screened_rows(flt: BaseHostFilter, state: Any, cols: HostColumns,
                  method: str = "screen") -> np.ndarray:
    """The rows ``flt.screen`` says certainly fail (or ``flt.sure_passes``
    certainly pass), held to the contract."""
    value = _plugin_call(flt, method, lambda: getattr(flt, method)(cols, state))
    mask = _bool_mask(flt, value, cols.n, f"{method} must be a bool mask")
    return np.broadcast_to(mask, (cols.n,))


def ensure_answers(v: Verdicts, cols: HostColumns, rows: np.ndarray,
                   reasons: bool = False, deadline: Deadline | None = None) -> None:
    """Fill in ``v``'s unknown answers among ``rows`` (per class, or per host);
    ``reasons``: the screened rows' too (to say why they fail). ``deadline``
    paces the loop (none: not paced, e.g. a one-host recheck under its lock)."""
    v.fresh = False
    if not len(rows):
        return
    codes = v.codes[rows]
    unknown = rows[(codes < PASS) if reasons else (codes == UNKNOWN)]
    if not len(unknown):
        return
    flt = v.step.flt
    hosts = cols.hosts
    if v.classed is not None:
        _ask_classes(v, cols, unknown, deadline)
        return
    answers = v.answers
    for r in _paced(unknown.tolist(), deadline):
        v.codes[r] = answers.code_of(ask_host(flt, hosts[r], v.state))


def passing_rows(v: Verdicts, cols: HostColumns, rows: np.ndarray,
                 deadline: Deadline | None = None) -> np.ndarray:
    """The ``rows`` that ``v``'s filter passes, asking what is not known yet
    (``ensure_answers``). Verdicts with no answer yet are asked per class
    over every row at once: no unknown codes to read first."""
    if v.fresh and v.classed is not None:
        v.fresh = False
        codes = _ask_classes(v, cols, rows, deadline)
    else:
        ensure_answers(v, cols, rows, deadline=deadline)
        codes = v.codes[rows]
    return rows[codes == PASS]


def _paced(items: list, deadline: Deadline | None):
    """``items``, paced by ``deadline`` when there is one."""
    return items if deadline is None else deadline.paced(items)


def _ask_classes(v: Verdicts, cols: HostColumns, rows: np.ndarray,
                 deadline: Deadline | None) -> np.ndarray:
    """Ask one host per class among ``rows`` and give its answer to the class;
    the answer codes of ``rows``.

    An answer is given to the class only when the host's row is current (its
    stamp equals the host's even version) and the host did not change while
    it was asked; rows still unknown after a few rounds are asked one by one.
    """
    asked = rows
    flt = v.step.flt
    column = cols.class_codes(v.classed)
    versions = cols.versions
    answers = v.answers
    hosts = cols.hosts
    for _ in range(3):
        known = answers.known(column[rows])
        v.codes[rows] = known
        todo = rows[known == UNKNOWN]
        if not len(todo):
            return known if rows is asked else v.codes[asked]
        _, first = np.unique(column[todo], return_index=True)
        for r in _paced(todo[first].tolist(), deadline):
            host = hosts[r]
            seen = host.version
            if seen % 2 or versions[r] != seen:
                continue            # changing, or the row is behind the host
            code = int(column[r])
            reason = ask_host(flt, host, v.state)
            if host.version == seen:
                answers.remember(code, reason)
        rows = todo
    for r in _paced(rows[v.codes[rows] == UNKNOWN].tolist(), deadline):
        v.codes[r] = answers.code_of(ask_host(flt, hosts[r], v.state))
    return v.codes[asked]


# -- the cycle ------------------------------------------------------------------------------

class Cycle:
    """One request over one snapshot of the host columns."""

    def __init__(self, steps: Sequence[Step], weighers: Sequence[BaseWeigher],
                 cols: HostColumns, keep: int, deadline: Deadline | None = None) -> None:
        self.steps = tuple(steps)
        self.weighers = tuple(weighers)
        self.cols = cols
        self.keep = keep
        #: The request's deadline: paces the loops and steps below.
        self.deadline = deadline or Deadline()
        #: Vector steps first, then the others, each group in configured order.
        self._run_order = steps.run_order if isinstance(steps, Plan) else \
            _run_order(self.steps)
        #: position -> Verdicts (or SKIP) of the current instance; once-per-request
        #: steps keep the first instance's.
        self._verdicts: dict[int, Any] = {}
        self._index = -1
        self._own_copy = False
        #: Seconds spent in each filter / weigher by this request (for metrics).
        self.filter_seconds: dict[str, float] = {}
        self.weigher_seconds: dict[str, float] = {}

    # -- per instance -----------------------------------------------------------
    def start_instance(self, request: RequestContext, again: bool = False) -> None:
        """Forget the previous instance's answers (but the once-per-request ones);
        ``again``: this instance starts over (its world changed)."""
        self.deadline.index = request.index
        if again or request.index != self._index:
            self._index = request.index
            self._verdicts = {p: v for p, v in self._verdicts.items()
                              if self.steps[p].flt.run_filter_once_per_request}

    def verdicts(self, step: Step, request: RequestContext):
        """The step's answers for this instance (``SKIP`` when it passes every host)."""
        v = self._verdicts.get(step.position)
        if v is None:
            v = self._verdicts[step.position] = self._new_verdicts(step, request, self.cols)
        return v

    def _new_verdicts(self, step: Step, request: RequestContext, cols: HostColumns):
        flt = step.flt
        state = flt.prepare(request)
        if state is SKIP:
            return SKIP
        if step.kind == VECTOR:
            return vector_verdicts(step, state, cols)
        which = flt.class_for(state) if step.kind == CLASSES else None
        if which is not None:
            column = flt.class_column(which)
            memo = flt.memo_key(state)
            if memo is not None:
                answers = cols.classes.answers(column, memo)
            else:
                answers = ClassAnswers(cols.classes.size(column))
            v = Verdicts(step, state, cols.n, answers, classed=column)
        else:
            v = Verdicts(step, state, cols.n, ClassAnswers(0), classed=None)
        if flt.has_screen:
            v.fresh = False
            v.codes[screened_rows(flt, state, cols)] = SCREENED
        if flt.has_sure_passes:
            v.fresh = False
            sure = screened_rows(flt, state, cols, method="sure_passes")
            v.codes[sure & (v.codes == UNKNOWN)] = PASS
        return v

    # -- filtering -----------------------------------------------------------------
    def candidates(self, request: RequestContext) -> tuple[np.ndarray, dict[str, int]]:
        """Rows passing every filter, and how many rows each step removed (in
        the order they ran, for the log).

        Which rows pass does not depend on the order, so the vector steps run
        first, then the others cheapest first: fewest host classes (a class is
        one check), per-host ones last; each asks only the rows still alive.
        """
        self.start_instance(request)
        n = self.cols.n
        removed: dict[str, int] = {}
        alive: np.ndarray | None = None
        asked = []
        left = n
        seconds = self.filter_seconds
        deadline = self.deadline
        for step in _timed(self._run_order, seconds):
            deadline.pace()
            v = self.verdicts(step, request)
            if v is SKIP:
                continue
            if step.kind != VECTOR:
                asked.append(v)
                continue
            if left == 0:
                break
            if not v.refused:
                removed[step.name] = 0
                continue
            alive = v.passed(alive)
            now = int(np.count_nonzero(alive))
            removed[step.name] = left - now
            left = now
        rows = np.arange(n) if alive is None else np.flatnonzero(alive)
        classes = self.cols.classes
        asked.sort(key=lambda v: n if v.classed is None else classes.size(v.classed))
        for v in asked:
            if left == 0:
                break
            started = perf_counter()
            rows = passing_rows(v, self.cols, rows, deadline)
            name = v.step.name
            seconds[name] = seconds.get(name, 0.0) + perf_counter() - started
            removed[v.step.name] = left - len(rows)
            left = len(rows)
        return rows, removed

    def explain(self, request: RequestContext) -> Explanation:
        """Why hosts were removed, filter by filter in the configured order."""
        self.start_instance(request)
        explanation = Explanation(self.cols.n)
        alive = np.ones(self.cols.n, dtype=bool)
        for step in self.steps:
            rows = np.flatnonzero(alive)
            if not len(rows):
                break
            self.deadline.pace()
            v = self.verdicts(step, request)
            if v is SKIP:
                continue
            ensure_answers(v, self.cols, rows, reasons=True, deadline=self.deadline)
            codes = v.codes[rows]
            refused = codes > PASS
            if refused.any():
                explanation.add(step.name, v.reason_counts(codes[refused]))
                alive[rows[refused]] = False
        return explanation

    def recheck(self, request: RequestContext, host) -> str | None:
        """Run every filter on ``host`` as it is now (a one-row snapshot of it;
        the caller holds the host's lock): None, or ``"Filter: reason"`` of the
        first that refuses."""
        cols = self.cols
        row = cols.row_of_node.get(host.node_id)
        if row is not None and cols.hosts[row] is host and cols.versions[row] == host.version:
            # the row was written from this host as it is now (every change of
            # a host rewrites its row, stamped last), and it cannot change while
            # its lock is held: read it where it is
            one = cols.one_row(row)
        else:
            one = HostColumns([host], cols.classes)
        rows = np.zeros(1, dtype=np.intp)
        for step in self._run_order:
            v = self._new_verdicts(step, request, one)
            if v is SKIP:
                continue
            if step.kind == VECTOR:
                # every mask it kept refuses some row, so this one row; the
                # first one's code is the row's
                if v.refused:
                    return f"{step.name}: {v.reasons[v.refused[0][0] - 1]}"
                continue
            ensure_answers(v, one, rows, reasons=True)
            code = int(v.codes[0])
            if code != PASS:
                return f"{step.name}: {v.reasons[code - 1]}"
        return None

    # -- dry runs -------------------------------------------------------------------
    def overlay(self, row: int, host) -> None:
        """Show ``host`` (a what-if copy) at ``row`` for the rest of this request,
        without touching the shared columns."""
        if not self._own_copy:
            self.cols = self.cols.copy()
            self._own_copy = True
        self.cols.update(row, host)

    # -- weighing ---------------------------------------------------------------------
    def weigh(self, request: RequestContext, rows: np.ndarray) -> list[tuple[float, Any]]:
        """(total weight, host) of the hosts at ``rows``, best first (stable for
        equal weights); only the best few are sorted up front."""
        cols = self.cols
        hosts = cols.hosts
        n = len(rows)
        # The running sum; until a weigher adds to it, 0.0 for every host (the
        # first adds to the number 0.0 into its own array: no zeros to write).
        totals: Any = 0.0
        summed = False          # whether totals is an array (a weigher added to it)
        if n > 1:
            deadline = self.deadline
            for w in _timed(self.weighers, self.weigher_seconds):
                deadline.pace()
                multiplier = weigh_multiplier(w, cols, rows)
                per_row = isinstance(multiplier, np.ndarray)
                if not per_row and multiplier == 0.0:
                    continue        # adds 0 × weight to every host
                state = w.prepare(request)
                if state is SKIP:
                    continue
                raw = _gathered_weights(w, state, cols, rows, deadline)
                if raw is None:
                    continue        # the same weight everywhere: normalises to 0
                lo, hi = _weight_range(w, raw)
                if hi == lo:
                    continue
                # (raw - lo) / (hi - lo) * multiplier, in place.
                np.subtract(raw, lo, out=raw)
                np.divide(raw, hi - lo, out=raw)
                out = totals if summed else raw
                summed = True
                if not per_row and multiplier in (1.0, -1.0):
                    # x * 1.0 is x and t + (-1.0 * x) is t - x, exactly: one pass less.
                    totals = (np.add if multiplier > 0 else np.subtract)(totals, raw, out=out)
                    continue
                np.multiply(multiplier, raw, out=raw)
                totals = np.add(totals, raw, out=out)
        if not summed:
            totals = np.zeros(n, dtype=np.float64)
        keep = self.keep
        if n > 4 * keep:
            kth = _kth_largest(totals, keep)
            top = np.flatnonzero(totals >= kth)
            order = top[np.argsort(-totals[top], kind="stable")]
            head = [(float(totals[k]), hosts[rows[k]]) for k in order.tolist()]
            return LazyWeighed(head, totals, rows, hosts, set(order.tolist()))
        order = np.argsort(-totals, kind="stable")
        return [(float(totals[k]), hosts[rows[k]]) for k in order.tolist()]


def _timed(plugins, seconds: dict[str, float]):
    """Iterate over ``plugins`` (filters' steps or weighers), adding the time the
    caller spends on each to ``seconds[name]`` (one perf_counter pair each)."""
    for plugin in plugins:
        started = perf_counter()
        yield plugin
        seconds[plugin.name] = seconds.get(plugin.name, 0.0) + perf_counter() - started


def weigh_multiplier(w: BaseWeigher, cols: HostColumns, rows: np.ndarray):
    """The weigher's multiplier per candidate (one number when the same for
    all): the configured one, or the smallest finite override in the host's
    aggregates' metadata."""
    base = w.base_multiplier()
    if not w.aggregate_multiplier_key:
        return base
    values, present = cols.aggregate_min(w.aggregate_multiplier_key)
    if not present.any():
        return base             # no aggregate overrides it (cheaper than gathering)
    present = present[rows]
    if not present.any():
        return base
    return np.where(present, values[rows], base)


def raw_weights(w: BaseWeigher, state: Any, cols: HostColumns, rows: np.ndarray,
                deadline: Deadline | None = None) -> np.ndarray | None:
    """The weigher's raw weights of ``rows`` as a new float64 array, or None when
    every host weighs the same (a per-host weigher paced by ``deadline``)."""
    raw = _gathered_weights(w, state, cols, rows, deadline)
    if raw is not None and len(raw):
        _weight_range(w, raw)
    return raw


def _gathered_weights(w: BaseWeigher, state: Any, cols: HostColumns, rows: np.ndarray,
                      deadline: Deadline | None) -> np.ndarray | None:
    """``raw_weights`` before the finite check (``_weight_range`` makes it)."""
    n = len(rows)
    try:
        if w.has_vector:
            vec = w.weigh_vector(cols, state)
            if isinstance(vec, int | float):
                return None
            vec = np.asarray(vec)
            if vec.shape != (cols.n,):
                raise exception.PluginError(
                    plugin=w.name, reason=f"weigh_vector must return {cols.n} weights, "
                                          f"got shape {vec.shape}")
            if vec.dtype != np.float64:         # e.g. a plugin's int column
                vec = vec.astype(np.float64)
            # rows are valid indexes: 'clip' only skips the bounds checks.
            return np.take(vec, rows, mode="clip")
        hosts = cols.hosts
        return np.fromiter((w.weigh(hosts[i], state)
                            for i in _paced(rows.tolist(), deadline)),
                           dtype=np.float64, count=n)
    except exception.BerthError:
        raise
    except Exception as e:
        LOG.exception("Weigher %s failed", w.name)
        raise exception.PluginError(plugin=w.name, reason=f"weighing failed: {e!r}") \
            from None


def _weight_range(w: BaseWeigher, raw: np.ndarray) -> tuple[float, float]:
    """(smallest, largest) of ``raw`` (not empty); a PluginError unless every
    weight is finite. min and max carry a NaN or an infinity to the result, so
    the two reductions the normalisation needs are the check as well."""
    lo, hi = raw.min(), raw.max()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise exception.PluginError(plugin=w.name, reason="weights must be finite numbers")
    return lo, hi


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of ``values`` (exactly), without partitioning all of them.

    The k-th largest of a strided sample is a lower bound of the true one (the
    sample's top k are values too), so every value at or above the true k-th
    is among those at or above the bound: a few dozen to partition instead of
    every candidate.
    """
    n = len(values)
    sample = values[::16]
    if len(sample) > k:
        bound = np.partition(sample, len(sample) - k)[len(sample) - k]
        values = values[values >= bound]
        n = len(values)
    return np.partition(values, n - k)[n - k]


class LazyWeighed(list):
    """The best few (weight, host) pairs, sorted; the rest are sorted only if
    every one of those is refused (claims racing with other schedulers)."""

    def __init__(self, head, totals, rows, hosts, taken) -> None:
        super().__init__(head)
        self._totals, self._rows, self._hosts, self._taken = totals, rows, hosts, taken

    @property
    def complete(self) -> bool:
        return self._totals is None

    def extend_all(self) -> None:
        if self._totals is None:
            return
        totals = self._totals
        left = np.ones(len(totals), dtype=bool)
        left[list(self._taken)] = False
        rest = np.flatnonzero(left)
        if len(rest):
            order = rest[np.argsort(-totals[rest], kind="stable")]
            self.extend((float(totals[i]), self._hosts[self._rows[i]]) for i in order)
        self._totals = None
