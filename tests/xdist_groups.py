"""How the project's own tests share the machine under pytest-xdist (README command 2 runs them on every CPU).

Tests that share something built once per session (the main lab, the every-node lab, the built wheel and sdist) or
per module (a module's own lab, on the module's own subnets) must run on one worker: two copies of one lab would
claim the same addresses at once, and each copy costs minutes. So every module is one group (pytest-xdist's
`xdist_group` mark, scheduled by `--dist loadgroup`), modules that use one session resource are one group together,
and the groups known to be longest start first (benchmarks/RESULTS.md, issue 60), so that no long group is left to
start when the others are done. Without xdist the marks do nothing and only the order changes, module by module."""

from __future__ import annotations

import pytest

# session fixtures (tests/conftest.py) -> the group of every module that uses them
SHARED = {
    "every_node_lab": "every-node",
    "every_node_collected": "every-node",
    "lab": "lab",
    "distributions": "installed",
    "installed_wheel": "installed",
    "installed_sdist": "installed",
}
# the longest groups, measured (about 190 s, 120 s and 110 s of one worker on the 2-core CI machine): started first
FIRST = ("every-node", "installed", "lab")


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def assign(items: list[pytest.Item]) -> None:
    """Mark each item with its module's group and put the longest groups first, keeping each module's items
    together and in order (a module's fixtures are set up once)."""
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
    for item in items:
        item.add_marker(pytest.mark.xdist_group(name=group[item]))
    rank = {g: i for i, g in enumerate(FIRST)}
    items.sort(key=lambda i: rank.get(group[i], len(FIRST)))
