"""The `conformance` commands, one module each: its options beside its body (conformance.cli dispatches)."""
