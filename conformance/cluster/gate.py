"""The gate: a results document's verdicts turned into node state the scheduler honours. Opt-in, and the
suite's only write to nodes (the audit itself only reads).

Nodes join with a startup taint (the pattern of Karpenter's startupTaints and Cluster API); an accepted
node gets the label `gpu-conformance.io/accepted=<profile>` and loses that taint; a rejected, unreachable
or incomplete node keeps or gets it and loses the label. Either way the annotation
`gpu-conformance.io/verdict` records the run (time, profile, verdict, failing checks, digest of the results
document). Nothing else on the node is touched: other taints, labels and annotations stay as they are.

Each change is a JSON merge patch (RFC 7386, `kubectl patch node NAME --type merge -p ...`) carrying the
node's resourceVersion, so a node changed in between makes the API server answer 409 Conflict: the gate
reads the node again and recomputes, a few times. A dry run (the default) prints the patches and writes
nothing; a patch that changes nothing is not sent, so a second apply is a no-op.

It accepts a node only when the document's own rows for it show every check that blocks judged and none
failed (conformance.config.verdict.gate_verdict): a run narrowed with --select, -k or -m, or interrupted,
accepts no node it did not fully judge, whatever its node entry says.

Age is a node's own (issue 59): each node's collection time (its `collection.collected_at`; the document's
`started_at` where a node has none) decides whether that node may be accepted. A node audited longer ago than the
allowed age, or whose audit time cannot be read, is refused acceptance for it and keeps (or gets) its startup taint,
so one node whose audit Job did not run again holds back no other node of a merged fleet document.
Per node it refuses acceptance, with the reason: an audit older than the allowed age; a node whose label
`gpu-conformance.io/profile` names another profile than the one it was judged by. A per-node refusal stops
acceptance only: the label's removal and the taint still go on, so a node that should lose its acceptance loses it."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from conformance.cluster.api_errors import explain
from conformance.config.verdict import gate_verdict
from conformance.errors import UsageError

LABEL = "gpu-conformance.io/accepted"
PROFILE_LABEL = "gpu-conformance.io/profile"  # set by the operator: the profile a node must be judged by
ANNOTATION = "gpu-conformance.io/verdict"
TAINT = "gpu-conformance.io/unverified"
EFFECTS = ("NoSchedule", "NoExecute")
ROLE = "gpu-node-conformance-gate (deploy/gate-rbac.yaml)"
RETRIES = 5
# a label value: at most 63 characters, alphanumerics with - _ . inside (k8s.io/apimachinery validation.IsValidLabelValue)
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
TIMEOUT_S = 15.0


class DocumentRefused(UsageError):
    """The results document as a whole is not to be acted on: nothing is written."""


@dataclass
class GateSettings:
    taint: str = TAINT
    effect: str = "NoSchedule"  # NoExecute also evicts running pods: only if configured
    max_age_s: float = 24 * 3600.0
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class NodePlan:
    node: str
    verdict: str
    patch: dict[str, Any] | None  # None: nothing to change (or refused)
    refused: str | None = None  # why acceptance was refused (a revoking patch may still be planned)
    applied: bool = False
    note: str = ""
    not_judged: list[str] = field(default_factory=list)
    patch_failed: bool = False  # the API refused or did not answer the patch (`refused` says why)

    def kubectl(self) -> str:
        """The patch as a command line any shell takes as written, whatever the values hold."""
        body = json.dumps(self.patch, separators=(",", ":"), sort_keys=True)
        return f"kubectl patch node {shlex.quote(self.node)} --type merge -p {shlex.quote(body)}"


def results_digest(doc: dict[str, Any]) -> str:
    text = json.dumps(doc.get("results", []), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _audited(summary: dict[str, Any], doc: dict[str, Any]) -> tuple[datetime | None, str]:
    """When the node was audited (its collection time, else the document's start) and which field said so; None where
    neither can be read."""
    collected = (summary.get("collection") or {}).get("collected_at")
    field_name, text = ("collection.collected_at", collected) if collected else ("started_at", doc.get("started_at"))
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None, f"{field_name} {text!r}"
    return (when if when.tzinfo else when.replace(tzinfo=UTC)), field_name


def age_refusal(summary: dict[str, Any], doc: dict[str, Any], s: GateSettings) -> str | None:
    """Why this node's verdict is too old to act on (None: it is recent enough)."""
    when, said = _audited(summary, doc)
    if when is None:
        return f"when the node was audited cannot be read ({said}): its age is unknown"
    age = (s.now - when).total_seconds()
    if age > s.max_age_s:
        return (f"its audit is {age / 3600:.1f} h old ({said}), more than the allowed {s.max_age_s / 3600:g} h "
                "(--max-age): audit it again")  # fmt: skip
    return None


def plan_node(
    node: dict[str, Any],
    summary: dict[str, Any],
    doc: dict[str, Any],
    s: GateSettings,
    rows: list[dict[str, Any]],
    required: set[str],
) -> NodePlan:
    """The merge patch that brings `node` (the API's Node object) to what the document says of it: `summary`
    (its entry) and `rows` (its results), judged with `required` (the checks that block for its profile).
    Only what the gate owns is touched."""
    name = node["metadata"]["name"]
    verdict, unjudged = gate_verdict(summary, rows, required)
    refused = age_refusal(summary, doc, s)
    labels = node["metadata"].get("labels") or {}
    wanted_profile = labels.get(PROFILE_LABEL)
    if refused is None and wanted_profile is not None and wanted_profile != summary.get("profile"):
        refused = f"the node's {PROFILE_LABEL} label says {wanted_profile}; it was judged by {summary.get('profile')}"
    accepted = verdict == "accepted" and refused is None
    record = {
        "verdict": verdict if refused is None else f"{verdict}, acceptance refused",
        "profile": summary.get("profile"),
        "run_started_at": doc.get("started_at"),
        "results": results_digest(doc),
        "failing": summary.get("blocking", []),
    }
    if unjudged:
        record["not_judged"] = unjudged
    if refused:
        record["refused"] = refused
    metadata: dict[str, Any] = {}
    annotations = node["metadata"].get("annotations") or {}
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    if annotations.get(ANNOTATION) != text:
        metadata["annotations"] = {ANNOTATION: text}
    if accepted and labels.get(LABEL) != summary.get("profile"):
        metadata["labels"] = {LABEL: summary.get("profile")}
    elif not accepted and LABEL in labels:
        metadata["labels"] = {LABEL: None}  # merge patch: null removes the key
    patch: dict[str, Any] = {}
    taints = list((node.get("spec") or {}).get("taints") or [])
    ours = [
        {"key": t.get("key"), "value": t.get("value") or "", "effect": t.get("effect")} for t in taints if t.get("key") == s.taint
    ]
    others = [t for t in taints if t.get("key") != s.taint]
    value = verdict if refused is None else "refused"
    want = [] if accepted else [{"key": s.taint, "value": value, "effect": s.effect}]
    if ours != want:  # a merge patch replaces the whole list: the others go back as they were
        patch["spec"] = {"taints": others + want}
    if metadata:
        patch["metadata"] = metadata
    if not patch:
        return NodePlan(name, verdict, None, refused, note="already as the results say", not_judged=unjudged)
    patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"].get("resourceVersion")
    return NodePlan(name, verdict, patch, refused, not_judged=unjudged)


def gate(
    api: Any, doc: dict[str, Any], settings: GateSettings, apply: bool, required: Callable[[dict[str, Any]], set[str]]
) -> list[NodePlan]:
    """Plan (and with `apply`, make) each node's patch; a 409 Conflict re-reads the node and plans again.
    `required(summary)`: the checks that block for that node's profile."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    if settings.effect not in EFFECTS:
        raise UsageError(f"taint effect {settings.effect!r}: must be one of {', '.join(EFFECTS)}")
    bad = sorted({str(n.get("profile")) for n in doc.get("nodes", []) if n.get("verdict") == "accepted"
                  and (len(str(n.get("profile"))) > 63 or not LABEL_VALUE.fullmatch(str(n.get("profile"))))})  # fmt: skip
    if bad:
        raise UsageError(f"profile name(s) {', '.join(map(repr, bad))} cannot be the value of the label {LABEL} "
                         "(at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric): rename the "
                         "profile; nothing was patched")  # fmt: skip
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in doc.get("results", []):
        rows.setdefault(r.get("node"), []).append(r)
    core = client.CoreV1Api(api)
    plans = []
    for summary in doc.get("nodes", []):
        name = summary["name"]
        plan: NodePlan | None = None
        for attempt in range(RETRIES):
            try:
                node = api.sanitize_for_serialization(core.read_node(name, _request_timeout=TIMEOUT_S))
            except Exception as e:  # an API answer, or no answer (connection refused, timeout): named per node
                plan = NodePlan(name, summary["verdict"], None, _refusal(e, "get", name))
                break
            plan = plan_node(node, summary, doc, settings, rows.get(name, []), required(summary))
            if not apply or plan.patch is None:
                break
            try:
                core.patch_node(name, plan.patch, _content_type="application/merge-patch+json", _request_timeout=TIMEOUT_S)
                plan.applied = True
                break
            except ApiException as e:
                if e.status == 409 and attempt + 1 < RETRIES:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                plan.refused = _refusal(e, "patch", name)
                plan.patch_failed = True
                break
            except Exception as e:  # no answer: the patch may or may not have landed; the next run sees which
                plan.refused = _refusal(e, "patch", name)
                plan.patch_failed = True
                break
        assert plan is not None
        plans.append(plan)
    return plans


def _refusal(e: Exception, verb: str, name: str) -> str:
    status = getattr(e, "status", None)
    if status == 403:
        return (
            f"the Kubernetes API refused '{verb} nodes' for node {name} (403 Forbidden): bind the ClusterRole {ROLE} "
            "to this identity; the audit's own role (deploy/rbac.yaml) is read-only on purpose"
        )
    if status == 409:
        return f"node {name} kept changing while the gate patched it (409 Conflict {RETRIES} times): run the gate again"
    return explain(e, verb, "nodes", name)
