"""The documentation tree (doc/source) documents what the code has, and names
nothing the code does not have.

The configuration and policy references are generated when the tree is built
(oslo.config's and oslo.policy's Sphinx extensions), the CLI reference from
the argparse parsers: here we check that those pages are in the tree and are
generated from the right sources, that every option the code registers is in
the generator's listing, that every RPC method has its entry (with the exact
signature) and a policy rule, that every console script has its section, and
that the options and files the pages name exist.
"""
from __future__ import annotations

import configparser
import importlib
import inspect
import json
import pathlib
import re
import subprocess
import sys

import pytest

from scheduler import manager, rpc, rpcapi

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "doc" / "source"


def _page(name: str) -> str:
    return (DOC / name).read_text()


def _pages() -> dict[str, str]:
    """docname -> text of every page of the tree."""
    return {str(p.relative_to(DOC).with_suffix("")): p.read_text()
            for p in sorted(DOC.rglob("*.rst"))}


def _toctree_entries(docname: str, text: str, all_docs: set[str]) -> set[str]:
    """The pages a page's toctrees name (globs expanded), as docnames."""
    base = docname.rpartition("/")[0]
    found = set()
    for block in re.finditer(r"^\.\. toctree::\n((?:   .*\n|\n)+)", text, re.MULTILINE):
        lines = [line.strip() for line in block.group(1).splitlines()]
        glob = ":glob:" in lines
        for entry in lines:
            if not entry or entry.startswith(":"):
                continue
            target = entry.lstrip("/") if entry.startswith("/") else \
                (f"{base}/{entry}" if base else entry)
            if glob and "*" in target:
                pattern = re.compile(re.escape(target).replace(r"\*", "[^/]+") + "$")
                found |= {d for d in all_docs if pattern.match(d)}
            else:
                found.add(target)
    return found


def test_every_page_is_in_the_tree():
    """Reachable from the index through toctrees (an orphan page is not
    found, and a generated reference outside the tree is not read)."""
    pages = _pages()
    reached, todo = {"index"}, ["index"]
    while todo:
        name = todo.pop()
        for target in _toctree_entries(name, pages[name], set(pages)):
            assert target in pages, f"{name} names {target}, which does not exist"
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert set(pages) - reached == set(), sorted(set(pages) - reached)
    for generated in ("reference/config", "reference/policy", "reference/cli",
                      "reference/rpc-api", "reference/filters"):
        assert generated in reached


# -- configuration ------------------------------------------------------------------

def _generator_namespaces(conf_file: str) -> list[str]:
    """The ``namespace`` lines of an oslo generator file (a multi-valued key)."""
    text = (ROOT / conf_file).read_text()
    return re.findall(r"^namespace\s*=\s*(\S+)", text, re.MULTILINE)


def test_the_config_reference_is_generated_from_the_generator_file():
    assert re.search(r"^\.\. show-options::\n   :config-file: "
                     r"etc/berth/berth-config-generator\.conf$", _page("reference/config.rst"),
                     re.MULTILINE)
    namespaces = _generator_namespaces("etc/berth/berth-config-generator.conf")
    assert {"berth.scheduler", "berth.db"} <= set(namespaces)


_REGISTERED = """
import importlib, json, pkgutil
from oslo_config import cfg, generator
# the libraries first: what they register on import is theirs, not Berth's
import oslo_concurrency.lockutils, oslo_db.options, oslo_log.log, oslo_messaging
import oslo_policy.policy


def registered():
    out = {("DEFAULT", name) for name in cfg.CONF._opts}
    for group in cfg.CONF._groups.values():
        out |= {(group.name, name) for name in group._opts}
    return out


before = registered()
import scheduler, db, pci, numa
for package in (scheduler, db, pci, numa):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if ".migrations" not in info.name:    # alembic's env, run by alembic only
            importlib.import_module(info.name)
listed = [[group or "DEFAULT", opt.dest]
          for _ns, groups in generator._list_opts(json.loads(NAMESPACES))
          for group, opts in groups for opt in opts]
print(json.dumps({"registered": sorted(registered() - before), "listed": listed}))
"""


@pytest.fixture(scope="module")
def options():
    """(group, option) that importing every module of Berth registers, and
    those the generator lists, from a fresh interpreter (other tests register
    their own on cfg.CONF)."""
    namespaces = _generator_namespaces("etc/berth/berth-config-generator.conf")
    code = _REGISTERED.replace("NAMESPACES", repr(json.dumps(namespaces)))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout.splitlines()[-1])
    return ({tuple(x) for x in data["registered"]}, {tuple(x) for x in data["listed"]})


def test_every_registered_option_is_in_the_reference(options):
    registered, listed = options
    missing = sorted(registered - listed)
    assert registered, "no option registered: the check would prove nothing"
    assert missing == [], f"options registered but not in the generated reference: {missing}"


def test_the_options_the_docs_name_exist(options):
    """``[group] name`` in the docs and the README names a real option."""
    _registered, listed = options
    names = {(g.lower(), n) for g, n in listed} | {("default", n) for n in ("host",)}
    texts = dict(_pages(), README=(ROOT / "README.rst").read_text())
    unknown = []
    for doc, text in texts.items():
        for group, rest in re.findall(r"\[(\w+)\] ((?:\w+(?:, |,? and | or |\s*/\s*)?)+)",
                                      text):
            if group.lower() in ("group", "service", "unit", "mariadbd"):
                continue
            for name in re.findall(r"\w+", rest):
                if name in ("and", "or") or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                    continue
                if (group.lower(), name) not in names and not _other_word(name):
                    unknown.append(f"{doc}: [{group}] {name}")
    assert unknown == [], unknown


def _other_word(name: str) -> bool:
    """Words that follow an option's name in running text, not option names."""
    return name in {"is", "in", "the", "to", "of", "on", "as", "with", "seconds", "s",
                    "a", "it", "when", "also", "by", "for", "set", "from", "each",
                    "metadata", "names", "overrides", "default", "exchange"}


# -- policy -------------------------------------------------------------------------

def _rpc_methods() -> dict[str, object]:
    return {name: getattr(manager.SchedulerManager, name)
            for name in dir(manager.SchedulerManager)
            if getattr(getattr(manager.SchedulerManager, name), "rpc_method", False)
            or name == "ping"}


def test_the_policy_reference_is_generated_and_every_method_has_a_rule():
    from scheduler import policy

    assert re.search(r"^\.\. show-policy::\n   :config-file: "
                     r"etc/berth/berth-policy-generator\.conf$", _page("reference/policy.rst"),
                     re.MULTILINE)
    assert _generator_namespaces("etc/berth/berth-policy-generator.conf") == ["berth"]
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert "berth = scheduler.policy:list_rules" in \
        setup["options.entry_points"]["oslo.policy.policies"]
    rules = {r.name for r in policy.list_rules()}
    missing = sorted(f"berth:{m}" for m in _rpc_methods() if m != "ping"
                     and f"berth:{m}" not in rules)
    assert missing == [], missing


# -- RPC API ------------------------------------------------------------------------

def _documented_signature(text: str, name: str) -> list[str]:
    m = re.search(rf"``{name}\(ctxt(?:, ([^`]*))?\)``", text)
    assert m, f"{name} has no ``{name}(ctxt, ...)`` entry in reference/rpc-api.rst"
    return [p.strip() for p in (m.group(1) or "").split(",") if p.strip()]


@pytest.mark.parametrize("name", sorted(_rpc_methods()))
def test_every_rpc_method_is_documented_with_its_signature(name):
    text = _page("reference/rpc-api.rst")
    documented = _documented_signature(text, name)
    method = inspect.unwrap(_rpc_methods()[name])
    params = [p for p in inspect.signature(method).parameters.values()
              if p.name not in ("self", "ctxt")]
    expected = [p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                for p in params if p.kind is not p.VAR_KEYWORD]
    assert documented[:len(expected)] == expected, (name, documented, expected)
    extra = documented[len(expected):]
    assert not extra or any(p.kind is p.VAR_KEYWORD for p in params), (name, extra)
    # and the client library has the method too
    assert hasattr(rpcapi.SchedulerAPI, name), name


def test_the_rpc_reference_is_of_the_current_version():
    text = _page("reference/rpc-api.rst")
    assert text.splitlines()[1] == f"RPC API ({manager.RPC_API_VERSION})"
    assert rpcapi.SchedulerAPI.VERSION == manager.RPC_API_VERSION
    topics = text[text.index("``[scheduler] topic``   "):text.index("Unset, every method")]
    compute = set(re.findall(r"``(\w+)``", topics.split("``admin_topic``")[0]))
    assert compute - {"scheduler"} == set(rpc.COMPUTE_METHODS)


# -- console scripts ----------------------------------------------------------------

def _console_scripts() -> dict[str, str]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    out = {}
    for line in setup["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = line.partition("=")
        out[name.strip()] = target.strip()
    return out


@pytest.mark.parametrize("script", sorted(_console_scripts()))
def test_every_console_script_has_its_section(script):
    text = _page("reference/cli.rst")
    heading = f"``{script}``"
    assert re.search(rf"^{re.escape(heading)}\n={{{len(heading)}}}$", text, re.MULTILINE), \
        f"{script} has no section in reference/cli.rst"
    module = importlib.import_module(_console_scripts()[script].partition(":")[0])
    if hasattr(module, "build_parser"):     # generated from the program's own parser
        assert f".. berth-argparse:: {module.__name__}:build_parser" in text, script


def test_the_agents_own_options_are_in_its_section():
    from scheduler.cmd import agent

    text = _page("reference/cli.rst")
    section = text[text.index("``berth-agent``\n"):]
    for opt in agent.cli_opts:
        assert f"``--{opt.name}``" in section, opt.name


# -- files --------------------------------------------------------------------------

_PATH = re.compile(r"(?<![\w/.-])((?:etc|tests|tools|doc|scheduler|db|numa|pci)/"
                   r"[\w./-]*\w)")


def test_the_files_the_docs_name_exist():
    texts = dict(_pages(), README=(ROOT / "README.rst").read_text())
    missing = []
    for doc, text in texts.items():
        for path in _PATH.findall(text):
            if path.startswith("doc/build") or "*" in path:
                continue
            if not (ROOT / path).exists():
                missing.append(f"{doc}: {path}")
    assert missing == [], missing


def test_the_readme_is_short_and_keeps_its_two_commands():
    text = (ROOT / "README.rst").read_text()
    assert len(text.splitlines()) <= 200
    assert "    pip install tox && tox -e demo\n" in text
    assert "    pip install tox && tox\n" in text
