"""ImagePropertiesWeigher: weigh hosts by how many of their instances run images
with the same properties as the request's (Nova's weigher of that name).

A host's raw weight: for every instance on it and every image property
(name and value) that instance's image shares with the request's, add the
property's weight — from ``[filter_scheduler] image_props_weight_setting``
(``name=ratio`` pairs; properties not listed weigh 0) or 1 when the setting is
empty. A positive ``image_props_weight_multiplier`` packs instances of alike
images together, a negative one spreads them; the default 0.0 turns the
weigher off. An aggregate's ``image_props_weight_multiplier`` metadata
overrides it for its hosts. The instances' image properties come from the
requests their allocations answered; the host manager keeps them only when
this weigher is enabled.
"""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import SKIP, BaseWeigher
from scheduler.weights.metrics import parse_weight_setting

SETTING_FIELD = "filter_scheduler.image_props_weight_setting"

image_props_weight_opts = [
    cfg.FloatOpt("image_props_weight_multiplier",
                 default=0.0,
                 help="Multiplier of ImagePropertiesWeigher (instances on the host whose "
                      "images share properties with the request's). Positive packs alike "
                      "images together, negative spreads them; 0.0 (the default) turns it "
                      "off. An aggregate's image_props_weight_multiplier metadata "
                      "overrides it for its hosts."),
    cfg.ListOpt("image_props_weight_setting",
                default=[],
                help="Image properties ImagePropertiesWeigher compares, as name=ratio "
                     "pairs, e.g. 'os_distro=10, hw_machine_type=2'; a shared property "
                     "adds its ratio per instance. Empty: every property weighs 1."),
]

cfg.CONF.register_opts(image_props_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", image_props_weight_opts)]


class ImagePropertiesWeigher(BaseWeigher):
    """Raw weight: the weighted count of (instance, shared image property) pairs."""

    multiplier_option = "image_props_weight_multiplier"
    aggregate_multiplier_key = "image_props_weight_multiplier"
    #: Asks the host manager to keep each host's instances' image properties.
    reads_instance_images = True

    def __init__(self, conf) -> None:
        super().__init__(conf)
        parse_weight_setting(conf.filter_scheduler.image_props_weight_setting,
                             SETTING_FIELD)                    # fail at start-up

    def prepare(self, request):
        props = request.spec.image.properties
        if not props:
            return SKIP
        setting = dict(parse_weight_setting(
            request.conf.filter_scheduler.image_props_weight_setting, SETTING_FIELD))
        pairs = {}
        for name, value in props.items():
            ratio = setting.get(name, 0.0) if setting else 1.0
            if ratio:
                pairs[(name, str(value))] = ratio
        return pairs or SKIP

    def weigh(self, host, pairs) -> float:
        total = 0.0
        for props in host.instance_images.values():
            for pair, ratio in pairs.items():
                if pair in props:
                    total += ratio
        return total
