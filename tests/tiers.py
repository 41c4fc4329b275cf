"""The project's test tiers (README): README command 2 runs every test; the fast tier, `pytest -m "not lab and not
slow"`, runs every module's unit tests in about a minute and a half. A test is in the lab tier when it needs root
and namespaces (marked `lab`, or using a lab), and slow when it proves the tool whole: the installed wheel and sdist,
a real browser, real containerd and rpm, strace's counts, old client releases in venvs of their own, or hundreds of
nodes (marked `slow`, or using the built distributions). Marks that follow from the fixtures a test uses are added
here, so that a new test on a lab or on the wheel lands in the right tier without anyone remembering to mark it."""

from __future__ import annotations

import pytest

LAB_FIXTURES = {"lab", "every_node_lab", "every_node_collected"}
INSTALLED_FIXTURES = {"distributions", "installed_wheel", "installed_sdist"}


def mark(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & LAB_FIXTURES:
            item.add_marker(pytest.mark.lab)
        if used & INSTALLED_FIXTURES:
            item.add_marker(pytest.mark.slow)
