"""``capacity`` with ``preempting``: how many more instances of a request fit
if every instance it may preempt were gone (counted on what-if copies, nothing
claimed or preempted)."""
from __future__ import annotations

import uuid

from scheduler import capacity
from tests.unit.scheduler import test_preemption as base

conf = base.conf        # the fixture
U = [str(uuid.UUID(int=i + 1)) for i in range(40)]


def test_capacity_counts_what_fits_if_preemptible_instances_were_gone(any_db, conf):
    sched = base._world(any_db, conf, names=("a", "b"), vcpus=4)
    base._boot(sched, U[0], vcpus=2, preemptible=True, host="a")
    base._boot(sched, U[1], vcpus=2, preemptible=True, host="a", priority=5)
    base._boot(sched, U[2], vcpus=2, host="b")
    base._boot(sched, U[3], vcpus=2, preemptible=True, host="b")
    requests = capacity.parse_requests(
        {"flavor": {"name": "hi", "vcpus": 2, "memory_mb": 512, "root_gb": 1,
                    "extra_specs": {"berth:priority": "3"}}}, sched.parse_request)
    [row] = capacity.capacity(sched, requests, preempting=True)
    # a: 2 vCPUs of priority 0 may go (not those of priority 5); b: 2 preemptible
    assert row["fits"] == 0 and row["fits_preempting"] == 2
    assert "PREEMPTING" in capacity.format_capacity([row])
    # nothing was claimed or preempted
    assert set(base._types(any_db).values()) == {"instance"}
    [plain] = capacity.capacity(sched, requests)
    assert "fits_preempting" not in plain
