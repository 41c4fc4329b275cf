"""Under pytest-xdist, every check of one node runs on one worker, so that each node is collected once (one SSH
session, one collector run) however many workers there are.

pytest-xdist's own `--dist loadgroup` groups by the `xdist_group` mark by appending "@group" to each test's node id
on the worker; from pytest 9.2 a node id is a structured value and that append no longer takes (pytest-xdist issue
1386), so every check went to whichever worker was free and each node was collected by every worker. This scheduler
needs no mark: the controller reads the node from the test's own parameter id, which is the node's name or starts
with "NAME/" (plugin.pytest_generate_tests: NODE, NODE/ENDPOINT, NODE/RULE, NODE/NAMESPACE/POD/CONTAINER)."""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling


def node_scope(nodeid: str, names: frozenset[str]) -> str:
    """The node a test's id names (its parameter id up to the first "/", when that is an audited node), else the
    id itself (a test of its own)."""
    test = nodeid.rsplit("::", 1)[-1]
    start = test.find("[")
    if start < 0 or not test.endswith("]"):
        return nodeid
    node = test[start + 1 : -1].split("/", 1)[0]
    return node if node in names else nodeid


class NodeScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with the node as the scope: a node's checks are one unit of work."""

    def __init__(self, config: Any, log: Any, names: frozenset[str]) -> None:
        super().__init__(config, log)
        self.names = names

    def _split_scope(self, nodeid: str) -> str:
        return node_scope(nodeid, self.names)
