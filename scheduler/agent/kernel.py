"""Reading the kernel's own files (sysfs, procfs) under configurable roots.

Tests point the roots at fake trees kept under ``tests/``; on a host they are
``/sys`` and ``/proc``. Missing files read as ``None``: the kernel leaves out
what a machine does not have (no ``node`` directory without NUMA, no
``topology`` for an offline CPU).
"""
from __future__ import annotations

import os
import re

from numa.errors import NumaError
from numa.request import parse_cpu_spec

# Upper bound for CPU numbers in lists (the kernel's NR_CPUS is at most 8192).
MAX_CPUS = 1 << 16

_NUMBERED = re.compile(r"^([a-z]+)(\d+)$")


class KernelTreeError(Exception):
    """A kernel file holds something the agent cannot read (the path says which)."""


def parse_cpu_list(text: str, field: str) -> frozenset[int]:
    """CPU numbers from a list like ``0-3,8-11`` or ``0-7,^2`` (empty: none).

    The kernel's cpulist files and Nova-style ``cpu_dedicated_set`` values use
    the same syntax (the latter may exclude with ``^``); raises ``NumaError``.
    """
    if not text.strip():
        return frozenset()
    return parse_cpu_spec(text.strip(), field, MAX_CPUS)


class KernelTree:
    """Paths and typed reads under one sysfs root and one procfs root."""

    def __init__(self, sysfs_root: str = "/sys", procfs_root: str = "/proc",
                 page_size_kb: int | None = None) -> None:
        self.sysfs_root = sysfs_root
        self.procfs_root = procfs_root
        self.page_size_kb = page_size_kb or os.sysconf("SC_PAGE_SIZE") // 1024

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs_root, *parts)

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs_root, *parts)

    @staticmethod
    def read(path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise KernelTreeError(f"{path}: cannot read: {e.strerror}") from None

    def read_int(self, path: str) -> int | None:
        text = self.read(path)
        if text is None or text == "":
            return None
        try:
            return int(text, 0)
        except ValueError:
            raise KernelTreeError(f"{path}: expected an integer, got {text[:40]!r}") from None

    def read_cpus(self, path: str) -> frozenset[int] | None:
        text = self.read(path)
        if text is None:
            return None
        try:
            return parse_cpu_list(text, path)
        except NumaError as e:
            raise KernelTreeError(f"{path}: {e.reason}") from None

    @staticmethod
    def numbered(directory: str, prefix: str) -> dict[int, str]:
        """``{n: path}`` of the ``<prefix><n>`` entries of ``directory`` (none if absent)."""
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found = {}
        for name in names:
            m = _NUMBERED.match(name)
            if m and m.group(1) == prefix:
                found[int(m.group(2))] = os.path.join(directory, name)
        return dict(sorted(found.items()))

    @staticmethod
    def listdir(directory: str) -> list[str]:
        try:
            return sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []

    @staticmethod
    def link_name(path: str) -> str | None:
        """The last component a symlink (e.g. ``physfn``) points to, or None."""
        try:
            return os.path.basename(os.readlink(path).rstrip("/"))
        except OSError:
            return None
