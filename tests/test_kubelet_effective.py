"""One kubelet configuration, one digest, however it was read: the kubelet's defaulted object (configz) and the
node's files plus command line normalise to one effective configuration (conformance.facts.kubelet_effective).

The configz bodies here are what a kubelet of the defaults table's release serves: the upstream fully defaulted
round-trip test data (tests/samples, kubernetes/kubernetes) with the keys the node's files and flags set, as
SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go) leaves them. The real configz of
an older kind kubelet (tests/samples, aquasecurity/k8s-node-collector) shows why a difference across readings is
an error and not a failure: its release's defaults are not the table's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conformance.checks.fleet_drift import drift_results
from conformance.config.kubelet_defaults import defaults_for, upstream_defaults
from conformance.errors import ParseError
from conformance.facts.identity import kubelet_digest
from conformance.facts.kubelet import configz_config, effective_config, field_of_flag, flags_to_config, parse_kubelet_args
from conformance.facts.kubelet_effective import LINUX_EVICTION_HARD, effective

SAMPLES = Path(__file__).parent / "samples"


def from_files(doc: dict[str, Any], *argv: str) -> str:
    args = parse_kubelet_args(["kubelet", "--config=/etc/kubernetes/kubelet.yaml", *argv])
    cfg = effective_config(("/etc/kubernetes/kubelet.yaml", doc), [], flags_to_config(args.flags))
    return "files:" + kubelet_digest(effective(cfg, "files"), "node-a")


def from_configz(**set_keys: Any) -> str:
    """What configz serves for a configuration that sets `set_keys`: the defaulted object."""
    doc = copy.deepcopy(defaults_for(None))  # what the newest kubelet's defaulting writes
    doc["evictionHard"] = dict(LINUX_EVICTION_HARD)
    doc.update(set_keys)
    return "configz:" + kubelet_digest(effective(configz_config(doc, None, "not read"), "configz"), "node-a")


def bare(value: str) -> str:
    return value.partition(":")[2]


GPU_POOL = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0-1", "topologyManagerPolicy": "single-numa-node",
            "memoryManagerPolicy": "Static", "kubeReserved": {"memory": "1Gi", "cpu": "500m"}}  # fmt: skip


def test_the_files_and_configz_of_one_configuration_digest_alike():
    assert bare(from_files(GPU_POOL)) == bare(from_configz(**GPU_POOL))
    assert bare(from_files({**GPU_POOL, "maxPods": 250})) != bare(from_configz(**GPU_POOL))


def test_durations_and_quantities_are_read_by_value():
    """`1m` = `60s` = `1m0s` (Go's time.ParseDuration); `1Gi` = `1024Mi` and `500m` = `0.5` (resource.Quantity)."""
    spelled = {**GPU_POOL, "syncFrequency": "60s", "kubeReserved": {"memory": "1024Mi", "cpu": "0.5"},
               "containerLogMaxSize": "10240Ki"}  # fmt: skip
    assert bare(from_files(spelled)) == bare(from_configz(**GPU_POOL)) == bare(from_files({**GPU_POOL, "syncFrequency": "1m"}))
    assert bare(from_files({**GPU_POOL, "syncFrequency": "61s"})) != bare(from_configz(**GPU_POOL))


def test_an_explicit_default_equals_an_omitted_key():
    explicit = {**GPU_POOL, "cgroupDriver": "cgroupfs", "maxPods": 110, "evictionHard": dict(LINUX_EVICTION_HARD),
                "enforceNodeAllocatable": ["pods"], "podCIDR": "", "enableContentionProfiling": False}  # fmt: skip
    assert bare(from_files(explicit)) == bare(from_files(GPU_POOL)) == bare(from_configz(**GPU_POOL))
    # an explicitly empty list is what omitempty leaves out of configz: not the default ["pods"]
    assert bare(from_files({**GPU_POOL, "enforceNodeAllocatable": []})) != bare(from_files(GPU_POOL))


@pytest.mark.parametrize(
    ("flag", "configz_keys"),
    [
        ("--max-pods=200", {"maxPods": 200}),
        ("--topology-manager-policy-options=prefer-closest-numa-nodes=true",
         {"topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"}}),
        ("--kube-reserved-cgroup=/kube.slice", {"kubeReservedCgroup": "/kube.slice"}),
        ("--system-reserved-cgroup=/system.slice", {"systemReservedCgroup": "/system.slice"}),
        ("--event-qps=10", {"eventRecordQPS": 10}),
        ("--anonymous-auth=true", {"authentication": {**upstream_defaults()["authentication"], "anonymous": {"enabled": True}}}),
        ("--register-with-taints=nvidia.com/gpu=present:NoSchedule",
         {"registerWithTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}),
        ("--eviction-hard=memory.available<500Mi", {"evictionHard": {"memory.available": "500Mi"}}),
        # the report frequency follows the update frequency only as the file sets it: the file is defaulted when
        # it is loaded, before the flags re-apply (issue 53.7)
        ("--node-status-update-frequency=20s", {"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "5m0s"}),
    ],
)  # fmt: skip
def test_flags_that_set_a_field_are_in_the_digest(flag, configz_keys):
    """cmd/kubelet/app/server.go re-applies the command line over the loaded file (kubeletConfigFlagPrecedence):
    a flag decides its field, and configz shows it. Defaults that follow another key follow it (defaults.go)."""
    with_flag = from_files(GPU_POOL, flag)
    assert bare(with_flag) != bare(from_files(GPU_POOL))
    assert bare(with_flag) == bare(from_configz(**GPU_POOL, **configz_keys))


def test_feature_gate_flags_add_to_the_files_gates():
    doc = {**GPU_POOL, "featureGates": {"CPUManagerPolicyAlphaOptions": True}}
    both = {"CPUManagerPolicyAlphaOptions": True, "DynamicResourceAllocation": True}
    assert bare(from_files(doc, "--feature-gates=DynamicResourceAllocation=true")) == bare(
        from_configz(**GPU_POOL, featureGates=both)
    )


def test_flags_whose_names_do_not_camel_case_to_their_field_set_it():
    """Issue 53.6: the kubelet binds these flags to fields by hand (options.go AddKubeletConfigFlags)."""
    assert field_of_flag("fail-cgroupv1") == "failCgroupV1"
    assert field_of_flag("rotate-server-certificates") == "serverTLSBootstrap"
    assert field_of_flag("runonce") == "runOnce" and field_of_flag("kube-api-content-type") == "contentType"
    for flag in ("--fail-cgroupv1=false", "--rotate-server-certificates", "--runonce"):
        assert bare(from_files(GPU_POOL, flag)) != bare(from_files(GPU_POOL)), flag
    assert bare(from_files(GPU_POOL, "--fail-cgroupv1=false")) == bare(from_configz(**GPU_POOL, failCgroupV1=False))


def test_flags_that_set_no_field_are_not_part_of_the_configuration():
    assert field_of_flag("node-ip") is None and field_of_flag("hostname-override") is None
    assert field_of_flag("max-pods") == "maxPods" and field_of_flag("reserved-cpus") == "reservedSystemCPUs"
    assert bare(from_files(GPU_POOL, "--node-ip=10.0.0.7", "--node-labels=a=b", "--hostname-override=x")) == bare(
        from_files(GPU_POOL)
    )


def test_log_settings_are_not_drift():
    """`-v` sets logging.verbosity, which decides what the kubelet logs and nothing it does: not in the digest."""
    assert field_of_flag("v") == "logging.verbosity"
    assert bare(from_files(GPU_POOL, "--v=4")) == bare(from_files(GPU_POOL)) == bare(from_configz(**GPU_POOL))


def test_a_flag_the_kubelet_would_refuse_is_an_error_not_a_value():
    with pytest.raises(ParseError, match="--max-pods"):
        from_files(GPU_POOL, "--max-pods=lots")
    with pytest.raises(ParseError, match="feature-gates"):
        from_files(GPU_POOL, "--feature-gates=X=maybe")


def setting(node: str, key: str) -> Any:
    return {"fleet.attributes": ["kubelet_config"], "fleet.pin": {}, "fleet.severity": "medium"}[key]


def judged(values: dict[str, str]) -> dict[str, dict]:
    nodes = [{"name": n, "profile": "default", "labels": {}, "identity": {"kubelet_config": v}} for n, v in values.items()]
    return {r["node"]: r for r in drift_results(nodes, setting)}


def test_a_node_whose_configz_read_failed_passes_with_its_peers_when_configured_alike():
    same, other = from_configz(**GPU_POOL), from_configz(**{**GPU_POOL, "maxPods": 250})
    rows = judged({"a": same, "b": same, "c": same, "d": from_files(GPU_POOL, "--max-pods=110"), "e": other})
    assert rows["d"]["outcome"] == "passed"
    assert rows["e"]["outcome"] == "failed" and "while 3 of 5 nodes" in rows["e"]["message"]
    # read from its files and configured otherwise: a difference across readings is an error naming both
    rows = judged({"a": same, "b": same, "c": same, "d": from_files(GPU_POOL, "--max-pods=250")})
    assert rows["d"]["outcome"] == "error" and "read from the node's files, while 3 of 4" in rows["d"]["message"]


def test_a_real_configz_of_another_release_is_not_failed_against_the_tables_defaults():
    """kind's kubelet (tests/samples) served kubeAPIQPS 5, the default of its release; the table's release defaults
    it to 50. Its files read against the table differ from its own configz: the drift check must say it cannot
    tell (error), never fail the node for a default."""
    served = json.loads((SAMPLES / "configz.kind.none-policies.aquasecurity-node-collector.json").read_text())["kubeletconfig"]
    configz = "configz:" + kubelet_digest(effective(configz_config(served, None, "x"), "configz"), "kind-control-plane")
    set_by_kind = {k: served[k] for k in ("cgroupRoot", "evictionHard", "failSwapOn", "imageGCHighThresholdPercent",
                                          "clusterDNS", "clusterDomain", "staticPodPath", "rotateCertificates")}  # fmt: skip
    files = from_files(set_by_kind)
    assert bare(files) != bare(configz)
    rows = judged({"a": configz, "b": configz, "c": configz, "d": files})
    assert rows["d"]["outcome"] == "error" and "default of another kubelet release" in rows["d"]["message"]


def test_a_kubelet_without_a_config_file_runs_on_its_legacy_flag_defaults():
    """Issue 53.2: without --config the kubelet starts from NewKubeletConfiguration, whose applyLegacyDefaults
    allows anonymous requests, authorizes everything and opens the read-only port (cmd/kubelet/app/options/
    options.go); a loaded file is defaulted as v1beta1 only. A flags-only kubelet is not its secured peer."""
    args = parse_kubelet_args(["kubelet", "--cpu-manager-policy=static"])
    flags_only = effective_config(None, [], flags_to_config(args.flags))
    assert flags_only.get("authorization").value["mode"] == "AlwaysAllow"
    assert flags_only.get("authentication").value["anonymous"]["enabled"] is True
    assert flags_only.get("readOnlyPort").value == 10255
    with_file = effective_config(("/etc/k.yaml", {"cpuManagerPolicy": "static"}), [], {})
    assert "authorization" not in with_file.values or with_file.get("authorization").value.get("mode") != "AlwaysAllow"
    assert kubelet_digest(effective(flags_only, "files"), "n") != kubelet_digest(effective(with_file, "files"), "n")
    secured = flags_to_config(parse_kubelet_args(["kubelet", "--cpu-manager-policy=static", "--anonymous-auth=false",
                                                  "--authorization-mode=Webhook", "--read-only-port=0",
                                                  "--authentication-token-webhook=true"]).flags)  # fmt: skip
    assert kubelet_digest(effective(effective_config(None, [], secured), "files"), "n") == kubelet_digest(
        effective(with_file, "files"), "n"
    )


def test_a_drop_in_eviction_map_merges_into_the_defaulted_one():
    """Issue 53.8: drop-ins are JSON merge patches over the defaulted base (mergeKubeletConfigurations): a
    drop-in's evictionHard adds to the default thresholds; the main file's own map replaces them."""
    dropin = ("/etc/kubernetes/kubelet.conf.d/50-eviction.conf", {"evictionHard": {"nodefs.available": "5%"}})
    merged = effective_config(("/etc/k.yaml", {"cpuManagerPolicy": "static"}), [dropin], {})
    assert merged.get("evictionHard").value == {**LINUX_EVICTION_HARD, "nodefs.available": "5%"}
    from conformance.facts.reservations import hard_eviction_memory

    assert hard_eviction_memory(merged.get("evictionHard").value, None)[0] == 100 * 1024 * 1024
    replaced = effective_config(("/etc/k.yaml", {"evictionHard": {"nodefs.available": "5%"}}), [], {})
    assert replaced.get("evictionHard").value == {"nodefs.available": "5%"}


def test_defaults_follow_the_kubelets_minor_release():
    """Issue 53.7: the event and API client rates rose in 1.27 (PR 116121) and failCgroupV1 is true from 1.35
    (KEP-5573); the round-trip test data's eventRecordQPS 5 is not what its own release's defaulting writes."""
    assert defaults_for((1, 26, 15))["eventRecordQPS"] == 5 and defaults_for((1, 27, 0))["eventRecordQPS"] == 50
    assert defaults_for((1, 31, 0))["eventBurst"] == 100 and defaults_for((1, 26, 0))["kubeAPIQPS"] == 5
    assert defaults_for((1, 34, 2))["failCgroupV1"] is False and defaults_for((1, 35, 0))["failCgroupV1"] is True
    # a 1.26 kubelet's configz shows its own defaults; its files read under 1.26's defaults equal it, and both
    # digest as a 1.31 node with the same files does (the release itself is the `kubelet` attribute)
    doc = {"cpuManagerPolicy": "static"}
    files_126 = kubelet_digest(effective(effective_config(("/k.yaml", doc), [], {}), "files", (1, 26, 0)), "n")
    files_131 = kubelet_digest(effective(effective_config(("/k.yaml", doc), [], {}), "files", (1, 31, 0)), "n")
    live = {**copy.deepcopy(defaults_for((1, 26, 0))), "evictionHard": dict(LINUX_EVICTION_HARD), **doc}
    configz_126 = kubelet_digest(effective(configz_config(live, None, "not read"), "configz", (1, 26, 0)), "n")
    assert files_126 == files_131 == configz_126
    # a value the file sets away from both releases' defaults stays a difference
    set_qps = kubelet_digest(
        effective(effective_config(("/k.yaml", {**doc, "eventRecordQPS": 20}), [], {}), "files", (1, 26, 0)), "n"
    )
    assert set_qps != files_126


def test_a_zero_duration_in_the_file_is_the_default_the_kubelet_applies():
    """Issue 53.19: kubeadm writes `cpuManagerReconcilePeriod: 0s`; SetDefaults_KubeletConfiguration replaces a
    zero duration with the default (10s), so a live kubelet's configz shows 10s and that is no drift."""
    kubeadm = {**GPU_POOL, "cpuManagerReconcilePeriod": "0s", "nodeStatusUpdateFrequency": "0s"}
    files = effective_config(("/var/lib/kubelet/config.yaml", kubeadm), [], {})
    assert files.get("cpuManagerReconcilePeriod").value == "10s"
    live = configz_config({**copy.deepcopy(defaults_for(None)), **GPU_POOL}, files, None)
    assert "cpuManagerReconcilePeriod" not in live.drift, live.drift
    assert bare(from_files(kubeadm)) == bare(from_configz(**GPU_POOL))
