"""The guest NUMA topology asked for by a flavor's extra specs and an image's properties.

Flavor keys (``hw:...``) and their image equivalents (``hw_...``):

- ``hw:numa_nodes`` — number of guest cells; flavor and image may not disagree.
- ``hw:numa_cpus.N`` / ``hw:numa_mem.N`` — vCPUs (``0-3,^2,5``) and MB of cell N, given
  together for every cell; the image may set them only when the flavor does not.
  Without them vCPUs and memory are split evenly.
- ``hw:cpu_policy`` — shared | dedicated | mixed; an image may not ask for dedicated when
  the flavor says shared or mixed, and may choose freely when the flavor is silent.
- ``hw:cpu_dedicated_mask`` — the pinned vCPUs of a mixed guest (``2-3`` or ``^0-1``);
  flavor only, as in Nova.
- ``hw:cpu_thread_policy`` — prefer | isolate | require, for pinned vCPUs only; the
  image may choose when the flavor is silent or says prefer, else must agree.
- ``hw:mem_page_size`` — small | large | any | a size (``2048``, ``2MB``, ``1GB``; plain
  numbers are KiB); an image may narrow ``any`` or ``large`` but needs the flavor to
  allow page sizes at all.
- ``hw:emulator_threads_policy`` — share | isolate (isolate needs pinned vCPUs);
  flavor and image may not disagree.

A guest gets a NUMA topology when it asks for cells, a page size, pinned CPUs, or gives
per-cell CPUs or memory; otherwise ``instance_topology_from_specs`` returns None after one
cheap scan of the keys.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from numa.errors import NumaError
from numa.topology import (
    CPU_POLICIES,
    DEDICATED,
    EMULATOR_ISOLATE,
    EMULATOR_POLICIES,
    MIXED,
    PAGE_KEYWORDS,
    PAGES_ANY,
    PAGES_LARGE,
    PREFER,
    SHARED,
    THREAD_POLICIES,
    InstanceCell,
    InstanceTopology,
)

# Key stems shared by the flavor ("hw:" + stem) and the image ("hw_" + stem).
_STEMS = ("numa_nodes", "cpu_policy", "cpu_thread_policy", "mem_page_size",
          "emulator_threads_policy")
_CELL_STEMS = ("numa_cpus.", "numa_mem.")
_FLAVOR_KEYS = frozenset("hw:" + s for s in _STEMS) | {"hw:cpu_dedicated_mask"}
_FLAVOR_PREFIXES = tuple("hw:" + s for s in _CELL_STEMS)
_IMAGE_KEYS = frozenset("hw_" + s for s in _STEMS)
_IMAGE_PREFIXES = tuple("hw_" + s for s in _CELL_STEMS)

_PAGE_UNITS_KB = {"": 1, "k": 1, "kb": 1, "kib": 1, "m": 1024, "mb": 1024, "mib": 1024,
                  "g": 1024 ** 2, "gb": 1024 ** 2, "gib": 1024 ** 2}
_PAGE_SIZE_RE = re.compile(r"^(\d+)\s*([a-z]*)$")


def _mentions_numa(specs: Mapping, keys: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    return any(key in keys or key.startswith(prefixes) for key in specs)


class _Source:
    """The NUMA keys of the flavor or of the image, with the field name of each."""

    def __init__(self, values: Mapping, field_prefix: str, key_prefix: str) -> None:
        self.values = values
        self.field_prefix = field_prefix
        self.key_prefix = key_prefix

    def key(self, stem: str) -> str:
        return self.key_prefix + stem

    def field(self, stem: str) -> str:
        return self.field_prefix + self.key(stem)

    def get(self, stem: str) -> Any:
        return self.values.get(self.key(stem))

    def choice(self, stem: str, choices: tuple[str, ...]) -> str | None:
        value = self.get(stem)
        if value is None:
            return None
        text = str(value).strip().lower()
        if text not in choices:
            raise NumaError(self.field(stem),
                            f"expected one of {' | '.join(choices)}, got {value!r}")
        return text

    def per_cell(self, stem: str) -> dict[int, Any]:
        """``{N: value}`` for the keys ``<stem>.N``."""
        head = self.key(stem) + "."
        cells = {}
        for key, value in self.values.items():
            if key.startswith(head):
                index = key[len(head):]
                if not index.isdigit():
                    raise NumaError(self.field_prefix + key,
                                    "expected a cell number after the dot")
                cells[int(index)] = value
        return cells


def instance_topology_from_specs(vcpus: int, memory_mb: int, extra_specs: Mapping | None,
                                 image_props: Mapping | None) -> InstanceTopology | None:
    """The guest NUMA topology asked for, or None when nothing NUMA-related is asked.

    Raises ``NumaError`` naming the offending key (e.g.
    ``flavor.extra_specs.hw:numa_cpus.0``) for a bad value or a flavor/image conflict.
    """
    extra_specs = extra_specs or {}
    image_props = image_props or {}
    if not (_mentions_numa(extra_specs, _FLAVOR_KEYS, _FLAVOR_PREFIXES)
            or _mentions_numa(image_props, _IMAGE_KEYS, _IMAGE_PREFIXES)):
        return None
    if isinstance(vcpus, bool) or not isinstance(vcpus, int) or vcpus < 1:
        raise NumaError("flavor.vcpus", "expected an integer >= 1")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 1:
        raise NumaError("flavor.memory_mb", "expected an integer >= 1")

    flavor = _Source(extra_specs, "flavor.extra_specs.", "hw:")
    image = _Source(image_props, "image.properties.", "hw_")

    cpu_policy, policy_field = _cpu_policy(flavor, image)
    thread_policy, thread_field = _thread_policy(flavor, image)
    emulator, emulator_field = _emulator_policy(flavor, image)
    pagesize, pagesize_field = _page_size(flavor, image)
    pinned = cpu_policy in (DEDICATED, MIXED)
    if thread_policy is not None and not pinned:
        raise NumaError(thread_field, "needs hw:cpu_policy dedicated or mixed")
    if emulator == EMULATOR_ISOLATE and not pinned:
        raise NumaError(emulator_field, "isolate needs hw:cpu_policy dedicated or mixed")
    dedicated = _dedicated_mask(flavor, cpu_policy, policy_field, vcpus)

    nodes, nodes_field = _numa_nodes(flavor, image, vcpus)
    cpus_source = _cell_source(flavor, image, "numa_cpus")
    mem_source = _cell_source(flavor, image, "numa_mem")
    if (nodes is None and pagesize is None and not pinned and cpus_source is None
            and mem_source is None):
        return None
    nodes = nodes or 1
    cell_cpus, cell_mem = _cell_split(nodes, nodes_field, vcpus, memory_mb,
                                      cpus_source, mem_source)

    if isinstance(pagesize, int):
        for i, mem in enumerate(cell_mem):
            if (mem * 1024) % pagesize:
                raise NumaError(pagesize_field,
                                f"cell {i} has {mem} MB, not a multiple of {pagesize} KiB pages")
    cells = []
    for i, (cpus, mem) in enumerate(zip(cell_cpus, cell_mem, strict=True)):
        if cpu_policy == DEDICATED:
            shared_part, pinned_part = frozenset(), cpus
        elif cpu_policy == MIXED:
            shared_part, pinned_part = cpus - dedicated, cpus & dedicated
        else:
            shared_part, pinned_part = cpus, frozenset()
        cells.append(InstanceCell(
            id=i, cpuset=shared_part, pcpuset=pinned_part, memory_mb=mem, pagesize=pagesize,
            cpu_policy=cpu_policy or SHARED, cpu_thread_policy=thread_policy))
    return InstanceTopology(cells=tuple(cells), emulator_threads_policy=emulator)


# -- one rule per key ---------------------------------------------------------------------

def _cpu_policy(flavor: _Source, image: _Source) -> tuple[str | None, str]:
    flavor_value = flavor.choice("cpu_policy", CPU_POLICIES)
    image_value = image.choice("cpu_policy", CPU_POLICIES)
    if flavor_value is None:
        return image_value, image.field("cpu_policy")
    if flavor_value in (SHARED, MIXED) and image_value == DEDICATED:
        raise NumaError(image.field("cpu_policy"),
                        f"dedicated conflicts with {flavor.key('cpu_policy')}={flavor_value}")
    return flavor_value, flavor.field("cpu_policy")


def _thread_policy(flavor: _Source, image: _Source) -> tuple[str | None, str]:
    flavor_value = flavor.choice("cpu_thread_policy", THREAD_POLICIES)
    image_value = image.choice("cpu_thread_policy", THREAD_POLICIES)
    if flavor_value in (None, PREFER):
        if image_value is not None:
            return image_value, image.field("cpu_thread_policy")
        return flavor_value, flavor.field("cpu_thread_policy")
    if image_value is not None and image_value != flavor_value:
        raise NumaError(image.field("cpu_thread_policy"),
                        f"{image_value} conflicts with "
                        f"{flavor.key('cpu_thread_policy')}={flavor_value}")
    return flavor_value, flavor.field("cpu_thread_policy")


def _emulator_policy(flavor: _Source, image: _Source) -> tuple[str | None, str]:
    flavor_value = flavor.choice("emulator_threads_policy", EMULATOR_POLICIES)
    image_value = image.choice("emulator_threads_policy", EMULATOR_POLICIES)
    if flavor_value is None:
        return image_value, image.field("emulator_threads_policy")
    if image_value is not None and image_value != flavor_value:
        raise NumaError(image.field("emulator_threads_policy"),
                        f"{image_value} conflicts with "
                        f"{flavor.key('emulator_threads_policy')}={flavor_value}")
    return flavor_value, flavor.field("emulator_threads_policy")


def parse_page_size(value: Any, field: str) -> int | str:
    """A page size request: small | large | any, or a size in KiB (``2048``, ``2MB``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise NumaError(field, "expected a page size > 0")
        return value
    text = str(value).strip().lower()
    if text in PAGE_KEYWORDS:
        return text
    match = _PAGE_SIZE_RE.match(text)
    if not match or match.group(2) not in _PAGE_UNITS_KB or int(match.group(1)) < 1:
        raise NumaError(field, f"expected small, large, any or a size like 2MB, got {value!r}")
    return int(match.group(1)) * _PAGE_UNITS_KB[match.group(2)]


def _page_size(flavor: _Source, image: _Source) -> tuple[int | str | None, str]:
    flavor_raw = flavor.get("mem_page_size")
    image_raw = image.get("mem_page_size")
    flavor_value = (None if flavor_raw is None
                    else parse_page_size(flavor_raw, flavor.field("mem_page_size")))
    image_value = (None if image_raw is None
                   else parse_page_size(image_raw, image.field("mem_page_size")))
    if image_value is None:
        return flavor_value, flavor.field("mem_page_size")
    if flavor_value is None:
        raise NumaError(image.field("mem_page_size"),
                        f"the flavor does not allow a page size "
                        f"(set {flavor.key('mem_page_size')} to any or large)")
    allowed = (flavor_value == PAGES_ANY
               or (flavor_value == PAGES_LARGE and image_value not in (PAGES_ANY, "small"))
               or image_value == flavor_value)
    if not allowed:
        raise NumaError(image.field("mem_page_size"),
                        f"{image_value} conflicts with "
                        f"{flavor.key('mem_page_size')}={flavor_value}")
    return image_value, image.field("mem_page_size")


def _dedicated_mask(flavor: _Source, cpu_policy: str | None, policy_field: str,
                    vcpus: int) -> frozenset[int]:
    raw = flavor.get("cpu_dedicated_mask")
    field = flavor.field("cpu_dedicated_mask")
    if raw is None:
        if cpu_policy == MIXED:
            raise NumaError(policy_field, "mixed needs hw:cpu_dedicated_mask")
        return frozenset()
    if cpu_policy != MIXED:
        raise NumaError(field, "needs hw:cpu_policy=mixed")
    mask = parse_cpu_spec(raw, field, vcpus, allow_exclusions_only=True)
    if len(mask) == vcpus:
        raise NumaError(field, "a mixed guest needs at least one shared vCPU")
    return mask


def _numa_nodes(flavor: _Source, image: _Source, vcpus: int) -> tuple[int | None, str]:
    flavor_value = _positive_int(flavor.get("numa_nodes"), flavor.field("numa_nodes"))
    image_value = _positive_int(image.get("numa_nodes"), image.field("numa_nodes"))
    if flavor_value is not None and image_value is not None and flavor_value != image_value:
        raise NumaError(image.field("numa_nodes"),
                        f"{image_value} conflicts with {flavor.key('numa_nodes')}={flavor_value}")
    value, field = ((flavor_value, flavor.field("numa_nodes")) if flavor_value is not None
                    else (image_value, image.field("numa_nodes")))
    if value is not None and value > vcpus:
        raise NumaError(field, f"{value} cells need at least {value} vCPUs, flavor has {vcpus}")
    return value, field


def _cell_source(flavor: _Source, image: _Source, stem: str) -> tuple[_Source, dict] | None:
    """The per-cell values of ``stem`` and where they come from; the image may give them
    only when the flavor does not."""
    flavor_cells = flavor.per_cell(stem)
    image_cells = image.per_cell(stem)
    if flavor_cells and image_cells:
        first = min(image_cells)
        raise NumaError(image.field(f"{stem}.{first}"),
                        f"the image may not set {image.key(stem)}.N when the flavor sets "
                        f"{flavor.key(stem)}.N")
    if flavor_cells:
        return flavor, flavor_cells
    if image_cells:
        return image, image_cells
    return None


def _cell_split(nodes: int, nodes_field: str, vcpus: int, memory_mb: int,
                cpus_source: tuple[_Source, dict] | None,
                mem_source: tuple[_Source, dict] | None,
                ) -> tuple[list[frozenset[int]], list[int]]:
    """vCPUs and MB of each cell: as given, or split evenly."""
    if cpus_source is None and mem_source is None:
        if vcpus % nodes or memory_mb % nodes:
            raise NumaError(nodes_field,
                            f"{vcpus} vCPUs and {memory_mb} MB do not split evenly over "
                            f"{nodes} cells; give hw:numa_cpus.N and hw:numa_mem.N")
        per_cell = vcpus // nodes
        cpus = [frozenset(range(i * per_cell, (i + 1) * per_cell)) for i in range(nodes)]
        return cpus, [memory_mb // nodes] * nodes
    if cpus_source is None or mem_source is None:
        given, missing = ((mem_source, "numa_cpus") if cpus_source is None
                          else (cpus_source, "numa_mem"))
        source = given[0]
        raise NumaError(source.field(f"{missing}.0"),
                        f"missing: {source.key('numa_cpus')}.N and "
                        f"{source.key('numa_mem')}.N must be given together")
    cpu_source, cpu_values = cpus_source
    mem_src, mem_values = mem_source
    for source, values, stem in ((cpu_source, cpu_values, "numa_cpus"),
                                 (mem_src, mem_values, "numa_mem")):
        for index in sorted(values):
            if index >= nodes:
                raise NumaError(source.field(f"{stem}.{index}"),
                                f"cell {index} does not exist: the guest has {nodes} cells")
        for index in range(nodes):
            if index not in values:
                raise NumaError(source.field(f"{stem}.{index}"),
                                f"missing: give {source.key(stem)}.N for each of {nodes} cells")
    cell_cpus = []
    assigned: set[int] = set()
    for index in range(nodes):
        field = cpu_source.field(f"numa_cpus.{index}")
        cpus = parse_cpu_spec(cpu_values[index], field, vcpus)
        if cpus & assigned:
            raise NumaError(field, f"vCPUs {_fmt(cpus & assigned)} are already in another cell")
        assigned |= cpus
        cell_cpus.append(cpus)
    if len(assigned) != vcpus:
        missing_cpus = set(range(vcpus)) - assigned
        raise NumaError(cpu_source.field("numa_cpus"),
                        f"vCPUs {_fmt(missing_cpus)} are in no cell")
    cell_mem = [_positive_int(mem_values[index], mem_src.field(f"numa_mem.{index}"))
                for index in range(nodes)]
    if sum(cell_mem) != memory_mb:
        raise NumaError(mem_src.field("numa_mem"),
                        f"cells total {sum(cell_mem)} MB, the flavor has {memory_mb} MB")
    return cell_cpus, cell_mem


# -- value parsers ------------------------------------------------------------------------

def _positive_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise NumaError(field, "expected an integer >= 1")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise NumaError(field, f"expected an integer >= 1, got {value!r}") from None
    if number < 1:
        raise NumaError(field, f"expected an integer >= 1, got {value!r}")
    return number


#: At most this many comma-separated items in one vCPU list (a flavor has at most
#: 4096 vCPUs; a longer list only costs time to refuse).
MAX_CPU_SPEC_ITEMS = 4096
#: Reasons list at most this many characters of vCPU numbers.
MAX_CPU_LIST_TEXT = 80


def parse_cpu_spec(value: Any, field: str, vcpus: int,
                   allow_exclusions_only: bool = False) -> frozenset[int]:
    """vCPU numbers from ``0-3,^2,5``; with ``allow_exclusions_only`` a spec of only
    exclusions (``^0-1``) means every other vCPU. Each number must be below ``vcpus``.

    Every range is checked against ``vcpus`` before it is expanded, so the work and
    the error are bounded by the flavor's size, not by the numbers written.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise NumaError(field, "expected a vCPU list like 0-3,^2,5")
    tokens = value.split(",")
    if len(tokens) > MAX_CPU_SPEC_ITEMS:
        raise NumaError(field, f"more than {MAX_CPU_SPEC_ITEMS} items")
    include: set[int] = set()
    exclude: set[int] = set()
    for token in tokens:
        token = token.strip()
        target = include
        if token.startswith("^"):
            target, token = exclude, token[1:].strip()
        low, sep, high = token.partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise NumaError(field, f"expected a vCPU list like 0-3,^2,5, got "
                                   f"{_clip(value)!r}") from None
        if first < 0 or last < first:
            raise NumaError(field, f"bad vCPU range {_clip(token)!r}")
        if last >= vcpus:
            raise NumaError(field, f"vCPUs {_clip(token)} do not exist: the flavor has "
                                   f"{vcpus} (0-{vcpus - 1})")
        target.update(range(first, last + 1))
    if not include and allow_exclusions_only:
        include = set(range(vcpus))
    cpus = include - exclude
    if not cpus:
        raise NumaError(field, "selects no vCPU")
    return frozenset(cpus)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _fmt(cpus) -> str:
    """``0-3,7`` for a set of vCPUs, cut to MAX_CPU_LIST_TEXT characters."""
    parts: list[str] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run[-1] = cpu
            continue
        if run:
            parts.append(str(run[0]) if run[0] == run[1] else f"{run[0]}-{run[1]}")
        run = [cpu, cpu]
    if run:
        parts.append(str(run[0]) if run[0] == run[1] else f"{run[0]}-{run[1]}")
    return _clip(",".join(parts), MAX_CPU_LIST_TEXT)
