"""The scheduler's RPC endpoint, by concept.

- ``rpc_method``: the wrapper every RPC method runs in (argument binding, the
  policy check, Berth's errors as typed replies, database outages, internal
  errors, request metrics);
- ``placement``: the compute API's calls (select_destinations, capacity,
  release, confirm, reschedule);
- ``hosts``: host reports, heartbeats and host listings;
- ``aggregates``: aggregate and availability-zone management;
- ``topics``: which methods a topic serves, and the answer to unknown ones;
- ``scoping``: the project a call acts for, from the caller's context (another
  project's instance answered as one that does not exist).

``scheduler.manager.SchedulerManager`` is the endpoint made of these areas.
Payloads are checked with ``scheduler.validation``.
"""
