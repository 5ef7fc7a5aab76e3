"""Profiles of the fuzz suite (issue 15, part 5).

``default`` (what ``tox -e py3`` runs): about 10,000 generated payloads over the
whole suite in well under two minutes. ``BERTH_TEST_FUZZ=thorough`` multiplies
every test's examples by ten (``BERTH_TEST_FUZZ_SCALE=N`` by N, e.g. 0.1 while iterating).

Outside CI every run draws new payloads (that is how the suite keeps finding
cases); under ``CI=true`` the draw is derandomized, so the gate is the same on
every clean clone and a red CI is reproducible with ``CI=true tox -e py3``.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = float(os.environ.get("BERTH_TEST_FUZZ_SCALE")
            or (10 if os.environ.get("BERTH_TEST_FUZZ") == "thorough" else 1))

#: CI=true (or 1, yes): the same draw on every clean clone.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

settings.register_profile(
    "berth-fuzz", deadline=None, derandomize=IN_CI, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


def examples(n: int) -> settings:
    """``n`` examples in the default profile, ``n * SCALE`` with the flag."""
    return settings(settings.get_profile("berth-fuzz"), max_examples=max(1, int(n * SCALE)))
