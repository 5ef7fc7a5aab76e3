"""Equivalence classes of hosts, and the answers remembered per class.

A filter with a ``class_key(host)`` says which attributes its answer depends
on; hosts whose keys are equal form one class (Nomad's computed node classes).
``HostClasses`` interns each key to a small integer code (kept per row in the
host columns, recomputed only when a host changes) and holds, per filter and
memo key, the answer of every class asked so far. Answers are keyed by what
they depend on — the class's content and the request's memo key — never by
which host or request asked, so they stay true until evicted.

Codes only grow; when there are many more codes than hosts (hosts changed
state many times), the owner builds fresh columns with a new ``HostClasses``
(``HostColumns.recoded``) and the old one is dropped with its answers.
"""
from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable

import numpy as np

from scheduler import exception

UNKNOWN = -1
PASS = 0
#: A verdict code only (never a class answer): refused by the filter's screen,
#: reason not asked yet.
SCREENED = -2

#: (filter name, memo key) entries of remembered answers kept at most.
MAX_MEMOS = 256


class ClassAnswers:
    """One filter's answers for one memo key: per class code, ``UNKNOWN``,
    ``PASS`` or ``k`` for ``reasons[k - 1]``."""

    __slots__ = ("codes", "reasons", "_index")

    def __init__(self, size: int) -> None:
        self.codes = np.empty(max(size, 16), dtype=np.int32)
        self.codes.fill(UNKNOWN)
        self.reasons: list[str] = []
        self._index: dict[str, int] = {}

    def ensure(self, size: int) -> None:
        """Room for codes below ``size``."""
        if size > len(self.codes):
            grown = np.full(max(size, 2 * len(self.codes)), UNKNOWN, dtype=np.int32)
            grown[:len(self.codes)] = self.codes
            self.codes = grown

    def known(self, codes: np.ndarray) -> np.ndarray:
        """The answers of the classes ``codes`` (``UNKNOWN`` where none yet).
        Classes get codes while requests run (another request's claim writes a
        host's row with a new class): a code handed out since the last
        ``ensure`` is made room for here."""
        while True:
            try:
                return self.codes[codes]
            except IndexError:
                self.ensure(int(np.max(codes)) + 1)

    def remember(self, code: int, reason: str | None) -> None:
        """Class ``code``'s answer is ``reason`` (None: passes)."""
        self.ensure(code + 1)
        self.codes[code] = self.code_of(reason)

    def code_of(self, reason: str | None) -> int:
        """The answer code of a checked reason (``None`` passes)."""
        if reason is None:
            return PASS
        code = self._index.get(reason)
        if code is None:
            self.reasons.append(reason)
            code = self._index[reason] = len(self.reasons)
        return code


class HostClasses:
    """Class keys by name, their interned codes and the remembered answers."""

    def __init__(self) -> None:
        self._key_fns: dict[str, Callable] = {}
        self._codes: dict[str, dict[Hashable, int]] = {}
        self._memos: collections.OrderedDict = collections.OrderedDict()
        self._new_code = threading.Lock()

    def register(self, name: str, key_fn: Callable) -> None:
        """Make ``name`` a class column computed by ``key_fn(host)``."""
        self._key_fns[name] = key_fn
        self._codes.setdefault(name, {})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._key_fns)

    def key_fns(self) -> dict[str, Callable]:
        return dict(self._key_fns)

    def key(self, name: str, host) -> Hashable:
        """``host``'s class key for ``name`` (a plugin error is a ``PluginError``)."""
        try:
            key = self._key_fns[name](host)
            hash(key)
        except Exception as e:
            raise exception.PluginError(plugin=name, reason=f"class_key failed: {e!r}") \
                from None
        return key

    def code(self, name: str, key: Hashable) -> int:
        """The code of ``key`` (a new one for a key never seen)."""
        codes = self._codes[name]
        code = codes.get(key)
        if code is None:
            # Two threads (threading backend) naming new keys at once must not
            # get one code: setdefault is atomic, len() before it is not.
            with self._new_code:
                code = codes.setdefault(key, len(codes))
        return code

    def size(self, name: str) -> int:
        """How many codes ``name`` has handed out."""
        return len(self._codes[name])

    def answers(self, name: str, memo_key: Hashable) -> ClassAnswers:
        """The remembered answers of filter ``name`` for ``memo_key``."""
        key = (name, memo_key)
        entry = self._memos.get(key)
        if entry is None:
            entry = self._memos[key] = ClassAnswers(self.size(name))
            if len(self._memos) > MAX_MEMOS:
                self._memos.popitem(last=False)
        else:
            self._memos.move_to_end(key)
        entry.ensure(self.size(name))
        return entry
