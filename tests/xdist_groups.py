"""How the project's own tests share the machine under pytest-xdist (README command 2 runs them on every CPU).

Tests that share something built once per session (the main lab, the every-node lab, the built wheel and sdist) or
per module (a module's own lab, on the module's own subnets) must run on one worker: two copies of one lab would
claim the same addresses at once, and each copy costs minutes. So every module is one group (pytest-xdist's
`xdist_group` mark, scheduled by `--dist loadgroup`), modules that use one session resource are one group together,
and the groups known to be longest start first (benchmarks/RESULTS.md, issue 60), so that no long group is left to
start when the others are done. Without xdist only the order changes, module by module.

pytest-xdist's own `--dist loadgroup` no longer groups under pytest 9.2 (it appends "@group" to each node id, which
a structured node id ignores: pytest-xdist issue 1386), and its controller never sees the items, only their ids.
So each worker writes the groups it computed to a file the controller named (`pytest_configure_node`), and the
controller's scheduler (`ModuleGroups`, pytest-xdist's scope scheduling) takes each id's group from it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

GROUPS_KEY = "gnc_groups_file"  # workerinput: where a worker writes {node id: group}

# session fixtures (tests/conftest.py) -> the group of every module that uses them
SHARED = {
    "every_node_lab": "every-node",
    "every_node_collected": "every-node",
    "lab": "lab",
    "distributions": "installed",
    "installed_wheel": "installed",
    "installed_sdist": "installed",
    "installed": "installed",  # tests/test_installed.py: either of them, by parameter
}
# the longest groups, measured (about 190 s, 120 s and 110 s of one worker on the 2-core CI machine): started first
FIRST = ("every-node", "installed", "lab")


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def assign(items: list[pytest.Item]) -> dict[str, str]:
    """Each item's group ({node id: group}), the longest groups put first, each module's items kept together
    and in order (a module's fixtures are set up once)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            # a shared resource's name ("@lab") names the group; else the first module seen
            parent[rb if ra.startswith("@") else ra] = ra if ra.startswith("@") else rb

    for item in items:
        find(_module(item))
        for name in getattr(item, "fixturenames", ()):
            if name in SHARED:
                union(f"@{SHARED[name]}", _module(item))
    group = {item: find(_module(item)).lstrip("@") for item in items}
    rank = {g: i for i, g in enumerate(FIRST)}
    items.sort(key=lambda i: rank.get(group[i], len(FIRST)))
    return {item.nodeid: group[item] for item in items}


def publish(config: pytest.Config, groups: dict[str, str]) -> None:
    """On a worker: write the groups where the controller looks for them."""
    target = getattr(config, "workerinput", {}).get(GROUPS_KEY)
    if target:
        part = Path(f"{target}.{os.getpid()}")
        part.write_text(json.dumps(groups))
        part.replace(target)  # whole, whichever worker's comes last (they collected the same items)


class ModuleGroups(LoadScopeScheduling):
    """Scope scheduling with the groups the workers wrote as the scopes, in collection order (the longest first)."""

    def __init__(self, config: pytest.Config, log: Any, folder: Path) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False
        self.file = folder / "groups.json"
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:
            self.groups = json.loads(self.file.read_text())  # every worker has collected by now
        return self.groups.get(nodeid, nodeid)


class Controller:
    """The controller's side, registered when the tests run under pytest-xdist: the folder the workers write their
    groups to (removed at the end), given to each worker, and the scheduler that reads them."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gnc-xdist-groups-"))

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[GROUPS_KEY] = str(self.folder / "groups.json")

    @pytest.hookimpl(tryfirst=True)  # before the conformance plugin's scheduler (for audits) and pytest-xdist's
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> LoadScopeScheduling:
        return ModuleGroups(config, log, self.folder)

    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def workers() -> int:
    """`-n auto`: two workers per CPU, at most 4. The tests wait much of their time (on sshd, on the programs they
    start, on timeouts they prove), so on the 2-core CI machine 4 workers finished README command 2 in 8.5 min where
    2 took 10 (benchmarks/RESULTS.md, issue 60); more would only hold more labs under /tmp at once."""
    return min(4, 2 * (os.cpu_count() or 1))


def register(config: pytest.Config) -> None:
    """From pytest_configure: the controller's side when this process is pytest-xdist's controller."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Controller(), "gnc-xdist-groups")
