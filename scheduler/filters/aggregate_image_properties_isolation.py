"""AggregateImagePropertiesIsolation: images go only to aggregates that allow
their property values.

For every key of a host's aggregates' metadata (a value may list several,
separated by commas; several aggregates add up) that the request's image also
sets, the image's value must be one of the aggregate's. Keys the image does
not set, and hosts in no aggregate, pass. With
``aggregate_image_properties_isolation_namespace`` set, only metadata keys
starting with ``<namespace><separator>`` are compared (the image property has
the same full name, e.g. ``isolation.os_distro``).
"""
from __future__ import annotations

from oslo_config import cfg

from scheduler.filters import SKIP, BaseHostFilter

isolation_opts = [
    cfg.StrOpt("aggregate_image_properties_isolation_namespace",
               help="Only aggregate metadata keys in this namespace (followed by "
                    "aggregate_image_properties_isolation_separator) are compared with "
                    "image properties by AggregateImagePropertiesIsolation. Unset: every "
                    "key is compared."),
    cfg.StrOpt("aggregate_image_properties_isolation_separator",
               default=".",
               help="Separator between the namespace and the property name in the "
                    "aggregate metadata keys AggregateImagePropertiesIsolation compares."),
]

cfg.CONF.register_opts(isolation_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", isolation_opts)]


def aggregate_metadata(host) -> dict[str, set[str]]:
    """Every metadata key of the host's aggregates -> all its values (comma lists
    split, whitespace stripped)."""
    out: dict[str, set[str]] = {}
    for agg in host.aggregates:
        for key, value in agg.metadata.items():
            out.setdefault(key, set()).update(v.strip() for v in value.split(","))
    return out


class AggregateImagePropertiesIsolation(BaseHostFilter):
    """Removes hosts whose aggregates set an image property key to values that
    do not include the image's; hosts in the same aggregates are asked once."""

    # A host's aggregates don't change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        props = request.spec.image.properties
        if not props:
            return SKIP
        fs = request.conf.filter_scheduler
        namespace = fs.aggregate_image_properties_isolation_namespace
        prefix = None
        if namespace:
            prefix = namespace + (fs.aggregate_image_properties_isolation_separator or "")
        return (prefix, tuple(sorted(props.items())))

    def class_key(self, host):
        return host.aggregates

    def memo_key(self, state):
        return state

    def host_passes(self, host, state) -> str | None:
        if not host.aggregates:
            return None
        prefix, props = state
        metadata = aggregate_metadata(host)
        for key, value in props:
            if prefix is not None and not key.startswith(prefix):
                continue
            allowed = metadata.get(key)
            if allowed is not None and value and value not in allowed:
                return f"image property {key}={value} not allowed by the host's aggregates"
        return None
