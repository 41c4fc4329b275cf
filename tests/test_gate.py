"""The gate against the wire-level fake API server, with RBAC evaluated from deploy/rbac.yaml and
deploy/gate-rbac.yaml: a dry run writes nothing; --apply writes exactly the patches the dry run showed;
taints, labels and annotations the gate does not own survive; a second apply changes nothing; a 409
Conflict is retried; stale or mismatched results are refused; without `patch nodes` the error names the
role to bind."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from conformance.checks import blocking_builtin_ids, required_of
from conformance.cluster.api import api_client
from conformance.cluster.gate import ANNOTATION, LABEL, PROFILE_LABEL, TAINT, GateSettings, gate
from conformance.config.kubernetes import KubeSpec
from tests.fakeapi import FakeApiServer, Subject, kubeconfig, node_object, serve
from tests.kube_fixtures import RBAC

GATE_RBAC = list(yaml.safe_load_all((Path(__file__).resolve().parent.parent / "deploy" / "gate-rbac.yaml").read_text()))
GATE_SA = "system:serviceaccount:gpu-node-conformance:gpu-node-conformance-gate"
BINDING = {  # bound as deploy/gate-rbac.yaml's comment says
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "gpu-node-conformance-gate"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-node-conformance-gate"},
    "subjects": [{"kind": "ServiceAccount", "name": "gpu-node-conformance-gate", "namespace": "gpu-node-conformance"}],
}
BLOCKS = blocking_builtin_ids(None)  # the checks that block for a profile whose fleet severity is unknown
FOREIGN_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def results(started: datetime | None = None) -> dict:
    when = (started or datetime.now(UTC)).isoformat(timespec="seconds")
    return {
        "schema_version": 1,
        "tool": {"name": "gpu-node-conformance", "version": "t"},
        "started_at": when,
        "nodes": [
            {"name": "gpu-ok", "verdict": "accepted", "profile": "default", "blocking": []},
            {"name": "gpu-bad", "verdict": "rejected", "profile": "default", "blocking": ["KUBELET-CPU-POLICY"]},
            {"name": "gpu-down", "verdict": "unreachable", "profile": "default", "blocking": []},
        ],
        "results": [
            # gpu-ok was judged on every check that blocks, and passed them all
            *(
                {"node": "gpu-ok", "check": c, "outcome": "passed", "severity": "high"}
                for c in sorted(blocking_builtin_ids(None))
            ),
            {"node": "gpu-bad", "check": "KUBELET-CPU-POLICY", "outcome": "failed", "severity": "critical"},
        ],
    }


@pytest.fixture
def cluster(tmp_path):
    api = FakeApiServer([*RBAC, *GATE_RBAC, BINDING], {"gate-token": Subject(GATE_SA), "audit-token": Subject(
        "system:serviceaccount:gpu-node-conformance:gpu-node-conformance")})  # fmt: skip
    for name in ("gpu-ok", "gpu-bad", "gpu-down"):
        node = node_object(name, gpus=8, labels={"team": "ml"})
        node["metadata"]["annotations"] = {"example.com/owner": "ml-platform"}
        node["spec"]["taints"] = [FOREIGN_TAINT, {"key": TAINT, "value": "joining", "effect": "NoSchedule"}]
        api.add_node(node)
    api.nodes["gpu-bad"]["metadata"]["labels"][LABEL] = "default"  # accepted by an earlier run
    with serve(api) as url:

        def client(token: str = "gate-token"):
            path = tmp_path / f"kubeconfig-{token}"
            path.write_text(kubeconfig(url, token))
            return api_client(KubeSpec(kubeconfig=str(path))), path

        yield api, client


def test_a_dry_run_writes_nothing_and_apply_writes_exactly_what_it_showed(cluster):
    api, client = cluster
    before = copy.deepcopy(api.nodes)
    doc = results()
    shown = gate(client()[0], doc, GateSettings(), apply=False, required=required_of)
    assert api.nodes == before
    assert not [r for r in api.requests if r[1] == "PATCH"]
    applied = gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert [p.patch for p in applied] == [p.patch for p in shown]
    ok, bad, down = (api.nodes[n] for n in ("gpu-ok", "gpu-bad", "gpu-down"))
    # accepted: the label, the annotation, and the startup taint gone; the foreign taint and labels stay
    assert ok["metadata"]["labels"][LABEL] == "default" and ok["metadata"]["labels"]["team"] == "ml"
    assert ok["spec"]["taints"] == [FOREIGN_TAINT]
    assert json.loads(ok["metadata"]["annotations"][ANNOTATION])["verdict"] == "accepted"
    assert ok["metadata"]["annotations"]["example.com/owner"] == "ml-platform"
    # rejected: tainted with its verdict, the earlier acceptance label removed, the failing checks named
    assert LABEL not in bad["metadata"]["labels"]
    assert bad["spec"]["taints"] == [FOREIGN_TAINT, {"key": TAINT, "value": "rejected", "effect": "NoSchedule"}]
    assert json.loads(bad["metadata"]["annotations"][ANNOTATION])["failing"] == ["KUBELET-CPU-POLICY"]
    assert down["spec"]["taints"][-1] == {"key": TAINT, "value": "unreachable", "effect": "NoSchedule"}
    # a second apply changes nothing: no patch is sent
    patches = len([r for r in api.requests if r[1] == "PATCH"])
    again = gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert [p.patch for p in again] == [None, None, None]
    assert len([r for r in api.requests if r[1] == "PATCH"]) == patches


def test_a_conflicting_write_is_read_again_and_retried(cluster):
    api, client = cluster
    api.concurrent_writes["gpu-ok"] = 2  # another writer changes the node twice between read and patch
    (plan, *_) = gate(client()[0], results(), GateSettings(), apply=True, required=required_of)
    assert plan.applied and plan.refused is None
    labels = api.nodes["gpu-ok"]["metadata"]["labels"]
    assert labels[LABEL] == "default" and "other.example/write-0" in labels and "other.example/write-1" in labels
    api.concurrent_writes["gpu-bad"] = 10
    # a later run (another start time, so another annotation): there is a patch to make, and it keeps conflicting
    plans = gate(client()[0], results(datetime.now(UTC) + timedelta(minutes=1)), GateSettings(), apply=True, required=required_of)
    assert "409 Conflict 5 times" in (plans[1].refused or "")


def test_a_node_audited_too_long_ago_is_refused_and_the_others_are_gated(cluster):
    """Issue 59 item 12: age is a node's. In a merged fleet document one node's audit Job did not run again: its
    collection is 30 h old. That node keeps its startup taint and is named as refused for its age; the others (their
    collections fresh) are gated, although the document began 30 h ago."""
    api, client = cluster
    doc = results(datetime.now(UTC) - timedelta(hours=30))
    fresh = datetime.now(UTC).isoformat(timespec="seconds")
    old = (datetime.now(UTC) - timedelta(hours=30)).isoformat(timespec="seconds")
    for n in doc["nodes"]:
        n["collection"] = {"collected_at": old if n["name"] == "gpu-bad" else fresh}
    doc["nodes"][1]["verdict"], doc["nodes"][1]["blocking"] = "accepted", []  # it was accepted 30 h ago
    doc["results"] = [r for r in doc["results"] if r["node"] != "gpu-bad"] + [
        {**r, "node": "gpu-bad"} for r in doc["results"] if r["node"] == "gpu-ok"
    ]
    plans = {p.node: p for p in gate(client()[0], doc, GateSettings(), apply=True, required=required_of)}
    assert plans["gpu-ok"].applied and plans["gpu-ok"].refused is None
    assert api.nodes["gpu-ok"]["metadata"]["labels"][LABEL] == "default"
    assert plans["gpu-bad"].refused.startswith("its audit is 30.0 h old (collection.collected_at), more than the allowed 24 h")
    assert LABEL not in api.nodes["gpu-bad"]["metadata"]["labels"]  # its acceptance of 30 h ago is withdrawn
    assert api.nodes["gpu-bad"]["spec"]["taints"][-1] == {"key": TAINT, "value": "refused", "effect": "NoSchedule"}


def test_stale_or_mismatched_results_are_refused(cluster):
    api, client = cluster
    before = copy.deepcopy(api.nodes)
    # a document whose nodes carry no collection time: its start decides each node's age; an unreadable one is unknown
    stale = {p.node: p for p in gate(client()[0], results(datetime.now(UTC) - timedelta(hours=30)), GateSettings(),
                                     apply=False, required=required_of)}  # fmt: skip
    assert all("30.0 h old (started_at)" in (p.refused or "") for p in stale.values()), stale
    broken = {**results(), "started_at": "yesterday"}
    unread = gate(client()[0], broken, GateSettings(), apply=False, required=required_of)
    assert all("cannot be read (started_at 'yesterday')" in (p.refused or "") for p in unread)
    assert api.nodes == before
    api.nodes["gpu-ok"]["metadata"]["labels"][PROFILE_LABEL] = "h100-h200-inference"
    (plan, *_) = gate(client()[0], results(), GateSettings(), apply=True, required=required_of)
    assert plan.refused == f"the node's {PROFILE_LABEL} label says h100-h200-inference; it was judged by default"
    # a refusal stops acceptance only: the startup taint stays (now saying why) and no acceptance label comes
    assert LABEL not in api.nodes["gpu-ok"]["metadata"]["labels"]
    assert api.nodes["gpu-ok"]["spec"]["taints"] == [FOREIGN_TAINT, {"key": TAINT, "value": "refused", "effect": "NoSchedule"}]
    assert before["gpu-ok"]["spec"]["taints"][-1]["value"] == "joining"


def test_without_patch_nodes_the_error_names_the_role_to_bind(cluster):
    api, client = cluster
    plans = gate(client("audit-token")[0], results(), GateSettings(), apply=True, required=required_of)
    assert all("bind the ClusterRole gpu-node-conformance-gate (deploy/gate-rbac.yaml)" in (p.refused or "") for p in plans)
    assert not any(LABEL in n["metadata"]["labels"] for n in (api.nodes["gpu-ok"],))


@pytest.mark.slow  # the command end to end, once per outcome
def test_the_command_prints_kubectl_patches_and_exits_by_outcome(cluster, tmp_path):
    api, client = cluster
    _, path = client()
    (tmp_path / "results.json").write_text(json.dumps(results()))
    args = [sys.executable, "-m", "conformance", "gate", str(tmp_path / "results.json"), "--kubeconfig", str(path)]
    dry = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert "kubectl patch node gpu-ok --type merge -p '" in dry.stdout and "dry run: nothing written" in dry.stdout
    assert not [r for r in api.requests if r[1] == "PATCH"]
    applied = subprocess.run([*args, "--apply"], capture_output=True, text=True, timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert api.nodes["gpu-ok"]["metadata"]["labels"][LABEL] == "default"
    later = results()
    later["nodes"][0] = dict(later["nodes"][0], verdict="rejected", blocking=["GPU-COUNT"])  # a change to make
    (tmp_path / "later.json").write_text(json.dumps(later))
    audit_only = [sys.executable, "-m", "conformance", "gate", str(tmp_path / "later.json"), "--apply", "--kubeconfig",
                  str(client("audit-token")[1])]  # fmt: skip
    refused = subprocess.run(audit_only, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "gpu-node-conformance-gate" in refused.stdout + refused.stderr


def test_run_gate_applies_the_runs_own_verdicts(cluster, tmp_path):
    from tests.test_cli_local import sample_host_root

    api, client = cluster
    _, path = client()
    root = sample_host_root(tmp_path / "root")
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"kubernetes: {{kubeconfig: {path}, discover: false, configz: off}}\n"
        f"nodes:\n  - name: gpu-ok\n    transport: local\n    host_root: {root}\n"
    )
    p = subprocess.run([sys.executable, "-m", "conformance", "run", "--inventory", str(inv), "--output", str(tmp_path / "out"),
                        "--gate", "apply"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr  # the sample node is rejected
    assert "gpu-ok" in p.stdout and "patched: kubectl patch node gpu-ok" in p.stdout, p.stdout
    node = api.nodes["gpu-ok"]
    assert node["spec"]["taints"] == [FOREIGN_TAINT, {"key": TAINT, "value": "rejected", "effect": "NoSchedule"}]


def test_a_refusal_does_not_block_revocation(cluster):
    """A node accepted earlier whose profile label now names another profile, or that a merge --expect never
    heard from, loses its acceptance: the label goes and the taint comes, the refusal named."""
    api, client = cluster
    api.nodes["gpu-ok"]["metadata"]["labels"][LABEL] = "default"
    api.nodes["gpu-ok"]["spec"]["taints"] = [FOREIGN_TAINT]
    api.nodes["gpu-ok"]["metadata"]["labels"][PROFILE_LABEL] = "h100-h200-inference"
    doc = results()
    doc["nodes"][0] = dict(doc["nodes"][0], verdict="rejected", blocking=["GPU-COUNT"])
    (plan, *_) = gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert plan.applied and "label says h100-h200-inference" in (plan.refused or "")
    assert LABEL not in api.nodes["gpu-ok"]["metadata"]["labels"]
    assert api.nodes["gpu-ok"]["spec"]["taints"] == [FOREIGN_TAINT, {"key": TAINT, "value": "refused", "effect": "NoSchedule"}]
    api.nodes["gpu-bad"]["metadata"]["labels"][LABEL] = "default"
    missing = results()
    missing["nodes"][1] = {"name": "gpu-bad", "verdict": "incomplete", "profile": "-", "blocking": [],
                           "collection": {"error": "no results came", "error_kind": "missing"}}  # fmt: skip
    gate(client()[0], missing, GateSettings(), apply=True, required=required_of)
    assert LABEL not in api.nodes["gpu-bad"]["metadata"]["labels"]


@pytest.mark.parametrize("how", ["select", "keyword", "interrupted"])
def test_a_node_not_fully_judged_is_never_accepted(cluster, how):
    """The document's node entry says accepted, but its rows show only some of the checks that block (a run
    with --select, -k, or stopped by Ctrl-C before the node was collected): the gate does not accept it."""
    api, client = cluster
    doc = results()
    keep = {"select": "GPU-*", "keyword": "KUBELET-*", "interrupted": "-"}[how]
    doc["results"] = [r for r in doc["results"] if r["node"] != "gpu-ok" or __import__("fnmatch").fnmatch(r["check"], keep)]
    if how == "interrupted":
        doc["complete"] = False
    (plan, *_) = gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert plan.verdict == "incomplete" and plan.not_judged
    assert LABEL not in api.nodes["gpu-ok"]["metadata"]["labels"]
    assert api.nodes["gpu-ok"]["spec"]["taints"][-1] == {"key": TAINT, "value": "incomplete", "effect": "NoSchedule"}
    record = json.loads(api.nodes["gpu-ok"]["metadata"]["annotations"][ANNOTATION])
    assert (record["verdict"] == "incomplete" and "KUBELET-CPU-POLICY" in record["not_judged"]) or how == "keyword"


def test_dry_run_lines_are_shell_safe_for_any_value(cluster, tmp_path):
    import shlex

    _, client = cluster
    doc = results()
    doc["nodes"][1]["blocking"] = ["X'; touch " + str(tmp_path / "pwned") + "; echo '", 'Q"$(id)`id`']
    plans = gate(client()[0], doc, GateSettings(), apply=False, required=required_of)
    line = plans[1].kubectl()
    argv = shlex.split(line)
    assert argv[:5] == ["kubectl", "patch", "node", "gpu-bad", "--type"] and json.loads(argv[-1]) == plans[1].patch
    subprocess.run(["sh", "-c", "kubectl() { :; }; " + line], check=True, timeout=60)
    assert not (tmp_path / "pwned").exists()


def test_a_profile_name_that_is_no_label_value_is_refused_before_any_patch(cluster):
    from conformance.errors import UsageError

    api, client = cluster
    doc = results()
    doc["nodes"][0]["profile"] = "my profile/v2"
    with pytest.raises(UsageError, match="cannot be the value of the label"):
        gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert not [r for r in api.requests if r[1] == "PATCH"]


def test_a_pod_check_judged_for_some_containers_only_is_not_judged(cluster):
    """Issue 53.3: pod checks give one row per container. A run narrowed with -k "not train-b", or interrupted
    between two containers' items, leaves a container unjudged: the node is not accepted, whatever its entry
    says. The entry's `planned` names the containers the run planned each check for."""
    api, client = cluster
    doc = results()
    check = "POD-GPU-NUMA-ALIGNED"
    assert check in blocking_builtin_ids(None)
    doc["nodes"][0]["planned"] = {check: ["ml/train-a/app", "ml/train-b/app"]}
    doc["results"] = [r for r in doc["results"] if not (r["node"] == "gpu-ok" and r["check"] == check)]
    doc["results"].append({"node": "gpu-ok", "check": check, "outcome": "passed", "severity": "critical",
                           "subject": {"namespace": "ml", "pod": "train-a", "container": "app"}})  # fmt: skip
    (plan, *_) = gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert plan.verdict == "incomplete" and check in plan.not_judged
    assert LABEL not in api.nodes["gpu-ok"]["metadata"]["labels"]
    # both containers judged: accepted
    doc["results"].append({"node": "gpu-ok", "check": check, "outcome": "passed", "severity": "critical",
                           "subject": {"namespace": "ml", "pod": "train-b", "container": "app"}})  # fmt: skip
    (plan, *_) = gate(client()[0], doc, GateSettings(), apply=True, required=required_of)
    assert plan.verdict == "accepted" and not plan.not_judged, plan


def test_a_document_without_a_readable_start_accepts_no_node(cluster, tmp_path):
    """No node's audit time can be read: no node is accepted (each refused, saying why), and exit 1."""
    api, client = cluster
    doc = results()
    doc["started_at"] = "yesterday"
    (tmp_path / "results.json").write_text(json.dumps(doc))
    args = [sys.executable, "-m", "conformance", "gate", str(tmp_path / "results.json"), "--apply",
            "--kubeconfig", str(client()[1])]  # fmt: skip
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.count("acceptance refused: when the node was audited cannot be read (started_at 'yesterday')") == 3
    assert all(LABEL not in n["metadata"]["labels"] for n in api.nodes.values())
