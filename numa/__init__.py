"""NUMA domain code: host and instance topologies, fitting, usage accounting.

Plain values in, new values out: nothing here mutates its arguments, reads config,
talks to the database or to RPC.
"""
