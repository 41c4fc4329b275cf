"""Root conftest: wiring only. The plugin itself is registered through the pytest11 entry point
(conformance.plugin), so `pytest suites/` and `conformance run` load the same code."""
