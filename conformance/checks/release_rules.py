"""The daemons' releases as the rules judge them: a span of the releases each may run (conformance.facts.
daemon_release), with where it came from in the check's evidence, once. A rule judges under every release of the
span and is unknown only where they disagree (issue 58)."""

from __future__ import annotations

from typing import Any

from conformance.errors import FactUnavailable
from conformance.facts.daemon_release import Span


def _said(evidence: Any, lines: list[str]) -> None:
    if lines and lines[0] not in evidence.lines:
        evidence.add(*lines)


def _span(facts: Any, evidence: Any, fact: str, what: str) -> Span:
    try:
        known = getattr(facts, fact)
    except FactUnavailable as e:
        _said(evidence, [f"{what}: unknown ({e})"])
        return Span.any()
    _said(evidence, known.evidence())
    return known.span


def kubelet_span(facts: Any, evidence: Any) -> Span:
    """The releases the running kubelet may be (every release where nothing says), its sources in the evidence."""
    return _span(facts, evidence, "kubelet_release", "the kubelet's release")


def runtime_span(facts: Any, evidence: Any) -> Span:
    """The releases the running container runtime may be, its sources in the evidence."""
    return _span(facts, evidence, "runtime_release", "the container runtime's release")


def known_as(facts: Any, what: str = "kubelet") -> str:
    """How a message names what is known of the kubelet's (or the runtime's) release: `kubelet 1.31.2`, or that it is
    unknown with the first reason its sources give."""
    try:
        known = facts.kubelet_release if what == "kubelet" else facts.runtime_release
    except FactUnavailable as e:
        return f"the {what}'s release unknown ({e})"
    if known.span.known:
        return f"{what} {known.span}"
    reasons = [s.refused for s in known.sources if s.refused] or ["no source records it"]
    return f"the {what}'s release unknown ({reasons[0]})"
