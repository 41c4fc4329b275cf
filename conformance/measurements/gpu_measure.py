"""Measuring H2D bandwidth on a node: one more remote execution (the probe on stdin), opt-in only."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from conformance.collection.probes import payload
from conformance.config.inventory import NodeSpec
from conformance.errors import ParseError, TransportError
from conformance.facts.checkpoints import DeviceGrant, KubeletAssignments
from conformance.facts.gpu import Gpu, GpuFacts
from conformance.facts.topology import Topology
from conformance.facts.xid import pci_key

PLACEMENT_MIN_SHARE = 0.95  # of the sampled pages on the intended NUMA node, for a figure to count as local


@dataclass
class H2DRow:
    """One GPU measured from one NUMA node."""

    node: int
    gbps: float | None
    samples: list[float] = field(default_factory=list)
    binding: dict[str, Any] = field(default_factory=dict)
    pages_on: dict[str, int] | None = None
    error: str | None = None
    note: str | None = None
    cleanup_errors: list[str] = field(default_factory=list)

    @property
    def pages_node(self) -> int | None:
        """The NUMA node most of the pinned buffer's pages were on."""
        if not self.pages_on:
            return None
        key, _ = Counter(self.pages_on).most_common(1)[0]
        return int(key) if key.isdigit() else None

    def placement_problem(self) -> str | None:
        """Why this figure is not a verified measurement from `node` (CPU or memory not where asked, or
        where the pages are could not be checked), or None. At least PLACEMENT_MIN_SHARE of the sampled
        pages of the pinned buffer must be on the intended node (move_pages with no target nodes reports
        each page's node, man 2 move_pages)."""
        cpus = self.binding.get("cpu_error")
        if cpus:
            return f"CPU binding to node {self.node} failed: {cpus}"
        policy = self.binding.get("mem_policy", "")
        if not self.pages_on:
            return (
                "placement unverified: where the pinned buffer's pages are could not be read "
                f"(move_pages unavailable; memory policy: {policy})"
            )
        if "error" in self.pages_on:
            return f"placement unverified: {self.pages_on['error']} (memory policy: {policy})"
        total = sum(v for v in self.pages_on.values() if isinstance(v, int))
        here = self.pages_on.get(str(self.node), 0)
        landed = self.pages_node
        if landed is not None and landed != self.node:
            return (
                f"pinned buffer landed on NUMA node {landed}, not {self.node} ({here} of {total} sampled pages on node "
                f"{self.node}; memory policy: {policy})"
            )
        if not total or here < PLACEMENT_MIN_SHARE * total:
            where = ", ".join(f"node {k}: {v}" for k, v in sorted(self.pages_on.items()))
            return (
                f"pinned buffer only partly on NUMA node {self.node}: {here} of {total} sampled pages there ({where}); "
                f"at least {PLACEMENT_MIN_SHARE:.0%} needed (memory policy: {policy})"
            )
        return None


@dataclass
class H2DGpu:
    uuid: str
    bus_id: str | None
    rows: list[H2DRow] = field(default_factory=list)
    nvml_before: dict[str, Any] = field(default_factory=dict)
    nvml_after: dict[str, Any] = field(default_factory=dict)
    nvml_busy: dict[str, Any] = field(default_factory=dict)  # link state read while copies ran
    duration_s: float | None = None
    error: str | None = None
    note: str | None = None

    def row(self, node: int) -> H2DRow | None:
        return next((r for r in self.rows if r.node == node), None)


@dataclass
class H2DMeasurement:
    node: str
    gpus: dict[str, H2DGpu] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # uuid -> why it was not measured
    error: str | None = None
    duration_s: float | None = None
    library: str | None = None
    executions: int = 0  # remote executions spent (0 when no GPU was eligible)
    missing: dict[str, str] = field(default_factory=dict)  # planned GPUs the probe did not report: errors


PCI_ADDRESS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?$")


def _gpus_of(grant: DeviceGrant, gpus: list[Gpu]) -> list[Gpu] | None:
    """The GPUs a device grant names: by GPU UUID, by PCI address (passthrough plugins), a MIG device UUID
    (some GPU in MIG mode, or whose mode is unknown), [] for a device that is no GPU, None: a GPU
    resource whose id names no GPU this node lists (it could be any of them)."""
    device = grant.device.split("::")[0]  # the NVIDIA plugin's time-slicing replicas: UUID::N
    for g in gpus:
        pci = PCI_ADDRESS.match(device) and g.bus_id and pci_key(device) == pci_key(g.bus_id)
        if device == g.uuid or pci:
            return [g]
    if device.startswith("MIG-"):
        return [g for g in gpus if g.mig is not False] or None
    return None if grant.gpu_resource else []


def plan(gpus: GpuFacts, assignments: KubeletAssignments | str) -> tuple[list[str], dict[str, str]]:
    """(GPUs to measure, {GPU: why not}). Measuring needs an idle, whole GPU that the kubelet has not given
    to a pod. It fails closed: `assignments` as a str (why they could not be established) touches no GPU;
    a GPU device id that maps to no GPU, or a GPU DRA driver registered with the kubelet, counts every GPU
    as assigned."""
    if isinstance(assignments, str):
        why = f"what the kubelet assigned could not be established ({assignments}): not touched"
        return [], {g.uuid: why for g in gpus.gpus}
    taken: dict[str, str] = {}
    for grant in assignments.grants:
        mapped = _gpus_of(grant, gpus.gpus)
        if mapped is None:
            why = (
                f"device {grant.device!r} of {grant.resource} is assigned to {grant.holder} and names no GPU of this "
                "node (not a GPU UUID or PCI address): it could be any GPU, not touched"
            )
            mapped = gpus.gpus
        else:
            why = f"assigned by the kubelet to {grant.holder} ({grant.resource}): not touched"
        for g in mapped:
            taken.setdefault(g.uuid, why)
    if assignments.dra_drivers:
        why = (
            f"GPU DRA driver(s) {', '.join(assignments.dra_drivers)} registered with the kubelet: their claims are "
            "not mapped to GPUs here, so every GPU counts as assigned: not touched"
        )
        for g in gpus.gpus:
            taken.setdefault(g.uuid, why)
    measure, skipped = [], {}
    for g in gpus.gpus:
        if g.uuid in taken:
            skipped[g.uuid] = taken[g.uuid]
        elif "processes" in g.errors:
            skipped[g.uuid] = f"its compute processes could not be read ({g.errors['processes']}): not touched"
        elif g.processes:
            skipped[g.uuid] = (
                f"{len(g.processes)} compute process(es) running on it (pids {', '.join(map(str, g.processes[:5]))})"
            )
        elif g.mig:
            skipped[g.uuid] = "MIG mode is enabled: the copy would measure one slice, not the GPU"
        else:
            measure.append(g.uuid)
    return measure, skipped


def probe_spec(
    uuids: list[str], topology: Topology, gpu_profile: dict[str, Any], root: str, exclusive: frozenset[int] = frozenset()
) -> dict[str, Any]:
    """What the probe is asked to do. It binds itself to each NUMA node's CPUs except those the CPU manager
    gave to containers exclusively (cpu_manager_state): the probe must not run on a pinned pod's cores."""
    return {
        "root": root,
        "gpus": uuids,
        "numa": {str(n): sorted(c - exclusive) for n, c in sorted(topology.nodes.items()) if c - exclusive},
        "bytes": int(gpu_profile["h2d_buffer_mib"]) << 20,
        "copies": gpu_profile["h2d_copies"],
        "samples": gpu_profile["h2d_samples"],
        "warmup": gpu_profile["h2d_warmup"],
        "warmup_s": gpu_profile["h2d_warmup_s"],
        "budget_s": gpu_profile["h2d_budget_s"],
    }


def assemble_probe_lines(text: str) -> dict[str, Any]:
    """The probe's JSON lines (a header, one line per GPU as it was measured, an end line) as one
    document; lines after a cut connection or a timeout are simply absent. `complete`: the end line
    says the probe finished its work."""
    doc: dict[str, Any] = {"gpus": [], "complete": False}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            if n == len(text.splitlines()):
                doc["truncated"] = True  # the last line was cut mid-way
                break
            raise ParseError(f"line {n} is not JSON: {e}") from None
        if not isinstance(item, dict):
            raise ParseError(f"line {n} is not a JSON object")
        if "probe" in item:
            doc.update(item)
        elif "gpu" in item and isinstance(item["gpu"], dict):
            doc["gpus"].append(item["gpu"])
        elif "end" in item:
            doc["complete"] = item["end"] == "done"
            doc["end"] = item
            if "duration_s" in item:
                doc["duration_s"] = item["duration_s"]
    return doc


def parse_probe_output(node: str, text: str) -> H2DMeasurement:
    try:
        doc = assemble_probe_lines(text)
    except ParseError as e:
        raise ParseError(f"H2D probe output on node {node}: {e}") from None
    if doc.get("probe") != 2:
        raise ParseError(f"H2D probe output on node {node}: not a version-2 probe stream")
    error = doc.get("error")
    end = doc.get("end") or {}
    if not doc["complete"] and error is None:
        reason = (
            f"the probe stopped itself at its bound of {end.get('bound_s')} s (a GPU call never returned)"
            if end.get("end") == "timeout"
            else "the probe's output ended early"
        )
        error = f"{reason}; {len(doc['gpus'])} GPU(s) reported before that"
    m = H2DMeasurement(node=node, error=error, duration_s=doc.get("duration_s"), library=doc.get("library"))
    for g in doc.get("gpus") or []:
        if not isinstance(g, dict):
            continue
        uuid = str(g.get("uuid") or f"ordinal {g.get('ordinal')}")
        if g.get("skipped"):  # the probe's own busy gate: a skip with its reason, not a failure
            m.skipped[uuid] = str(g["skipped"])
            continue
        gpu = H2DGpu(
            uuid=uuid,
            bus_id=g.get("bus_id"),
            nvml_before=g.get("nvml_before") or {},
            nvml_after=g.get("nvml_after") or {},
            nvml_busy=g.get("nvml_busy") or {},
            duration_s=g.get("duration_s"),
            error=g.get("error"),
            note=g.get("note"),
        )
        for r in g.get("results") or []:
            gpu.rows.append(
                H2DRow(
                    node=int(r["node"]),
                    gbps=r.get("gbps"),
                    samples=list(r.get("samples_gbps") or []),
                    binding=r.get("binding") or {},
                    pages_on=r.get("pages_on"),
                    error=r.get("error"),
                    note=r.get("note"),
                    cleanup_errors=list(r.get("cleanup_errors") or []),
                )
            )
        m.gpus[uuid] = gpu
    return m


def measure_node(
    spec: NodeSpec,
    gpus: GpuFacts,
    topology: Topology,
    gpu_profile: dict[str, Any],
    assignments: KubeletAssignments | str,
) -> H2DMeasurement:
    """Run the probe on the node (one execution). Never raises: failures are in `error`. `assignments`:
    what the kubelet gave to pods (the probe stays off those CPUs and GPUs), or why that is unknown (then
    nothing is measured)."""
    from conformance.collection.collect import transport_for

    uuids, skipped = plan(gpus, assignments)
    exclusive = frozenset() if isinstance(assignments, str) else assignments.exclusive
    if not uuids:
        return H2DMeasurement(node=spec.name, skipped=skipped)
    spec_doc = probe_spec(uuids, topology, gpu_profile, spec.host_root, exclusive)
    timeout = float(gpu_profile["h2d_budget_s"]) * len(uuids) + 60
    started = time.monotonic()
    try:
        transport = transport_for(spec)
    except TransportError as e:
        return H2DMeasurement(node=spec.name, skipped=skipped, error=str(e))
    try:
        result = transport.run(
            ["python3", "-", json.dumps(spec_doc, separators=(",", ":"))], payload.program("h2d_bandwidth"), timeout
        )
    except TransportError as e:
        if not e.partial:
            return H2DMeasurement(node=spec.name, skipped=skipped, error=f"H2D probe: {e}")
        try:  # keep every GPU that was reported before the transport gave up
            m = parse_probe_output(spec.name, e.partial.decode("utf-8", "replace"))
        except ParseError:
            return H2DMeasurement(node=spec.name, skipped=skipped, error=f"H2D probe: {e}")
        m.error = f"H2D probe: {e}; {len(m.gpus)} GPU(s) reported before that"
        return _account(m, uuids, skipped, started)
    finally:
        transport.close()
    text = result.stdout.decode("utf-8", "replace")
    try:
        m = parse_probe_output(spec.name, text)
    except ParseError as e:
        err = result.stderr.decode("utf-8", "replace").strip()[-300:]
        return H2DMeasurement(node=spec.name, skipped=skipped, error=f"{e} (exit {result.exit_status}; {err})", executions=1)
    return _account(m, uuids, skipped, started)


def _account(m: H2DMeasurement, uuids: list[str], skipped: dict[str, str], started: float) -> H2DMeasurement:
    """Skips, the execution, and every planned GPU accounted for: measured, or an error saying it was not."""
    m.skipped.update(skipped)
    m.executions = 1
    for uuid in uuids:
        if uuid not in m.gpus and uuid not in m.skipped:
            reported = ", ".join(sorted(m.gpus)) or "none"
            m.missing[uuid] = f"planned but not reported by the probe (it reported: {reported})"
    m.duration_s = round(time.monotonic() - started, 3)
    return m
