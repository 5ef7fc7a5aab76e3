"""PCIWeigher: keep scarce PCI devices for the requests that need them."""
from __future__ import annotations

import numpy as np
from oslo_config import cfg

from scheduler.weights import BaseWeigher

opts = [
    cfg.FloatOpt("pci_weight_multiplier", default=1.0, min=0.0,
                 help="Multiplier for PCIWeigher. Requests without PCI devices prefer "
                      "hosts with fewer free devices (ideally none); requests with PCI "
                      "devices prefer hosts where fewer free devices remain afterwards. "
                      "Must be >= 0; 0 disables it. Aggregate metadata key "
                      "pci_weight_multiplier overrides it per host."),
]
cfg.CONF.register_opts(opts, group="filter_scheduler")
LIST_OPTS = [("filter_scheduler", opts)]


class PCIWeigher(BaseWeigher):
    """Raw weight: minus the free PCI devices left on the host after the request."""

    multiplier_option = "pci_weight_multiplier"
    aggregate_multiplier_key = "pci_weight_multiplier"

    def prepare(self, request) -> int:
        """How many devices the request takes."""
        return sum(r.count for r in request.spec.pci_requests)

    def weigh_vector(self, cols, wanted: int):
        if wanted:
            return -np.maximum(cols.pci_free - wanted, 0.0)
        free = cols.pci_free
        if not free.any():
            return 0.0          # no host has a free device: the same weight everywhere
        return -free
