"""A disagreement made as small as it stays a disagreement.

Greedy deletion (delta debugging by one element at a time, repeated until
nothing more can go): first every node but one the sides disagree on, then
children, usages, traits, aggregates and their metadata, inventory classes,
unit limits and ratios (back to their defaults), then the request's extra
specs, image properties, ``member_of`` entries and flavor disk and swap. A
change is kept when the sides still disagree the same way about the node
(Placement offers it and Berth does not, or the reverse; or the same side
refuses the request as invalid).
"""
from __future__ import annotations

import json
from collections.abc import Iterator

from tools.placement_parity.cases import clone

INVALID = "invalid"


def _verdict(sides, fleet: dict, request: dict, node: str | None):
    theirs, mine, _ = sides.answers(fleet, request)
    if theirs == INVALID or mine == INVALID:
        return ("invalid", theirs == INVALID, mine == INVALID)
    if node is None:
        return None
    return ("node", node in theirs, node in mine)


def _disagrees(verdict) -> bool:
    return verdict is not None and verdict[1] != verdict[2]


def _only(fleet: dict, name: str) -> dict:
    out = clone(fleet)
    out["nodes"] = [n for n in out["nodes"] if n["name"] == name]
    out["aggregates"] = [dict(a, hosts=[h for h in a["hosts"] if h == name])
                         for a in out["aggregates"] if name in a["hosts"]]
    out["usage"] = [u for u in out["usage"] if u["node"] == name]
    return out


def minimal(sides, fleet: dict, request: dict, diff) -> dict:
    """The smallest (fleet, request) found that disagrees as the given one does."""
    node = None if diff == INVALID else sorted(diff)[0]
    fleet, request = clone(fleet), clone(request)
    target = _verdict(sides, fleet, request, node)
    if not _disagrees(target):
        return _result(sides, fleet, request)
    if node is not None:
        alone = _only(fleet, node)
        if _verdict(sides, alone, request, node) == target:
            fleet = alone
    changed = True
    while changed:
        changed = False
        for candidate_fleet, candidate_request in _smaller(fleet, request):
            if _verdict(sides, candidate_fleet, candidate_request, node) == target:
                fleet, request = candidate_fleet, candidate_request
                changed = True
                break
    return _result(sides, fleet, request)


def _result(sides, fleet: dict, request: dict) -> dict:
    theirs, mine, _ = sides.answers(fleet, request)
    return {"fleet": fleet, "request": request,
            "placement": theirs if theirs == INVALID else sorted(theirs),
            "berth": mine if mine == INVALID else sorted(mine)}


def _smaller(fleet: dict, request: dict) -> Iterator[tuple[dict, dict]]:
    """Every one-step smaller case, roughly the largest steps first."""
    for i in range(len(fleet["nodes"])):
        if len(fleet["nodes"]) > 1:
            f = clone(fleet)
            name = f["nodes"].pop(i)["name"]
            f["usage"] = [u for u in f["usage"] if u["node"] != name]
            for a in f["aggregates"]:
                a["hosts"] = [h for h in a["hosts"] if h != name]
            yield f, request
    for i, node in enumerate(fleet["nodes"]):
        for j, child in enumerate(node["children"]):
            if any(c["parent"] == child["name"] for c in node["children"]):
                continue
            f = clone(fleet)
            f["nodes"][i]["children"].pop(j)
            _drop_usage(f, lambda prov, _rc, name=child["name"]: prov == name)
            yield f, request
    for u in range(len(fleet["usage"])):
        f = clone(fleet)
        f["usage"].pop(u)
        yield f, request
        for k in range(len(fleet["usage"][u]["items"])):
            if len(fleet["usage"][u]["items"]) > 1:
                f = clone(fleet)
                f["usage"][u]["items"].pop(k)
                yield f, request
    for a in range(len(fleet["aggregates"])):
        f = clone(fleet)
        f["aggregates"].pop(a)
        yield f, request
        for key in fleet["aggregates"][a]["metadata"]:
            f = clone(fleet)
            del f["aggregates"][a]["metadata"][key]
            yield f, request
    for i, node in enumerate(fleet["nodes"]):
        providers = [(None, node)] + list(enumerate(node["children"]))
        for j, prov in providers:
            for t in range(len(prov["traits"])):
                f = clone(fleet)
                target = f["nodes"][i] if j is None else f["nodes"][i]["children"][j]
                target["traits"].pop(t)
                yield f, request
            for rc in sorted(prov["inventories"]):
                if j is None and not node["classic"] and len(prov["inventories"]) == 1:
                    continue        # a node keeps some inventory
                f = clone(fleet)
                target = f["nodes"][i] if j is None else f["nodes"][i]["children"][j]
                del target["inventories"][rc]
                name = prov["name"]
                _drop_usage(f, lambda p, c, name=name, rc=rc: p == name and c == rc)
                yield f, request
                for field, plain in (("reserved", 0), ("min_unit", 1), ("step_size", 1),
                                     ("allocation_ratio", 1.0),
                                     ("max_unit", prov["inventories"][rc]["total"])):
                    if prov["inventories"][rc][field] != plain:
                        f = clone(fleet)
                        target = f["nodes"][i] if j is None else f["nodes"][i]["children"][j]
                        target["inventories"][rc][field] = plain
                        yield f, request
        classic = node["classic"]
        if classic:
            for key in ("reserved_host_cpus", "reserved_host_memory_mb",
                        "reserved_host_disk_mb"):
                if classic.get(key):
                    f = clone(fleet)
                    del f["nodes"][i]["classic"][key]
                    yield f, request
            for key in ("cpu_allocation_ratio", "ram_allocation_ratio",
                        "disk_allocation_ratio"):
                if classic[key] != 1.0:
                    f = clone(fleet)
                    f["nodes"][i]["classic"][key] = 1.0
                    yield f, request
    for key in sorted(request["flavor"].get("extra_specs", {})):
        r = clone(request)
        del r["flavor"]["extra_specs"][key]
        yield fleet, r
    for key in sorted(request.get("image", {}).get("properties", {})):
        r = clone(request)
        del r["image"]["properties"][key]
        yield fleet, r
    if "member_of" in request:
        r = clone(request)
        del r["member_of"]
        yield fleet, r
        for k in range(len(request["member_of"])):
            if len(request["member_of"]) > 1:
                r = clone(request)
                r["member_of"].pop(k)
                yield fleet, r
    for key in ("root_gb", "ephemeral_gb", "swap"):
        if request["flavor"].get(key):
            r = clone(request)
            r["flavor"][key] = 0
            yield fleet, r


def _drop_usage(fleet: dict, match) -> None:
    for u in fleet["usage"]:
        u["items"] = [it for it in u["items"] if not match(it[0], it[1])]
    fleet["usage"] = [u for u in fleet["usage"] if u["items"]]


def describe(small: dict) -> str:
    """The minimal case, readable."""
    lines = []
    for node in small["fleet"]["nodes"]:
        lines.append(f"  node {node['name']}: classic {json.dumps(node['classic'])}")
        lines.append(f"    inventories {json.dumps(node['inventories'])}")
        if node["traits"]:
            lines.append(f"    traits {node['traits']}")
        for c in node["children"]:
            lines.append(f"    child {c['name']} (parent {c['parent'] or 'root'}): "
                         f"{json.dumps(c['inventories'])} traits {c['traits']}")
    for a in small["fleet"]["aggregates"]:
        lines.append(f"  aggregate {a['name']}: hosts {a['hosts']} metadata {a['metadata']}")
    for u in small["fleet"]["usage"]:
        lines.append(f"  usage on {u['node']}: {u['items']}")
    lines.append(f"  request {json.dumps(small['request'])}")
    lines.append(f"  Placement offers {small['placement']}; Berth passes {small['berth']}")
    return "\n".join(lines)
