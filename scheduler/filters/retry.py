"""RetryFilter: Nova's name for "don't retry on a host that already failed this
instance", kept so that Nova ``enabled_filters`` lines load unchanged.

Berth applies that rule without this filter: ``reschedule(instance, failed_host)``
adds the failed host to the instance's ``ignore_hosts`` (kept with its
allocation, so every host that failed it stays excluded on later reschedules),
and ``ignore_hosts`` is the first step of every request. Enabled or not, the
answers are the same; the NoValidHost explanation names ``ignore_hosts``.
"""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter


class RetryFilter(BaseHostFilter):
    """Passes every host: the rule it names is the request's ``ignore_hosts`` step."""

    run_filter_once_per_request = True

    def prepare(self, request):
        return SKIP

    def host_passes(self, host, state) -> str | None:
        return None
