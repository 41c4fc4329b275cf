"""Wiring for the project's own tests: the lab fixture and the rule that makes lab tests mandatory.

With GNC_REQUIRE_LAB=1 (set by .ci/run) a test that needs root or namespaces fails instead of
skipping when they are missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.builder import Lab, lab_available
from tests.lab.nodes import specs


def require_or_skip(reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get("GNC_REQUIRE_LAB") == "1":
        pytest.fail(f"GNC_REQUIRE_LAB=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("lab")))
    for spec in specs():
        lab.add(spec)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()
