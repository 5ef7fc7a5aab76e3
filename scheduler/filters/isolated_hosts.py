"""IsolatedHostsFilter: some images run only on some hosts.

``isolated_images`` (image ids) may run only on ``isolated_hosts`` (host
names). With ``restrict_isolated_hosts_to_isolated_images`` (the default) the
isolated hosts also take nothing but isolated images; without it they take
any image. A request without an image id runs an image that is not isolated.
"""
from __future__ import annotations

import numpy as np
from oslo_config import cfg

from scheduler.filters import SKIP, BaseHostFilter

isolated_opts = [
    cfg.ListOpt("isolated_images",
                default=[],
                help="Image ids that IsolatedHostsFilter lets run only on isolated_hosts."),
    cfg.ListOpt("isolated_hosts",
                default=[],
                help="Host names that IsolatedHostsFilter keeps for isolated_images."),
    cfg.BoolOpt("restrict_isolated_hosts_to_isolated_images",
                default=True,
                help="Whether isolated_hosts take isolated_images only (IsolatedHostsFilter). "
                     "False: they take any image, and isolated images still run only "
                     "on them."),
]

cfg.CONF.register_opts(isolated_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", isolated_opts)]

ISOLATED_IMAGE = "image {image} is isolated: not an isolated host"
ISOLATED_HOST = "isolated host: the image is not an isolated image"


def isolation(conf, image_id: str | None) -> tuple[frozenset[str], bool, str] | None:
    """(isolated hosts, whether those are the refused ones, reason), or None when
    every host passes."""
    fs = conf.filter_scheduler
    hosts = frozenset(h.strip() for h in fs.isolated_hosts if h.strip())
    images = {i.strip() for i in fs.isolated_images}
    restrict = fs.restrict_isolated_hosts_to_isolated_images
    if image_id is not None and image_id in images:
        return hosts, False, ISOLATED_IMAGE.format(image=image_id)
    if restrict and hosts:
        return hosts, True, ISOLATED_HOST
    return None


class IsolatedHostsFilter(BaseHostFilter):
    """Keeps isolated images on isolated hosts (and, by default, other images off
    them): one mask of the isolated hosts' rows."""

    run_filter_once_per_request = True

    def prepare(self, request):
        answer = isolation(request.conf, request.spec.image.id)
        return SKIP if answer is None else answer

    def refusals(self, cols, state):
        hosts, refuse_isolated, reason = state
        isolated = np.zeros(cols.n, dtype=bool)
        isolated[cols.host_indexes(sorted(hosts))] = True
        return [(reason, isolated if refuse_isolated else ~isolated)]
