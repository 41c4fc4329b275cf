"""FLEET-CONSISTENT and the identity record: nodes collected from the lab (the every-node lab's good node
and its GPU node), copied into a pool where each copy differs from the others in one attribute at a time
(kernel, a kubelet configuration value, the containerd configuration; the driver, in a pool of GPU
nodes), judged as a live run over snapshots, as a
replay of its results, and as a merge of per-node results; digests that formatting, comments and key order
do not change; a 50/50 pool; a pinned value; unknown attributes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.checks.fleet_drift import drift_results
from conformance.errors import FactUnavailable
from conformance.facts.canonical import digest
from conformance.facts.kubelet import load_yaml_mapping
from conformance.facts.runtime import load_toml
from tests.check_fleet import fleet_snapshots
from tests.lab.builder import DEBIAN
from tests.lab.every_node import node_name

BASE, GPU_BASE = "good", "gpu-good"
# the lab's GPU nodes run no kubelet: their pool judges the attributes they have
GPU_POOL_PROFILE = (
    "extends: {}\nfleet:\n  attributes: [os, kernel, runtime, driver, cuda_driver, gpu_count, gpu_products, gpu_vbios,"
    " gpu_inforom, mig, sysctls]\n"
)


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=900)


def _record(doc: dict, kind: str, name: str) -> dict:
    (rec,) = [r for r in doc["records"] if r["kind"] == kind and r["name"] == name]
    return rec


def kernel(doc: dict) -> None:
    _record(doc, "C", "uname")["text"] = "6.8.0-45-generic"


def driver(doc: dict) -> None:
    probe = _record(doc, "C", "nvml-probe")
    data = json.loads(probe["text"])
    data["driver"] = "570.86.15"
    probe["text"] = json.dumps(data)


def kubelet_value(doc: dict) -> None:
    rec = _record(doc, "F", "/etc/kubernetes/kubelet-config.yaml")
    rec["text"] += "maxPods: 250\n"  # a value no check judges: only the drift check sees it


def containerd_value(doc: dict) -> None:
    rec = _record(doc, "F", "/etc/containerd/config.toml")
    rec["text"] = "oom_score = -999\n" + rec["text"]


def formatting_only(doc: dict) -> None:
    """Key order, comments and blank lines: the same configuration, another file."""
    rec = _record(doc, "F", "/etc/kubernetes/kubelet-config.yaml")
    parsed = yaml.safe_load(rec["text"])
    rec["text"] = "# reordered by hand\n" + yaml.safe_dump(dict(reversed(list(parsed.items()))), sort_keys=False)
    toml = _record(doc, "F", "/etc/containerd/config.toml")
    toml["text"] = "# a comment\n\n" + toml["text"].replace("\n", "\n\n")


VARIANTS = {"kernel": kernel, "kubelet_config": kubelet_value, "runtime_config": containerd_value}


def pool(base: dict, folder: Path, copies: int, variants: dict) -> list[str]:
    folder.mkdir(parents=True)
    names = []
    for i in range(copies):
        names.append(f"pool-{i}")
        (folder / f"pool-{i}.json").write_text(json.dumps(dict(base, node=f"pool-{i}")))
    for attr, change in variants.items():
        doc = json.loads(json.dumps(base))
        change(doc)
        names.append(f"pool-{attr}")
        (folder / f"pool-{attr}.json").write_text(json.dumps(dict(doc, node=f"pool-{attr}")))
    return names


def outcomes(doc: dict) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r["node"], r["check"]): (r["outcome"], r["message"]) for r in doc["results"]}


@pytest.fixture(scope="module")
def judged(every_node_collected, tmp_path_factory):
    c = every_node_collected
    base = c.snaps[node_name(BASE, DEBIAN)]
    tmp = tmp_path_factory.mktemp("drift")
    names = pool(base, tmp / "snap", 4, {**VARIANTS, "format": formatting_only})
    live = conformance("run", "--snapshot", str(tmp / "snap"), "--profile", str(c.profile), "--output", str(tmp / "live"))
    assert (tmp / "live" / "results.json").exists(), live.stderr
    return tmp, names, c.profile, json.loads((tmp / "live" / "results.json").read_text())


def test_each_differing_attribute_fails_that_node_and_nothing_else(judged):
    _, names, _, doc = judged
    got = outcomes(doc)
    for n in ("pool-0", "pool-1", "pool-2", "pool-3", "pool-format"):
        assert got[(n, "FLEET-CONSISTENT")][0] == "passed", got[(n, "FLEET-CONSISTENT")]
    for attr in VARIANTS:
        outcome, message = got[(f"pool-{attr}", "FLEET-CONSISTENT")]
        assert outcome == "failed", message
        assert [p.split(" ")[0] for p in message.split("; ")] == [attr], message
        assert "while 7 of 8 nodes in profile" in message
        # every other check judges the variant as it judges the base node
        others = {k[1]: v[0] for k, v in got.items() if k[0] == f"pool-{attr}" and k[1] != "FLEET-CONSISTENT"}
        assert others == {k[1]: v[0] for k, v in got.items() if k[0] == "pool-0" and k[1] != "FLEET-CONSISTENT"}, attr
    assert set(names) == {n["name"] for n in doc["nodes"]}


def test_a_gpu_node_with_another_driver_fails_in_its_pool(every_node_collected, tmp_path):
    c = every_node_collected
    pool(c.snaps[node_name(GPU_BASE, DEBIAN)], tmp_path / "snap", 3, {"driver": driver})
    (tmp_path / "gpu-pool.yaml").write_text(GPU_POOL_PROFILE.format(c.profile))
    conformance(
        "run",
        "--snapshot",
        str(tmp_path / "snap"),
        "--profile",
        str(tmp_path / "gpu-pool.yaml"),
        "--output",
        str(tmp_path / "out"),
    )
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    got = outcomes(doc)
    outcome, message = got[("pool-driver", "FLEET-CONSISTENT")]
    assert outcome == "failed" and message.startswith("driver 570.86.15, while 3 of 4 nodes in profile"), message
    assert all(got[(f"pool-{i}", "FLEET-CONSISTENT")][0] == "passed" for i in range(3))
    node = {n["name"]: n for n in doc["nodes"]}["pool-driver"]
    assert node["identity"]["driver"] == "570.86.15" and node["identity"]["gpu_count"] >= 1
    # what the driver stand-in answers as driver 550 does: nvmlSystemGetCudaDriverVersion 12040, the versions
    assert node["identity"]["cuda_driver"] == "12.4"
    assert (node["identity"]["gpu_vbios"], node["identity"]["gpu_inforom"]) == ("96.00.99.00.01", "G520.0200.00.05")


def test_a_replay_and_a_merge_of_per_node_results_give_the_same_drift_verdicts(judged):
    tmp, names, profile, live = judged
    want = {k: v for k, v in outcomes(live).items() if k[1] == "FLEET-CONSISTENT"}
    conformance("report", str(tmp / "live" / "results.json"), "--output", str(tmp / "replay"))
    replay = json.loads((tmp / "replay" / "results.json").read_text())
    assert {k: v for k, v in outcomes(replay).items() if k[1] == "FLEET-CONSISTENT"} == want
    # in-cluster: each node judged alone (its own drift check sees no peer), then merged
    per_node = tmp / "per-node"
    for name in names:
        one = tmp / "one" / name
        one.mkdir(parents=True)
        (one / f"{name}.json").write_text((tmp / "snap" / f"{name}.json").read_text())
        conformance("run", "--snapshot", str(one), "--profile", str(profile), "--output", str(per_node / name))
        alone = json.loads((per_node / name / "results.json").read_text())
        assert outcomes(alone)[(name, "FLEET-CONSISTENT")] == ("skipped", outcomes(alone)[(name, "FLEET-CONSISTENT")][1])
        assert "a fleet of one has no peer to drift from" in outcomes(alone)[(name, "FLEET-CONSISTENT")][1]
    conformance("merge", str(per_node), "--output", str(tmp / "merged"))
    merged = json.loads((tmp / "merged" / "results.json").read_text())
    assert {k: v for k, v in outcomes(merged).items() if k[1] == "FLEET-CONSISTENT"} == want


def test_a_half_rolled_out_pool_has_no_majority_and_fails_no_one(every_node_collected, tmp_path):
    c = every_node_collected
    base = c.snaps[node_name(BASE, DEBIAN)]
    folder = tmp_path / "snap"
    folder.mkdir()
    for i in range(2):
        (folder / f"old-{i}.json").write_text(json.dumps(dict(base, node=f"old-{i}")))
        doc = json.loads(json.dumps(base))
        kernel(doc)
        (folder / f"new-{i}.json").write_text(json.dumps(dict(doc, node=f"new-{i}")))
    conformance("run", "--snapshot", str(folder), "--profile", str(c.profile), "--output", str(tmp_path / "out"))
    got = outcomes(json.loads((tmp_path / "out" / "results.json").read_text()))
    for n in ("old-0", "old-1", "new-0", "new-1"):
        outcome, message = got[(n, "FLEET-CONSISTENT")]
        assert outcome == "passed" and "no majority for kernel" in message, message
    # a pin decides instead of the majority
    (tmp_path / "pinned.yaml").write_text(f"extends: {c.profile}\nfleet:\n  pin: {{kernel: 6.8.0-45-generic}}\n")
    conformance("run", "--snapshot", str(folder), "--profile", str(tmp_path / "pinned.yaml"), "--output", str(tmp_path / "pin"))
    got = outcomes(json.loads((tmp_path / "pin" / "results.json").read_text()))
    assert got[("new-0", "FLEET-CONSISTENT")][0] == "passed"
    outcome, message = got[("old-0", "FLEET-CONSISTENT")]
    assert outcome == "failed" and "while the profile pins 6.8.0-45-generic" in message


def test_digests_ignore_formatting_comments_and_key_order():
    a = load_yaml_mapping("kind: KubeletConfiguration\ncpuManagerPolicy: static\nmaxPods: 110\n", "a", "m")
    b = load_yaml_mapping(
        "# a comment\nmaxPods: 110\n\ncpuManagerPolicy: static   # pinned\nkind: KubeletConfiguration\n", "b", "m"
    )
    assert digest(a) == digest(b) != digest({**a, "maxPods": 111})
    t1 = load_toml('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  a = 1\n  b = "x"\n', "t1")
    t2 = load_toml('# c\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\nb = "x"  # same\na = 1\n', "t2")
    assert digest(t1) == digest(t2)


def _node(name: str, **identity) -> dict:
    base = {"os": "Ubuntu 22.04.4 LTS", "kernel": "5.15.0-105-generic", "driver": "550.127.05"}
    return {"name": name, "profile": "default", "labels": {"pool": "gpu-a"}, "identity": {**base, **identity}}


def test_the_judge_on_node_records():
    def setting(node: str, key: str):
        return {"fleet.attributes": ["os", "kernel", "driver"], "fleet.pin": {}, "fleet.severity": "high"}[key]

    nodes = [_node(f"n{i}") for i in range(97)] + [_node("odd", driver="550.90.07"), _node("blind", driver=None), _node("n98")]
    nodes[-2]["identity_errors"] = {"driver": "node n99: GPU facts unavailable: NVML probe: exited 1"}
    rows = {r["node"]: r for r in drift_results(nodes, setting)}
    assert rows["odd"]["outcome"] == "failed"
    assert rows["odd"]["message"] == "driver 550.90.07, while 98 of 99 nodes in pool gpu-a run 550.127.05"
    assert rows["odd"]["severity"] == "high"
    assert (
        rows["blind"]["outcome"] == "error" and "driver is unknown (node n99: GPU facts unavailable" in rows["blind"]["message"]
    )
    assert rows["n0"]["outcome"] == "passed"
    alone = drift_results([_node("solo")], setting)[0]
    assert alone["outcome"] == "skipped" and alone["message"].startswith("the only node in pool gpu-a and no attribute pinned")
    pinned = drift_results([_node("solo", driver="550.90.07")], lambda n, k: {**{"fleet.pin": {"driver": "550.127.05"}},
                           **{k2: setting(n, k2) for k2 in ("fleet.attributes", "fleet.severity")}}[k])  # fmt: skip
    assert pinned[0]["outcome"] == "failed"  # a pin is judged on a fleet of one too
    missing = drift_results([_node("solo"), {"name": "old", "profile": "default", "labels": {}}], setting)[1]
    assert missing["outcome"] == "error" and "no identity record" in missing["message"]

    def unknown(node: str, key: str):
        raise FactUnavailable(f"node {node}: its profile is unknown (it sent nothing)")

    silent = drift_results([_node("a"), {"name": "silent", "labels": {}}], unknown)
    assert {r["severity"] for r in silent} == {"medium"}  # the check's declared severity, never "high" (issue 54)


def test_the_report_shows_the_drift_and_diff_shows_identity_changes(judged):
    tmp, _, _, doc = judged
    html = (tmp / "live" / "report.html").read_text()
    assert "Fleet drift" in html and "nodes off the majority" in html
    row = html[html.index("<td>kernel</td>") :][:600]
    assert "6.8.0-45-generic on 1" in row and "pool-kernel" in row and "pool-0" not in row
    before = json.loads(json.dumps(doc))
    after = json.loads(json.dumps(doc))
    node = next(n for n in after["nodes"] if n["name"] == "pool-0")
    node["identity"]["driver"] = "570.86.15"
    (tmp / "before.json").write_text(json.dumps(before))
    (tmp / "after.json").write_text(json.dumps(after))
    p = conformance("diff", str(tmp / "before.json"), str(tmp / "after.json"))
    assert f"CHANGED pool-0 driver: {before['nodes'][0]['identity']['driver']} -> 570.86.15" in p.stdout, p.stdout


@pytest.mark.slow  # runs, replays and merges of a fleet
def test_a_replay_judges_the_drift_check_by_each_nodes_recorded_fleet_settings(tmp_path):
    """The profile's fleet settings travel in each node's record: a re-render of a run under a100-training (drift
    is high there) judges a changed node as that run would, not by the default profile's medium; a record
    without them is judged by the bundled profile it names, and where there is none the check errors."""
    fleet = fleet_snapshots(tmp_path, 3)
    conformance("run", "--snapshot", str(fleet), "--profile", "a100-training", "--output", str(tmp_path / "live"))
    doc = json.loads((tmp_path / "live" / "results.json").read_text())
    assert doc["nodes"][0]["fleet"]["severity"] == "high"
    doc["nodes"][0]["identity"]["kernel"] = "6.8.0-45-generic"  # one node now runs another kernel than its peers

    def replayed(d: dict, name: str, items: str) -> tuple[dict, str]:
        (tmp_path / f"{name}.json").write_text(json.dumps(d))
        out = tmp_path / f"{name}-{items}"
        conformance("report", str(tmp_path / f"{name}.json"), "--items", items, "--output", str(out))
        got = json.loads((out / "results.json").read_text())
        drift = next(r for r in got["results"] if r["check"] == "FLEET-CONSISTENT" and r["node"] == "node-000")
        return drift, next(n["verdict"] for n in got["nodes"] if n["name"] == "node-000")

    for items in ("result", "node"):
        drift, verdict = replayed(doc, "changed", items)
        assert (drift["outcome"], drift["severity"], verdict) == ("failed", "high", "rejected"), drift
        assert "kernel 6.8.0-45-generic, while 2 of 3 nodes" in drift["message"]
    older = json.loads(json.dumps(doc))
    for n in older["nodes"]:
        del n["fleet"]  # a record from a release before the settings were recorded
    drift, _ = replayed(older, "older", "node")
    assert (drift["outcome"], drift["severity"]) == ("failed", "high")  # the bundled a100-training's settings
    for n in older["nodes"]:
        n["profile"] = "our-site"  # a profile file of the auditing machine: not here
    drift, verdict = replayed(older, "custom", "node")
    # the profile that could have changed its severity is not here: the check keeps its declared one (issue 54 #6)
    assert (drift["outcome"], drift["severity"], verdict) == ("error", "medium", "rejected")
    assert "names profile our-site, which is not bundled, and carries no fleet settings" in drift["message"]


# -- what the kubelet digest leaves out: what names the node itself ------------------------------------------
def _eks_config(instance: str, eviction: str = "100Mi") -> dict:
    """A kubelet configuration as EKS AL2023's nodeadm writes it on each node (awslabs/amazon-eks-ami
    nodeadm/internal/kubelet/config.go: withCloudProvider sets providerID to aws:///<az>/<instance-id>;
    maxPods from the instance type; the reserved cgroups of withDefaultReservedResources)."""
    text = f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
authentication:
  anonymous: {{enabled: false}}
  webhook: {{cacheTTL: 2m0s, enabled: true}}
  x509: {{clientCAFile: /etc/kubernetes/pki/ca.crt}}
authorization: {{mode: Webhook}}
cgroupDriver: systemd
clusterDNS: [10.100.0.10]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
evictionHard: {{memory.available: {eviction}, nodefs.available: 10%}}
kubeReservedCgroup: /runtime
systemReservedCgroup: /system
maxPods: 737
providerID: aws:///us-west-2a/{instance}
serverTLSBootstrap: true
tlsCertFile: /var/lib/kubelet/pki/kubelet-ip-10-0-1-{instance[-2:]}.crt
"""
    return load_yaml_mapping(text, "kubelet.json", "m")


def test_the_kubelet_digest_leaves_out_what_names_the_node_itself():
    from conformance.facts.identity import kubelet_digest

    names = {f"ip-10-0-1-{i:02d}": f"i-0abc{i:02d}" for i in range(4)}
    digests = {}
    for i, (node, instance) in enumerate(names.items()):
        config = _eks_config(instance, eviction="500Mi" if i == 3 else "100Mi")
        config["tlsCertFile"] = f"/var/lib/kubelet/pki/kubelet-{node}.crt"
        digests[node] = kubelet_digest(config, node)
    assert len({digests[n] for n in list(names)[:3]}) == 1 and digests["ip-10-0-1-03"] != digests["ip-10-0-1-00"]

    def setting(node: str, key: str):
        return {"fleet.attributes": ["kubelet_config"], "fleet.pin": {}, "fleet.severity": "medium"}[key]

    nodes = [{"name": n, "profile": "default", "labels": {"eks.amazonaws.com/nodegroup": "gpu"},
              "identity": {"kubelet_config": d}} for n, d in digests.items()]  # fmt: skip
    rows = {r["node"]: r for r in drift_results(nodes, setting)}
    assert rows["ip-10-0-1-03"]["outcome"] == "failed" and "while 3 of 4 nodes" in rows["ip-10-0-1-03"]["message"]
    assert all(rows[n]["outcome"] == "passed" for n in list(names)[:3])
    # a node's own serving address is left out; a shared bind address is compared
    a = {"address": "10.0.1.7", "healthzBindAddress": "127.0.0.1", "maxPods": 110}
    assert kubelet_digest(a, "x") == kubelet_digest({**a, "address": "10.0.1.8"}, "y")
    assert kubelet_digest({**a, "healthzBindAddress": "0.0.0.0"}, "x") != kubelet_digest(a, "x")
    # kubeadm writes one configuration for every node: the upstream round-trip defaults digest alike on two names
    sample = (Path(__file__).parent / "samples" / "kubeletconfiguration.v1beta1.defaults.k8s-roundtrip-testdata.yaml").read_text()
    kubeadm = load_yaml_mapping(sample, "config.yaml", "m")
    assert (
        kubelet_digest(kubeadm, "node-a") == kubelet_digest(kubeadm, "node-b") != kubelet_digest({**kubeadm, "maxPods": 1}, "a")
    )


def test_nothing_compared_is_never_as_its_peers():
    def setting(node: str, key: str):
        return {"fleet.attributes": ["kernel", "driver"], "fleet.pin": {}, "fleet.severity": "medium"}[key]

    nodes = [{"name": "known", "profile": "default", "labels": {}, "identity": {"kernel": "6.1", "driver": "550"}}]
    nodes += [{"name": f"blind-{i}", "profile": "default", "labels": {}, "identity": {"kernel": None, "driver": None},
               "identity_errors": {"kernel": "uname failed", "driver": "NVML failed"}} for i in range(3)]  # fmt: skip
    rows = {r["node"]: r for r in drift_results(nodes, setting)}
    assert rows["known"]["outcome"] == "skipped"
    assert "nothing could be compared: none of its 3 peer(s) in profile default has a known value" in rows["known"]["message"]
    nodes += [{"name": "peer", "profile": "default", "labels": {}, "identity": {"kernel": "6.1", "driver": None},
               "identity_errors": {"driver": "NVML failed"}}]  # fmt: skip
    rows = {r["node"]: r for r in drift_results(nodes, setting)}
    assert (
        rows["known"]["outcome"] == "passed"
        and "on 1 attribute(s); not compared (no peer's value known): driver" in (rows["known"]["message"])
    )


def test_a_pin_on_an_attribute_not_judged_is_refused(tmp_path):
    (tmp_path / "p.yaml").write_text("extends: default\nfleet:\n  attributes: [kernel]\n  pin: {driver: '550.127.05'}\n")
    p = conformance("profiles", "show", str(tmp_path / "p.yaml"))
    assert p.returncode == 4 and "fleet.pin must be attributes that fleet.attributes also lists" in p.stderr, p.stderr
    assert "a pin on driver would never be judged" in p.stderr


def test_snapshots_carry_the_labels_that_group_them(tmp_path):
    from tests.check_fleet import fleet_snapshots

    folder = fleet_snapshots(tmp_path, 3)
    assert all("labels" in json.loads(f.read_text()) for f in folder.glob("*.json"))
    for f in folder.glob("*.json"):  # snapshots taken before they carried labels
        doc = json.loads(f.read_text())
        del doc["labels"]
        f.write_text(json.dumps(doc))
    conformance("run", "--snapshot", str(folder), "--output", str(tmp_path / "out"))
    rows = [r for r in json.loads((tmp_path / "out" / "results.json").read_text())["results"] if r["check"] == "FLEET-CONSISTENT"]
    assert len(rows) == 3 and all(r["outcome"] == "error" and "carry no labels" in r["message"] for r in rows)


def test_a_kubelet_config_read_from_files_is_not_compared_with_configz_readings():
    """configz gives the kubelet's defaulted object, the files only the keys they set: one configuration digests
    two ways. A node whose configz read failed (its files decided) is not failed against its configz-read
    peers, nor passed: the attribute is unknown for it, saying why; peers read alike are still compared."""

    def setting(node: str, key: str):
        return {"fleet.attributes": ["kubelet_config"], "fleet.pin": {}, "fleet.severity": "medium"}[key]

    values = {"a": "configz:1111", "b": "configz:1111", "c": "configz:1111", "d": "files:2222", "e": "configz:3333"}
    nodes = [{"name": n, "profile": "default", "labels": {}, "identity": {"kubelet_config": v}} for n, v in values.items()]
    rows = {r["node"]: r for r in drift_results(nodes, setting)}
    assert rows["d"]["outcome"] == "error" and "read from the node's files, while 3 of 5" in rows["d"]["message"]
    assert rows["e"]["outcome"] == "failed" and "while 3 of 5 nodes" in rows["e"]["message"]
    assert all(rows[n]["outcome"] == "passed" for n in "abc")
