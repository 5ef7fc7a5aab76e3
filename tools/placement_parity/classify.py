"""Which kind of difference a disagreement is.

Each class Berth makes on purpose is recognised from the request and, where
Berth reads the request differently, by asking Placement again with the one
thing Berth does differently changed (a *what-if*): when Placement then agrees
with Berth, that difference explains the case. The classes are documented in
doc/source/reference/placement-differences.rst.
"""
from __future__ import annotations

from tools.placement_parity.nova_request import asks_only_numbered, query

AGREE = "agree"
UNEXPLAINED = "unexplained"
INVALID = "invalid"

#: hw:cpu_thread_policy=isolate: Nova forbids HW_CPU_HYPERTHREADING, Berth does not.
ISOLATE_ON_SMT = "hw:cpu_thread_policy=isolate does not forbid HW_CPU_HYPERTHREADING"
#: A request that asks no resource class: Placement refuses the query, Berth
#: leaves the hosts to the other filters.
NOTHING_ASKED = "a request asking no resources is not refused"

#: A request of numbered groups only: Berth applies member_of and isolated
#: aggregates to the host; Placement matches each numbered group's provider
#: itself (a child is not in its root's aggregates).
NUMBERED_AGGREGATES = "aggregates of a numbered-groups-only request apply to the host"

ON_PURPOSE = frozenset({ISOLATE_ON_SMT, NOTHING_ASKED, NUMBERED_AGGREGATES})


def classify(sides, fleet: dict, request: dict, theirs, mine) -> str:
    specs = request["flavor"].get("extra_specs", {})
    if theirs == INVALID and mine != INVALID and query(fleet, request) is None:
        return NOTHING_ASKED
    if (specs.get("hw:cpu_policy") == "dedicated"
            and specs.get("hw:cpu_thread_policy") == "isolate"):
        again, _mine, _ = sides.answers(fleet, request, isolate_forbids_ht=False)
        if again == mine:
            return ISOLATE_ON_SMT
    if asks_only_numbered(request):
        again, _mine, _ = sides.answers(fleet, request, aggregates_on_host=True)
        if again == mine:
            return NUMBERED_AGGREGATES
    return UNEXPLAINED
