"""Operator-defined inventories and traits: provider config files in Nova's
``provider.yaml`` format.

Every ``*.yaml`` file of ``[agent] provider_config_location`` is read when
berth-agent starts (a bad file stops it, naming the file and the field)::

    meta:
      schema_version: '1.0'
    providers:
      - identification: {uuid: $COMPUTE_NODE}     # the node itself
        inventories:
          additional:
            - CUSTOM_LICENSED_WINDOWS: {total: 8, allocation_ratio: 1.0}
        traits:
          additional: [CUSTOM_RACK_A]
      - identification: {name: compute-1_pci_0000_3b_00_0}   # a GPU's provider
        traits:
          additional: [CUSTOM_GPU_LOW_LATENCY]

The rules are Nova's: ``meta.schema_version`` is a string ``1.<minor>``; a
provider is identified by exactly one of ``uuid`` (``$COMPUTE_NODE`` is the
node's root provider, unless the root is also identified by its name, which
then wins) or ``name``, and by no two entries of any file; ``inventories`` and
``traits`` have one key, ``additional``: only ``CUSTOM_`` classes and traits
(the agent reports the standard ones itself); an entry that adds nothing is
ignored with a warning, as is one naming a provider this host does not have.
Inventory fields are Placement's (``total`` required, the others optional).
Unlike Nova, a key the 1.0 format does not have is an error (a typo would
otherwise be dropped silently); a file of a later minor version is read with
its unknown keys ignored and a warning.
"""
from __future__ import annotations

import dataclasses
import os
import re
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from oslo_config import cfg

from db import inventory
from db.inventory import Inventory
from scheduler import exception, fleet

provider_config_opts = [
    cfg.StrOpt("provider_config_location", default="/etc/berth/provider_config/",
               help="Directory of provider config files (YAML files, Nova's provider.yaml "
                    "format): the custom inventories and traits the operator adds to this "
                    "node (identification uuid $COMPUTE_NODE, or its name) or to a child "
                    "provider of it (by name or uuid, as berth-agent --dry-run shows "
                    "them). Read when berth-agent starts; a file that fails validation "
                    "stops it. A missing directory means no such files."),
]

cfg.CONF.register_opts(provider_config_opts, group="agent")

LIST_OPTS = [("agent", provider_config_opts)]

COMPUTE_NODE = "$COMPUTE_NODE"
SCHEMA_MAJOR = 1
SCHEMA_MINOR = 0
MAX_NAME = 200

_VERSION = re.compile(r"^([0-9]+)\.([0-9]+)$")
_NAME = re.compile(r"^[A-Z0-9_]{1,255}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}$")
_TOP_KEYS = ("meta", "providers")
_PROVIDER_KEYS = ("identification", "inventories", "traits")
_ADJECTIVES = ("additional",)


class ProviderConfigError(exception.InvalidRequest):
    """A provider config file failed validation: ``field`` is ``<file>: <field>``."""

    def __init__(self, path: str, field: str, reason: str) -> None:
        super().__init__(f"provider config {path}: {field}: {reason}",
                         field=f"{path}: {field}", reason=reason)


@dataclasses.dataclass(frozen=True)
class ProviderConfig:
    """One ``providers`` entry: whom it identifies and what it adds."""

    source: str
    index: int
    name: str | None = None
    uuid: str | None = None             # a UUID, or COMPUTE_NODE
    inventories: Mapping[str, Inventory] = dataclasses.field(default_factory=dict)
    traits: frozenset[str] = frozenset()

    @property
    def where(self) -> str:
        return f"{self.source}: providers[{self.index}]"

    @property
    def identity(self) -> str:
        return f"name {self.name}" if self.name is not None else f"uuid {self.uuid}"


@dataclasses.dataclass(frozen=True)
class ProviderConfigs:
    """What the files of a directory say, and what the operator should know."""

    entries: tuple[ProviderConfig, ...] = ()
    warnings: tuple[str, ...] = ()


# -- reading ---------------------------------------------------------------------------------

def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _File:
    """Checks of one file's document; unknown keys are errors in a 1.0 file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lenient = False
        self.warnings: list[str] = []

    def fail(self, field: str, reason: str) -> ProviderConfigError:
        return ProviderConfigError(self.path, field, reason)

    def mapping(self, field: str, value: Any, known: Sequence[str] | None = None) -> dict:
        if not isinstance(value, dict):
            raise self.fail(field, f"expected a mapping, got {_show(value)}")
        for key in value:
            if known is not None and key not in known:
                where = f"{field}.{key}" if field != "document" else str(key)
                if not self.lenient:
                    raise self.fail(where, f"unknown key (schema version "
                                           f"{SCHEMA_MAJOR}.{SCHEMA_MINOR} has "
                                           f"{', '.join(known)})")
                self.warnings.append(f"{self.path}: {where}: unknown key ignored")
        return value

    def list(self, field: str, value: Any) -> list:
        if not isinstance(value, list):
            raise self.fail(field, f"expected a list, got {_show(value)}")
        return value

    def schema_version(self, doc: dict) -> None:
        if "meta" not in doc:
            raise self.fail("meta", "required (meta: {schema_version: '1.0'})")
        meta = self.mapping("meta", doc["meta"])
        version = meta.get("schema_version")
        if version is None:
            raise self.fail("meta.schema_version", "required, e.g. '1.0'")
        if not isinstance(version, str):
            raise self.fail("meta.schema_version",
                            f"expected a string such as '1.0' (quote it), got {_show(version)}")
        m = _VERSION.match(version)
        if m is None:
            raise self.fail("meta.schema_version",
                            f"expected <major>.<minor> such as '1.0', got {_show(version)}")
        major, minor = int(m.group(1)), int(m.group(2))
        if major != SCHEMA_MAJOR:
            raise self.fail("meta.schema_version", f"major version {major} is not supported "
                                                   f"(this agent reads {SCHEMA_MAJOR}.x)")
        if minor > SCHEMA_MINOR:
            self.lenient = True
            self.warnings.append(f"{self.path}: schema version {version} is newer than "
                                 f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}: keys this agent does not "
                                 f"know are ignored")

    def identification(self, field: str, value: Any) -> tuple[str | None, str | None]:
        ident = self.mapping(field, value)
        if len(ident) != 1 or next(iter(ident)) not in ("uuid", "name"):
            raise self.fail(field, f"expected exactly one of uuid, name; got "
                                   f"{', '.join(map(str, ident)) or 'none'}")
        key, text = next(iter(ident.items()))
        if key == "uuid":
            if text == COMPUTE_NODE:
                return None, COMPUTE_NODE
            if not isinstance(text, str) or not _UUID.match(text):
                raise self.fail(f"{field}.uuid",
                                f"expected a UUID or {COMPUTE_NODE}, got {_show(text)}")
            return None, str(uuidlib.UUID(text))
        if not isinstance(text, str) or not 1 <= len(text) <= MAX_NAME:
            raise self.fail(f"{field}.name",
                            f"expected a name of 1 to {MAX_NAME} characters, got {_show(text)}")
        return text, None

    def additional(self, field: str, value: Any) -> list:
        section = self.mapping(field, value, _ADJECTIVES)
        return self.list(f"{field}.additional", section.get("additional", []))

    def custom_name(self, field: str, name: Any, kind: str) -> str:
        """``name`` if it is a CUSTOM_ class (``kind`` "class") or trait."""
        label, plural, standard = (
            ("resource class", "resource classes", inventory.standard_classes())
            if kind == "class" else ("trait", "traits", inventory.standard_traits()))
        if isinstance(name, str) and name in standard:
            raise self.fail(field, f"{name} is a standard {label}: only CUSTOM_ {plural} may "
                                   f"be added here (the agent reports the standard ones)")
        if not isinstance(name, str) or not _NAME.match(name) or not inventory.is_custom(name):
            raise self.fail(field, f"not a custom {label}: {_show(name)} (CUSTOM_ and "
                                   f"upper-case letters, digits and underscores)")
        return name

    def inventories(self, field: str, value: Any) -> dict[str, Inventory]:
        out: dict[str, Inventory] = {}
        for i, item in enumerate(self.additional(field, value)):
            where = f"{field}.additional[{i}]"
            for rc, data in self.mapping(where, item).items():
                at = f"{where}.{rc}"
                self.custom_name(at, rc, "class")
                if rc in out:
                    raise self.fail(at, f"{rc} is given twice for this provider")
                if not isinstance(data, dict):
                    raise self.fail(at, f"expected a mapping with total (and reserved, "
                                        f"min_unit, max_unit, step_size, allocation_ratio), "
                                        f"got {_show(data)}")
                total = data.get("total")
                if isinstance(total, int) and not isinstance(total, bool) and total < 1:
                    raise self.fail(f"{at}.total", f"must be at least 1, got {total}")
                try:
                    out[rc] = Inventory.from_primitive(data, at)
                except inventory.InventoryError as e:
                    raise self.fail(e.field, e.reason) from None
        return out

    def traits(self, field: str, value: Any) -> frozenset[str]:
        return frozenset(self.custom_name(f"{field}.additional[{i}]", name, "trait")
                         for i, name in enumerate(self.additional(field, value)))

    def providers(self, doc: dict) -> list[ProviderConfig]:
        out = []
        for i, item in enumerate(self.list("providers", doc.get("providers", []))):
            field = f"providers[{i}]"
            entry = self.mapping(field, item, _PROVIDER_KEYS)
            if "identification" not in entry:
                raise self.fail(f"{field}.identification", "required")
            name, uuid = self.identification(f"{field}.identification", entry["identification"])
            config = ProviderConfig(
                source=self.path, index=i, name=name, uuid=uuid,
                inventories=self.inventories(f"{field}.inventories",
                                             entry.get("inventories", {})),
                traits=self.traits(f"{field}.traits", entry.get("traits", {})))
            if not config.inventories and not config.traits:
                self.warnings.append(f"{config.where}: {config.identity} adds no inventories "
                                     f"or traits; ignored")
                continue
            out.append(config)
        return out


def parse_document(doc: Any, path: str) -> tuple[list[ProviderConfig], list[str]]:
    """The entries of one file's parsed document, and warnings; ProviderConfigError
    names the file and the field."""
    f = _File(path)
    if doc is None:
        raise f.fail("document", "empty (expected meta: {schema_version: '1.0'})")
    f.mapping("document", doc)
    f.schema_version(doc)
    f.mapping("document", doc, _TOP_KEYS)
    return f.providers(doc), f.warnings


def load_file(path: str) -> tuple[list[ProviderConfig], list[str]]:
    try:
        with open(path, encoding="utf-8") as stream:
            doc = fleet.load_yaml(stream)
    except OSError as e:
        raise ProviderConfigError(path, "file", f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ProviderConfigError(path, "file", f"not UTF-8 text: {e.reason}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "file"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ProviderConfigError(path, where, f"not valid YAML: {problem}") from None
    return parse_document(doc, path)


def load_directory(directory: str, field: str = "agent.provider_config_location"
                   ) -> ProviderConfigs:
    """Every ``*.yaml`` file of ``directory`` (sorted by name), checked alone and
    together: no provider identified twice. A missing directory has none."""
    if not os.path.exists(directory):
        return ProviderConfigs()
    if not os.path.isdir(directory):
        raise exception.InvalidRequest(field=field, reason=f"{directory} is not a directory")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".yaml"))
    except OSError as e:
        raise exception.InvalidRequest(field=field,
                                       reason=f"{directory}: cannot list: {e.strerror}") from None
    entries: list[ProviderConfig] = []
    warnings: list[str] = []
    seen: dict[tuple[str | None, str | None], ProviderConfig] = {}
    for name in names:
        path = os.path.join(directory, name)
        found, file_warnings = load_file(path)
        warnings += file_warnings
        for config in found:
            other = seen.get((config.name, config.uuid))
            if other is not None:
                raise ProviderConfigError(
                    config.source, f"providers[{config.index}].identification",
                    f"{config.identity} is also identified by {other.where}: a provider "
                    f"is configured once")
            seen[(config.name, config.uuid)] = config
            entries.append(config)
    return ProviderConfigs(entries=tuple(entries), warnings=tuple(warnings))


# -- applying them to this host's providers --------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Applied:
    """A report's providers with the configs applied."""

    root_traits: frozenset[str]
    root_inventories: Mapping[str, Inventory]
    providers: list[dict]                      # the children, in the fleet format
    applied: Mapping[str, ProviderConfig]      # provider name -> the entry applied to it
    warnings: list[str]


def apply(configs: Sequence[ProviderConfig], node: str, children: Sequence[dict]) -> Applied:
    """Add each entry's inventories and traits to the provider it identifies:
    ``node`` (the root) or one of ``children`` (fleet-format providers with a
    ``name`` and maybe a ``uuid``). Raises ProviderConfigError when two entries
    identify the same provider (by name and by uuid)."""
    names = {node} | {c["name"] for c in children}
    by_uuid = {c["uuid"]: c["name"] for c in children if c.get("uuid")}
    applied: dict[str, ProviderConfig] = {}
    warnings: list[str] = []
    for config in (c for c in configs if c.uuid != COMPUTE_NODE):
        target = config.name if config.name in names else by_uuid.get(config.uuid)
        if target is None:
            hint = "" if config.name is not None else (
                f" (the node itself is identified by uuid {COMPUTE_NODE} or by its name)")
            warnings.append(f"{config.where}: node {node} has no provider with "
                            f"{config.identity}{hint}; ignored")
            continue
        other = applied.get(target)
        if other is not None:
            raise ProviderConfigError(
                config.source, f"providers[{config.index}].identification",
                f"{config.identity} is provider {target}, which {other.where} identifies "
                f"by {other.identity}: a provider is configured once")
        applied[target] = config
    for config in (c for c in configs if c.uuid == COMPUTE_NODE):
        # the default for the node: an entry naming the root wins over it
        applied.setdefault(node, config)
    out = []
    for child in children:
        config = applied.get(child["name"])
        if config is None:
            out.append(dict(child))
            continue
        merged = dict(child, traits=sorted(set(child.get("traits") or ()) | config.traits))
        invs = dict(child.get("inventories") or {})
        invs.update({rc: inv.to_primitive() for rc, inv in config.inventories.items()})
        if invs:
            merged["inventories"] = invs
        out.append(merged)
    root = applied.get(node)
    return Applied(root_traits=root.traits if root else frozenset(),
                   root_inventories=dict(root.inventories) if root else {},
                   providers=out, applied=applied, warnings=warnings)
