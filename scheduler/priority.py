"""A request's priority and whether its instances may be preempted
(doc/source/admin/preemption.rst).

The flavor says it: ``berth:priority=<int>`` and ``berth:preemptible=true|false``
in its extra specs. A request that names no priority gets its project's
default (``[preemption] project_priorities``, else ``default_priority``). Asking
for more than ``[preemption] privileged_priority`` is an operator's decision:
the policy rule ``berth:high_priority`` says who may.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

from scheduler.exception import InvalidRequest

PRIORITY_KEY = "berth:priority"
PREEMPTIBLE_KEY = "berth:preemptible"
#: Priorities are 32-bit signed integers, as Kubernetes' are.
MIN_PRIORITY, MAX_PRIORITY = -(2 ** 31), 2 ** 31 - 1

preemption_opts = [
    cfg.BoolOpt("enabled", default=True,
                help="When a request finds no host and its caller allows preemption "
                     "(select_destinations allow_preemption, API 1.3), look for a "
                     "host where preempting instances of lower priority makes it "
                     "fit. Off: such a request fails with NoValidHost as any other."),
    cfg.IntOpt("default_priority", default=0, min=MIN_PRIORITY, max=MAX_PRIORITY,
               help="Priority of a request whose flavor has no berth:priority extra "
                    "spec and whose project has none in project_priorities."),
    cfg.DictOpt("project_priorities", default={},
                help="Default priority per project, as project_id:priority pairs, for "
                     "requests whose flavor names none, e.g. batch:-10,prod:100."),
    cfg.IntOpt("privileged_priority", default=0, min=MIN_PRIORITY, max=MAX_PRIORITY,
               help="A request may ask for a priority above this one only if the "
                    "policy rule berth:high_priority allows its caller (operators "
                    "and services by default); any caller may ask for this much or "
                    "less."),
    cfg.BoolOpt("preempt_non_preemptible", default=False,
                help="Also preempt instances whose flavor did not say "
                     "berth:preemptible=true (still only those of lower priority)."),
    cfg.IntOpt("max_victims", default=4, min=1,
               help="Instances one placement may preempt at most; a host that "
                    "needs more is not considered."),
    cfg.IntOpt("max_per_host_per_minute", default=10, min=0,
               help="Instances preempted on one host within a minute at most, "
                    "counted in the claim's transaction; 0 means no limit."),
    cfg.IntOpt("max_per_az_per_minute", default=0, min=0,
               help="Instances preempted in one availability zone within a minute at "
                    "most, counted in the claim's transaction (serialised by a lock "
                    "on the zone's aggregates); 0 means no limit."),
    cfg.IntOpt("exact_search_limit", default=12, min=1,
               help="On a host with at most this many instances that may be "
                    "preempted, every set of them is tried (fewest victims, then "
                    "least cost); on a host with more, the cheapest ones this many "
                    "are tried."),
    cfg.StrOpt("victim_cost", default="least_disruption",
               help="How victim sets are compared: an entry point name in the "
                    "berth.scheduler.preemption_costs namespace. least_disruption: "
                    "fewest victims, then the lowest priorities, then the most "
                    "recently created."),
]

cfg.CONF.register_opts(preemption_opts, group="preemption")

LIST_OPTS = [("preemption", preemption_opts)]


@dataclasses.dataclass(frozen=True, slots=True)
class Priority:
    """What a request asks: its priority (None: the project's default) and
    whether its instances may be preempted."""

    value: int | None = None
    preemptible: bool = False

    @classmethod
    def from_extra_specs(cls, specs: Mapping[str, str]) -> Priority:
        """Parse ``berth:priority`` and ``berth:preemptible``; InvalidRequest
        names the extra spec."""
        value = None
        raw = specs.get(PRIORITY_KEY)
        if raw is not None:
            field = f"flavor.extra_specs.{PRIORITY_KEY}"
            try:
                value = int(str(raw).strip(), 10)
            except ValueError:
                raise InvalidRequest(field=field,
                                     reason=f"expected an integer, got {raw!r}") from None
            if not MIN_PRIORITY <= value <= MAX_PRIORITY:
                raise InvalidRequest(field=field, reason=f"expected an integer from "
                                                         f"{MIN_PRIORITY} to {MAX_PRIORITY}")
        preemptible = False
        raw = specs.get(PREEMPTIBLE_KEY)
        if raw is not None:
            word = str(raw).strip().lower()
            if word not in ("true", "false"):
                raise InvalidRequest(field=f"flavor.extra_specs.{PREEMPTIBLE_KEY}",
                                     reason=f"expected true or false, got {raw!r}")
            preemptible = word == "true"
        return cls(value, preemptible)


    @classmethod
    def from_request(cls, data: Mapping[str, Any], specs: Mapping[str, str]) -> Priority:
        """The request's ``priority`` and ``preemptible`` fields, which mirror
        the flavor's ``berth:priority`` / ``berth:preemptible``: either form may
        be given, and where both are they must agree. InvalidRequest names the
        field."""
        flavor = cls.from_extra_specs(specs)
        value, preemptible = flavor.value, flavor.preemptible
        raw = data.get("priority")
        if raw is not None:
            if isinstance(raw, bool) or not isinstance(raw, int) \
                    or not MIN_PRIORITY <= raw <= MAX_PRIORITY:
                raise InvalidRequest(field="priority", reason=f"expected an integer from "
                                                              f"{MIN_PRIORITY} to "
                                                              f"{MAX_PRIORITY}, got {raw!r}")
            if flavor.value is not None and flavor.value != raw:
                raise InvalidRequest(field="priority", reason=(
                    f"{raw} conflicts with flavor.extra_specs.{PRIORITY_KEY}={flavor.value}"))
            value = raw
        raw = data.get("preemptible")
        if raw is not None:
            if not isinstance(raw, bool):
                raise InvalidRequest(field="preemptible",
                                     reason=f"expected true or false, got {raw!r}")
            if PREEMPTIBLE_KEY in specs and flavor.preemptible != raw:
                raise InvalidRequest(field="preemptible", reason=(
                    f"{str(raw).lower()} conflicts with flavor.extra_specs."
                    f"{PREEMPTIBLE_KEY}={str(flavor.preemptible).lower()}"))
            preemptible = raw
        return cls(value, preemptible)


def project_default(conf: cfg.ConfigOpts, project_id: str | None) -> int:
    """The priority of a request of ``project_id`` that names none."""
    opts = conf.preemption
    raw = opts.project_priorities.get(project_id or "")
    if raw is None:
        return opts.default_priority
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(field="[preemption] project_priorities",
                             reason=f"{project_id}: expected an integer, got {raw!r}") \
            from None
    return max(MIN_PRIORITY, min(MAX_PRIORITY, value))


def effective(spec, conf: cfg.ConfigOpts) -> int:
    """The priority ``spec`` places with: asked, or its project's default."""
    asked = spec.priority.value
    return project_default(conf, spec.project_id) if asked is None else asked


def needs_privilege(spec, conf: cfg.ConfigOpts) -> bool:
    """Whether ``spec`` asks for more than ``[preemption] privileged_priority``
    (then ``berth:high_priority`` must allow its caller). A project's default
    is the operator's own setting and needs none."""
    asked = spec.priority.value
    return asked is not None and asked > conf.preemption.privileged_priority
