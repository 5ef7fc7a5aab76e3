"""Which project a call acts for, checked from the caller's request context
before anything else (``scheduler.policy``'s rules, ``berth:<method>``).

A request to place instances is its project's (``request_project``): a caller
may send one for its own project, or for any project when the rules let it (an
operator, a service); a request that names none is the caller's.

A call that names instances (release, reschedule, confirm, moves) acts on them
as the caller may see them (``Scope``): an instance of another project the
rules refuse the caller is replaced, before the call runs, by a fresh UUID that
holds nothing. The call then does exactly what it does for an instance that
does not exist — the same queries, the same reply, in the same time — and the
reply names the UUIDs the caller gave. A refusal on the caller's own project
(an instance that holds nothing counts as the caller's) is ``Forbidden``
naming the rule.
"""
from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

from db import claims, transitions
from scheduler import exception


def _caller_project(ctxt) -> str | None:
    return getattr(ctxt, "project_id", None) or None


def request_project(policy, ctxt, method: str, project_id: str | None) -> str | None:
    """The project a request of ``method`` is placed for: ``project_id`` when
    the caller may act for it, the caller's own when the request names none;
    Forbidden naming the rule otherwise (a caller without a project acts for
    no project)."""
    if not policy.enabled:
        return project_id
    if project_id is None:
        project_id = _caller_project(ctxt)
    policy.authorize(ctxt, method, {"project_id": project_id})
    return project_id


def claims_project(policy, ctxt, method: str):
    """The project whose claims a call of ``method`` may act on, for calls that
    read the owner in their own statement (``db.claims.confirm``):
    ``claims.ANY_PROJECT`` when the rules let the caller act on other projects,
    else the caller's own (None: no project). Forbidden when refused on its
    own project, as ``scope``."""
    if not policy.enabled:
        return claims.ANY_PROJECT
    mine = _caller_project(ctxt)
    policy.authorize(ctxt, method, {"project_id": mine})
    if policy.allows(ctxt, method, {"project_id": ANOTHER_PROJECT}):
        return claims.ANY_PROJECT
    return mine


class Scope:
    """The instance UUIDs a caller gave, and the ones its call acts on."""

    def __init__(self, used: dict[str, str]) -> None:
        self._used = used
        self._given = {u: g for g, u in used.items() if u != g}

    def __getitem__(self, given: str) -> str:
        return self._used[given]

    def used(self, given: Sequence[str]) -> list[str]:
        return [self._used[g] for g in given]

    def given(self, used: Sequence[str]) -> list[str]:
        return [self._given.get(u, u) for u in used]

    def error(self, error: exception.BerthError) -> exception.BerthError:
        """``error`` naming the UUIDs the caller gave."""
        if not self._given:
            return error
        return type(error)(**{k: self._named(v) for k, v in error.kwargs.items()})

    def _named(self, value: Any) -> Any:
        if isinstance(value, str):
            for used, given in self._given.items():
                value = value.replace(used, given)
            return value
        if isinstance(value, list):
            return [self._named(v) for v in value]
        return value


#: The target of "an instance of another project": no caller's project (a
#: context's ids never hold a control character: ``scheduler.rpc``).
ANOTHER_PROJECT = "\x00another project"


def scope(db, policy, ctxt, method: str, instance_uuids: Sequence[str]) -> Scope:
    """The instances of one call as the caller may act on them (this module's
    docstring). The rules are asked twice whatever the instances are — for the
    caller's own project, and for another project — then two queries read the
    instances' projects (those that hold something, and those whose last
    transition is remembered): the work does not depend on whose they are. (A rule
    that lets a caller act on some other projects and not on others is read as
    its answer for a project that is not the caller's.)"""
    if not policy.enabled:
        return Scope({u: u for u in instance_uuids})
    mine = _caller_project(ctxt)
    # refused on its own project, the caller is refused whatever it names
    policy.authorize(ctxt, method, {"project_id": mine})
    any_project = policy.allows(ctxt, method, {"project_id": ANOTHER_PROJECT})
    owners = claims.projects_of(db, instance_uuids)
    # an instance released, rescheduled or moved away within [scheduler]
    # transition_ttl is still its project's: a call sent again is answered
    # from that memory (db.transitions), and only for that project
    remembered = transitions.projects_of(db, instance_uuids)
    for given, project in remembered.items():
        owners.setdefault(given, project)
    used: dict[str, str] = {}
    for given in instance_uuids:
        own = given not in owners or (mine is not None and owners[given] == mine)
        used[given] = given if own or any_project else str(uuidlib.uuid4())
    return Scope(used)
