"""gpu-node-conformance: a pytest-based conformance suite for Kubernetes GPU nodes."""

__version__ = "0.1.0"
