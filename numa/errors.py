"""Errors of the NUMA domain.

``NumaError`` is a bad value in a topology, a flavor extra spec or an image property:
the scheduler turns it into ``InvalidRequest`` naming ``field``.
"""
from __future__ import annotations


class NumaError(ValueError):
    """A NUMA value is invalid: ``field`` names it, ``reason`` says what was expected."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
