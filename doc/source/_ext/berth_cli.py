"""``.. berth-argparse:: module:function``: a command-line reference generated
from an argparse parser.

The function returns the ``argparse.ArgumentParser`` the command itself uses
(``scheduler.cmd.manage:build_parser``, ``scheduler.cmd.client:build_parser``),
so the reference cannot drift from the program. Every command and subcommand
becomes a section (usage, description, then each argument as a ``program`` /
``option`` pair of Sphinx's standard domain, so ``:option:`` can link to it).
"""
from __future__ import annotations

import argparse
import importlib

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

#: Section adornments, outermost first (the page's own title uses ``=`` and ``-``).
_ADORNMENTS = "~^\"'`"


def _parser(target: str) -> argparse.ArgumentParser:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)()


def _subcommands(parser: argparse.ArgumentParser):
    """(name, help, parser) of each subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name) or "", sub


def _literal(text: str) -> str:
    return "``" + text.replace("``", "` `") + "``"


def _option_name(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    """The argument as argparse's help shows it (``--compare A.conf B.conf``)."""
    return parser._get_formatter()._format_action_invocation(action)


def _plain(text: str) -> str:
    """Help text is plain text, not reStructuredText: escape the markup."""
    for char in "\\*`|_":
        text = text.replace(char, "\\" + char)
    return text


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    if "%(" in text:
        params = dict(vars(action), prog=parser.prog)
        text = text % params
    return _plain(text)


def _rst(parser: argparse.ArgumentParser, prog: str, depth: int, title: str) -> list[str]:
    lines: list[str] = []
    if depth:       # the command itself is the page's own section
        adornment = _ADORNMENTS[min(depth - 1, len(_ADORNMENTS) - 1)]
        heading = _literal(title)
        lines += [heading, adornment * len(heading), ""]
    prefix = "usage: "
    usage = parser.format_usage().strip().removeprefix(prefix).splitlines()
    usage = usage[:1] + [line[len(prefix):] if line.startswith(" " * len(prefix)) else line
                         for line in usage[1:]]
    lines += ["::", ""] + ["   " + line for line in usage] + [""]
    if parser.description:
        lines += [_plain(parser.description), ""]
    lines += [f".. program:: {prog}", ""]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        lines += [f".. option:: {_option_name(action, parser)}", ""]
        text = _help(action, parser)
        if text:
            lines += ["   " + line for line in text.splitlines()] + [""]
        else:
            lines += ["   (no description)", ""]
    if parser.epilog:
        lines += [_plain(parser.epilog), ""]
    for name, text, sub in _subcommands(parser):
        sub_lines = _rst(sub, f"{prog} {name}", depth + 1, f"{prog} {name}")
        if text and not sub.description:
            # the one-line help of the subcommand stands in for a description
            at = sub_lines.index(f".. program:: {prog} {name}")
            sub_lines[at:at] = [_plain(text[0].upper() + text[1:]) + ".", ""]
        lines += sub_lines
    return lines


class ArgparseDirective(SphinxDirective):
    """``.. berth-argparse:: module:function`` with an optional ``:prog:``."""

    required_arguments = 1
    option_spec = {"prog": lambda text: text.strip()}

    def run(self) -> list[nodes.Node]:
        parser = _parser(self.arguments[0])
        prog = self.options.get("prog", parser.prog)
        parser.prog = prog
        content = StringList()
        for i, line in enumerate(_rst(parser, prog, 0, prog)):
            content.append(line, f"<berth-argparse {self.arguments[0]}>", i)
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, content, node)
        return node.children


def setup(app):
    app.add_directive("berth-argparse", ArgparseDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
