"""Wiring for the project's own tests: the lab fixture and the rule that makes lab tests mandatory.

With GNC_REQUIRE_LAB=1 (set by .ci/run) a test that needs root or namespaces fails instead of
skipping when they are missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tiers, xdist_groups
from tests.installed import Installed, build_distributions, install
from tests.lab import every_node
from tests.lab.builder import USERLANDS, Lab, lab_available, userland_available
from tests.lab.gpu_nodes import require_two_cpu_gpu_lab
from tests.lab.nodes import specs


def pytest_configure(config: pytest.Config) -> None:
    xdist_groups.register(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return xdist_groups.workers()


@pytest.hookimpl(tryfirst=True)  # before -m chooses by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark(items)
    xdist_groups.publish(config, xdist_groups.assign(items))


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
    with lab.running():
        yield lab


@pytest.fixture(scope="session")
def every_node_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, list[str]]]:
    """tests/lab/every_node.py: every kind of lab node on every node userland (the lab and its base names)."""
    require_two_cpu_gpu_lab()
    for userland in USERLANDS:
        require_or_skip(userland_available(userland))
    lab, bases = every_node.build(Path(tmp_path_factory.mktemp("everynode")))
    with lab.running():
        yield lab, bases


@pytest.fixture(scope="session")
def every_node_collected(every_node_lab, tmp_path_factory: pytest.TempPathFactory) -> every_node.Collected:
    """One collection of the whole every-node lab, judged offline once."""
    lab, bases = every_node_lab
    return every_node.collect(lab, bases, Path(tmp_path_factory.mktemp("everynode-collected")))


@pytest.fixture(scope="session")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist), built once per test session from a copy of the source tree."""
    return build_distributions(tmp_path_factory.mktemp("dists"))


@pytest.fixture(scope="session")
def installed_wheel(distributions: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return install(distributions[0], tmp_path_factory.mktemp("wheel-venv") / "venv")


@pytest.fixture(scope="session")
def installed_sdist(distributions: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return install(distributions[1], tmp_path_factory.mktemp("sdist-venv") / "venv")
