"""The parts a run is made of, each with one job, as the ways of starting one build them (conformance.run.starts)
and before `Run` (conformance.session) composes them: the fleet (nodes and profiles), the fact store (collection,
snapshots, xdist), the pod view (pods, exec, acceptance pods), the measurements (H2D, latency), the site checks,
the ledger (results, waivers, diff, replay), the fleet's identity (identity records, drift), the console
(progress lines), and what the start learned on the way: the API grants, a replay's spool to stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.run.console import Console
from conformance.run.facts_store import FactStore
from conformance.run.fleet import Fleet
from conformance.run.identities import FleetIdentity
from conformance.run.ledger import Ledger
from conformance.run.measurements_store import MeasurementStore
from conformance.run.pod_view import PodView
from conformance.run.site_checks import SiteChecks


@dataclass
class RunParts:
    fleet: Fleet
    store: FactStore
    pods: PodView
    measurements: MeasurementStore
    site: SiteChecks
    ledger: Ledger
    identities: FleetIdentity
    console: Console
    api_access: list[str] = field(default_factory=list)  # the API grants the run relies on, as the server answered
    streamed: Any = None  # a replay's NodeSpool, where it is streamed (conformance.run.streamed)
