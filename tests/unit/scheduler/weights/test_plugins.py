"""Every filter and weigher named in setup.cfg loads by its entry point name."""
import pytest
from oslo_config import cfg
from stevedore import driver

from scheduler.filters import FILTER_NAMESPACE, BaseHostFilter
from scheduler.weights import WEIGHER_NAMESPACE, BaseWeigher

FILTERS = [
    "AllHostsFilter", "ComputeFilter", "RamFilter", "CoreFilter", "DiskFilter",
    "AggregateRamFilter", "AggregateCoreFilter", "AggregateDiskFilter",
    "AvailabilityZoneFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
    "AggregateInstanceExtraSpecsFilter", "SameHostFilter", "DifferentHostFilter",
    "ServerGroupAffinityFilter", "ServerGroupAntiAffinityFilter", "NumInstancesFilter",
    "AggregateNumInstancesFilter", "IoOpsFilter", "AggregateIoOpsFilter",
]
WEIGHERS = [
    "RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "NumInstancesWeigher",
    "HypervisorVersionWeigher", "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher", "BuildFailureWeigher",
]


@pytest.mark.parametrize("name", FILTERS)
def test_filter_entry_point(name):
    mgr = driver.DriverManager(FILTER_NAMESPACE, name, invoke_on_load=True,
                               invoke_args=(cfg.CONF,))
    assert isinstance(mgr.driver, BaseHostFilter)
    assert mgr.driver.name == name


@pytest.mark.parametrize("name", WEIGHERS)
def test_weigher_entry_point(name):
    mgr = driver.DriverManager(WEIGHER_NAMESPACE, name, invoke_on_load=True,
                               invoke_args=(cfg.CONF,))
    assert isinstance(mgr.driver, BaseWeigher)
    assert mgr.driver.name == name
    mgr.driver.base_multiplier()   # its option is registered


def test_options_listed():
    from scheduler import opts

    listed = {(group, o.name) for group, group_opts in opts.list_opts() for o in group_opts}
    for item in [("DEFAULT", "service_down_time"),
                 ("filter_scheduler", "max_instances_per_host"),
                 ("filter_scheduler", "max_io_ops_per_host"),
                 ("filter_scheduler", "ram_weight_multiplier"),
                 ("filter_scheduler", "build_failure_weight_multiplier"),
                 ("filter_scheduler", "soft_anti_affinity_weight_multiplier")]:
        assert item in listed
