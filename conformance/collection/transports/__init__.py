"""How the collector reaches a node: one execution that reads the script from stdin."""

from conformance.collection.transports.base import ExecResult, Transport

__all__ = ["ExecResult", "Transport"]
