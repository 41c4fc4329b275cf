"""The figures: H2D bandwidth heatmaps per node and GPU, and the endpoint latency histograms."""

from __future__ import annotations

from conformance.outputs.fleet_view import (
    e,
)
from conformance.outputs.report_view import ReportView
from conformance.outputs.svg import heatmap, histogram


def latency_section(run: ReportView) -> str:
    """One histogram per measured endpoint, with P50/P99(/P99.9) marked, and the numbers."""
    figures = []
    for r in run.results:
        m = r.get("metrics") or {}
        if r["check"] != "LATENCY-JITTER" or not m.get("samples_ms"):
            continue
        marks = {"P50": m["p50_ms"], "P99": m["p99_ms"]}
        if m.get("p99_9_ms") is not None:
            marks["P99.9"] = m["p99_9_ms"]
        name = f"{r['node']} / {r['subject'].get('endpoint', '')}"
        svg = histogram(m["samples_ms"], marks, title=f"{name}: {m['samples']} requests")
        p999 = f"{m['p99_9_ms']} ms" if m.get("p99_9_ms") is not None else f"n/a ({e(m.get('p99_9_note', ''))})"
        figures.append(
            f"<figure style='display:inline-block;margin:4px 12px 8px 0'>{svg}<figcaption>{e(name)}: "
            f"<b>{e(r['outcome'])}</b>; P50 {m['p50_ms']} ms, P99 {m['p99_ms']} ms, P99.9 {p999}, mean "
            f"{m['mean_ms']} ms, jitter coefficient {m['jitter_coefficient']}, errors {m['errors']}/{m['sent']}"
            "</figcaption></figure>"
        )
    if not figures:
        return ""
    return (
        "<h2>Workload latency</h2><p>Percentiles by linear interpolation between closest ranks; jitter "
        "coefficient = standard deviation / mean of successful requests.</p>" + "".join(figures)
    )


def bandwidth_section(run: ReportView) -> str:
    """Per node, the GPU x NUMA node H2D matrix as a heat map, with its verdict."""
    figures = []
    for r in run.results:
        m = (r.get("metrics") or {}).get("h2d_matrix")
        if r["check"] != "GPU-H2D-NUMA-MATRIX" or not m or not m.get("gpus"):
            continue
        svg = heatmap(
            m["gpus"],
            [f"node{n}" for n in m["nodes"]],
            m["gbps"],
            [m["nodes"].index(loc) if loc in m["nodes"] else None for loc in m["local"]],
            title=f"{r['node']}: H2D bandwidth per GPU and NUMA node",
        )
        notes = "".join(f"<br>{e(n)}" for n in m.get("notes", [])[:20])
        figures.append(
            f"<figure style='display:inline-block;margin:4px 12px 8px 0'>{svg}<figcaption>{e(r['node'])}: "
            f"<b>{e(r['outcome'])}</b> {e(r['message'])}{notes}</figcaption></figure>"
        )
    if not figures:
        return ""
    return (
        "<h2>H2D bandwidth</h2><p>Pinned host-to-device copies, median of samples, decimal GB/s, the measuring "
        "process bound to each NUMA node in turn (CPU affinity and memory policy).</p>" + "".join(figures)
    )
