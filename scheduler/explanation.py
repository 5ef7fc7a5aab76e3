"""Why a request fits nowhere: hosts removed per filter, grouped by reason.

``summary`` is the structured form carried by ``NoValidHost`` (``{"hosts": N,
"available": 0, "filters": [{"filter": name, "removed": n, "reasons": {text:
n}}]}``, filters in the configured order); ``text`` the one line people read,
e.g. ``0/1200 hosts available: 800 RamFilter (insufficient RAM: need 8192 MB),
400 AvailabilityZoneFilter (not in az2)``.
"""
from __future__ import annotations

import collections
from collections.abc import Mapping


class Explanation:
    """Per filter: how many hosts it removed and why."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.removed: dict[str, collections.Counter] = {}

    def add(self, filter_name: str, reasons: Mapping[str, int]) -> None:
        """Count ``reasons`` (text -> hosts) against ``filter_name``."""
        if any(reasons.values()):
            counter = self.removed.setdefault(filter_name, collections.Counter())
            for reason, count in reasons.items():
                if count:
                    counter[reason] += count

    def summary(self, available: int = 0) -> dict:
        return {"hosts": self.total, "available": available,
                "filters": [{"filter": name, "removed": sum(c.values()),
                             "reasons": dict(c.most_common())}
                            for name, c in self.removed.items()]}

    @staticmethod
    def text(summary: Mapping) -> str:
        parts = []
        for f in summary["filters"]:
            reasons = f["reasons"]
            if len(reasons) == 1:
                detail = next(iter(reasons))
            else:
                detail = ", ".join(f"{n} {r}" for r, n in reasons.items())
            parts.append(f"{f['removed']} {f['filter']} ({detail})")
        head = f"{summary['available']}/{summary['hosts']} hosts available"
        return head + (": " + ", ".join(parts) if parts else "")
