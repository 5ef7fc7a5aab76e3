"""Errors of the PCI domain.

``PciError`` is a bad value in a request, an alias or a device description: the
scheduler turns it into ``InvalidRequest`` naming ``field``. ``PciClaimConflict``
is not the caller's fault: a device it wanted is no longer free (someone else
claimed it first); the caller rolls back and tries again or elsewhere.
"""
from __future__ import annotations


class PciError(ValueError):
    """A PCI value is invalid: ``field`` names it, ``reason`` says what was expected."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class PciDoesNotFit(PciError):
    """The PCI requests do not fit the given pools (``reason`` explains why)."""


class PciClaimConflict(Exception):
    """Devices were taken by another claim since they were chosen."""

    def __init__(self, reason: str, addresses: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.addresses = tuple(addresses)
