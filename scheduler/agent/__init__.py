"""berth-agent: the compute-side reporter (doc/source/admin/agent.rst).

``kernel`` reads the kernel's own files under configurable roots; ``cpus``,
``memory``, ``pci`` and ``platform`` turn them into facts; ``host`` builds the
report in the fleet format (the same payload ``report_compute_node`` and
``report_pci_devices`` take); ``reporter`` sends it, heartbeats in between and
backs off while the broker or the daemon is away.
"""
