"""Berth's scheduler: RPC service, filter scheduler, host states, plugins.

Eventlet warns on import that it is deprecated. Berth's design runs on it by
default (and supports the threading backend too), so the warning is not
actionable for an operator and is silenced here, once, for every entry point.
"""
import warnings

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
