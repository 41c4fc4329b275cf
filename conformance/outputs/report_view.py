"""What the report's sections are made from: the run's results document and what it does not say."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from conformance.outputs.fleet_view import (
    FleetSummary,
)


@dataclass(frozen=True)
class ReportView:
    """What the report's summary shows: the run's results document (as results.json holds it), and the two
    things about the run that the document does not say."""

    doc: dict[str, Any]
    snapshot_dir: str | None = None  # a replay of this snapshot folder
    wrote: bool = False  # the run created acceptance pods
    # a merge streamed node by node (conformance.run.streamed): `doc` holds its first non-accepted nodes and
    # the results with figures only; these say what the page leaves to results.json and junit.xml
    fleet: FleetSummary | None = None
    left_out: dict[str, int] | None = None
    outcomes: Counter[str] | None = None  # every result's outcome, where `doc` holds only some results

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.doc["results"]

    @property
    def node_names(self) -> list[str]:
        return [n["name"] for n in self.doc["nodes"]]
