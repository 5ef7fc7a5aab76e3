"""Shared shape of the filters that cap a per-host count (instances, I/O ops).

A subclass names the count (``column`` of HostColumns), the ``[filter_scheduler]``
option holding the limit and the reason text; ``AggregateLimit`` lets aggregate
metadata (the key named like the option, smallest finite value, truncated to an
integer) override the limit per host.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters import BaseHostFilter


class CountLimitFilter(BaseHostFilter):
    """Removes hosts whose ``column`` count has reached the limit."""

    column: str = ""
    option: str = ""
    reason: str = ""        # e.g. "max instances per host reached ({limit})"

    def prepare(self, request) -> int:
        """The configured limit."""
        return getattr(request.conf.filter_scheduler, self.option)

    def limits(self, cols, limit: int):
        """The limit per row (an array), or one number for every row."""
        return limit

    def refusals(self, cols, limit: int):
        counts = getattr(cols, self.column)
        per_row = self.limits(cols, limit)
        if np.isscalar(per_row):
            return [(self.reason.format(limit=int(per_row)), counts >= per_row)]
        refused = counts >= per_row
        values = np.unique(per_row[refused]).tolist()
        if len(values) <= 1:
            return [(self.reason.format(limit=int(values[0] if values else limit)), refused)]
        # One reason per distinct limit among the refused rows (the text names it).
        return [(self.reason.format(limit=int(value)), refused & (per_row == value))
                for value in values]


class AggregateLimit:
    """Mixin: the limit from aggregate metadata named like the option (the
    smallest finite value, truncated), else the configured one."""

    def limits(self, cols, limit: int):
        values, present = cols.aggregate_min(self.option)
        if not present.any():
            return limit
        return np.where(present, np.trunc(values), limit)
