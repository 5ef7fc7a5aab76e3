"""Why Berth and Nova answer a filter case differently: one rule per known cause.

A rule names the filter (or ``*``), a label, a category and two functions:
``applies(case, host, berth, nova)`` says whether the cause is present in the
case (``host`` is the case's host dict, ``berth``/``nova`` the two answers), and
``without(case)`` returns the case with that cause taken away (one host), on
which the two must then agree: a rule explains a disagreement only when its
cause is present *and* removing it removes the disagreement. The documented
differences are in doc/source/reference/filters-nova.rst, each with an example.
"""
from __future__ import annotations

import copy

NOVA_BUG = "Nova bug"
DOCUMENTED = "documented"
BERTH_BUG = "Berth bug"

#: Capability names Berth answers (scheduler.filters.compute_capabilities) that
#: Nova's HostState has no attribute for (Nova fails the host, or ignores the
#: unscoped key).
BERTH_ONLY_CAPABILITIES = frozenset({"vcpus", "free_vcpus", "memory_mb", "memory_mb_used",
                                     "local_gb", "availability_zone"})
_INSTANCE_PROPS = ("hw_architecture", "architecture", "img_hv_type", "hypervisor_type",
                   "hw_vm_mode", "vm_mode")
_CHECKED_PROPS = ("img_hv_requested_version", "hypervisor_version_requires",
                  "hw_maxphysaddr_bits")


def _one(case: dict, host: dict) -> dict:
    out = copy.deepcopy(case)
    out["hosts"] = [copy.deepcopy(host)]
    return out


def _specs(case: dict) -> dict:
    return case["request"]["flavor"].get("extra_specs") or {}


def _props(case: dict) -> dict:
    return (case["request"].get("image") or {}).get("properties") or {}


def _query(case: dict) -> str:
    return (case["request"].get("scheduler_hints") or {}).get("query", "")


def _drop_specs(case, host, test):
    out = _one(case, host)
    specs = out["request"]["flavor"]["extra_specs"]
    for key in [k for k in specs if test(k)]:
        del specs[key]
    return out


def _drop_props(case, host, names):
    out = _one(case, host)
    props = out["request"]["image"]["properties"]
    for key in names:
        props.pop(key, None)
    return out


# -- causes -----------------------------------------------------------------------------

def _ledger_spec(key: str) -> bool:
    return key.startswith(("resources", "trait"))


def _berth_only_capability(key: str) -> bool:
    path = key.split(":")
    if len(path) == 1:
        return path[0] in BERTH_ONLY_CAPABILITIES
    return path[0] == "capabilities" and path[1] in BERTH_ONLY_CAPABILITIES


def _future_heartbeat(case, host, berth, nova):
    down = case["conf"].get("DEFAULT", {}).get("service_down_time", 60)
    return host["heartbeat_age"] < -down and not host["disabled"]


def _now_heartbeat(case, host):
    out = _one(case, host)
    out["hosts"][0]["heartbeat_age"] = 0
    return out


def _invalid_aggregate_number(key):
    def applies(case, host, berth, nova):
        for agg in host["aggregates"]:
            value = agg.get(key)
            if value is not None:
                try:
                    int(value)
                except ValueError:
                    return True
        return False

    def without(case, host):
        out = _one(case, host)
        for agg in out["hosts"][0]["aggregates"]:
            value = agg.get(key)
            if value is not None:
                try:
                    int(value)
                except ValueError:
                    del agg[key]
        return out
    return applies, without


def _empty_tenant(case, host, berth, nova):
    return berth is None and any(
        k.startswith("filter_tenant_id") and any(not v.strip() for v in value.split(","))
        for agg in host["aggregates"] for k, value in agg.items())


def _without_empty_tenant(case, host):
    out = _one(case, host)
    for agg in out["hosts"][0]["aggregates"]:
        for k in [k for k, v in agg.items() if k.startswith("filter_tenant_id")]:
            kept = ",".join(v for v in agg[k].split(",") if v.strip())
            if kept:
                agg[k] = kept
            else:
                del agg[k]
    return out


def _nova_raised(text: str):
    return lambda case, host, berth, nova: nova.startswith("raise") and text in nova


def _checks_without_instance_props(case, host, berth, nova):
    props = _props(case)
    return berth is not None and nova == "pass" and \
        not any(props.get(k) for k in _INSTANCE_PROPS) and \
        any(props.get(k) for k in _CHECKED_PROPS)


def _without_query(case, host):
    out = _one(case, host)
    out["request"]["scheduler_hints"] = {}
    return out


RULES = [
    ("*", "Berth refuses a malformed resources:/trait: extra spec up front", DOCUMENTED,
     lambda case, host, berth, nova: isinstance(berth, str) and berth.startswith(
         ("invalid: flavor.extra_specs.resources", "invalid: flavor.extra_specs.trait")),
     lambda case, host: _drop_specs(case, host, _ledger_spec)),
    ("ComputeFilter", "a heartbeat stamped in the future: Berth up, Nova down", DOCUMENTED,
     _future_heartbeat, _now_heartbeat),
    ("ComputeCapabilitiesFilter",
     "Berth's own capability names (vcpus, memory_mb, local_gb...) Nova's HostState lacks",
     DOCUMENTED,
     lambda case, host, berth, nova: any(_berth_only_capability(k) for k in _specs(case)),
     lambda case, host: _drop_specs(case, host, _berth_only_capability)),
    ("AggregateIoOpsFilter",
     "one aggregate value not a number: Berth takes the smallest valid one, Nova the option",
     DOCUMENTED, *_invalid_aggregate_number("max_io_ops_per_host")),
    ("AggregateNumInstancesFilter",
     "one aggregate value not a number: Berth takes the smallest valid one, Nova the option",
     DOCUMENTED, *_invalid_aggregate_number("max_instances_per_host")),
    ("AggregateMultiTenancyIsolation",
     "an empty filter_tenant_id value: Berth ignores it, Nova reserves the host for ''",
     DOCUMENTED, _empty_tenant, _without_empty_tenant),
    ("ImagePropertiesFilter",
     "Nova reads cpu_info (JSON text) as a dict for hw_maxphysaddr_bits and raises",
     NOVA_BUG, _nova_raised("'str' object has no attribute 'get'"),
     lambda case, host: _drop_props(case, host, ["hw_maxphysaddr_bits"])),
    ("ImagePropertiesFilter",
     "version/address bits asked without arch, hypervisor type or VM mode: Berth checks "
     "them, Nova ignores them", DOCUMENTED, _checks_without_instance_props,
     lambda case, host: _drop_props(case, host, _CHECKED_PROPS)),
    ("JsonFilter", "Berth refuses a malformed query up front", DOCUMENTED,
     lambda case, host, berth, nova: isinstance(berth, str) and berth.startswith(
         "invalid: scheduler_hints.query"), _without_query),
    ("JsonFilter", "Nova raises on $metrics.<name> (a MonitorMetricList has no get)",
     NOVA_BUG, _nova_raised("'MonitorMetricList' object has no attribute 'get'"),
     _without_query),
    ("JsonFilter", "Nova raises on $cpu_info.<key> (cpu_info is JSON text)", NOVA_BUG,
     _nova_raised("'str' object has no attribute 'get'"), _without_query),
    ("JsonFilter", "Nova raises comparing a numeric stats string with a number", NOVA_BUG,
     lambda case, host, berth, nova: nova.startswith("raise: TypeError")
     and "$stats." in _query(case), _without_query),
    ("JsonFilter", "Nova's $host_ip is an address object, never equal to the query's text",
     NOVA_BUG, lambda case, host, berth, nova: berth is None and nova == "fail"
     and "$host_ip" in _query(case), _without_query),
]


def candidates(case: dict, index: int, berth, nova: str) -> list[tuple]:
    """The rules whose cause is present, in order."""
    host = case["hosts"][index]
    return [rule for rule in RULES
            if rule[0] in ("*", case["filter"]) and rule[3](case, host, berth, nova)]


def unexplained(case: dict, berth, nova: str) -> str:
    b = "passes" if berth is None else ("invalid request" if berth.startswith("invalid")
                                        else "refuses")
    n = nova if nova in ("pass", "fail") else "raises " + nova.split(":")[1].strip()
    return f"unexplained: Berth {b}, Nova {n}"


#: Image properties Nova's ImageMetaProps has no field for: its
#: AggregateImagePropertiesIsolation skips them.
NOT_NOVA_FIELDS = ("custom_prop", "ns.os_distro")
#: Values Nova's image property fields coerce (what Nova then compares).
NOVA_COERCED = {"hw_vm_mode": {"hv": "hvm", "HVM": "hvm"}, "os_type": {"Linux": "linux"}}


def _unknown_to_nova(case, host, berth, nova):
    return berth is not None and nova == "pass" and \
        any(k in _props(case) for k in NOT_NOVA_FIELDS)


def _coerced_by_nova(case, host, berth, nova):
    props = _props(case)
    return any(props.get(k) in values for k, values in NOVA_COERCED.items())


def _as_nova_coerces(case, host):
    out = _one(case, host)
    props = out["request"]["image"]["properties"]
    for key, values in NOVA_COERCED.items():
        if props.get(key) in values:
            props[key] = values[props[key]]
    return out


RULES += [
    ("AggregateImagePropertiesIsolation",
     "a property Nova has no field for (custom or namespaced): Berth compares it, Nova "
     "skips it", DOCUMENTED, _unknown_to_nova,
     lambda case, host: _drop_props(case, host, NOT_NOVA_FIELDS)),
    ("AggregateImagePropertiesIsolation",
     "Nova compares the value its image field coerced (hv is hvm, Linux is linux)",
     DOCUMENTED, _coerced_by_nova, _as_nova_coerces),
    ("SimpleCIDRAffinityFilter", "Berth refuses a malformed address or CIDR hint up front",
     DOCUMENTED, lambda case, host, berth, nova: isinstance(berth, str) and berth.startswith(
         "invalid: scheduler_hints."),
     lambda case, host: dict(_one(case, host), request=dict(case["request"],
                                                             scheduler_hints={}))),
]


def _blank_address(case, host, berth, nova):
    near = (case["request"].get("scheduler_hints") or {}).get("build_near_host_ip", "")
    return nova.startswith("raise") and near != near.strip()


def _stripped_address(case, host):
    out = _one(case, host)
    hints = out["request"]["scheduler_hints"]
    hints["build_near_host_ip"] = hints["build_near_host_ip"].strip()
    return out


RULES.append(("SimpleCIDRAffinityFilter",
              "blanks around the address hint: Berth strips them, Nova raises", DOCUMENTED,
              _blank_address, _stripped_address))
