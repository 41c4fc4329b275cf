import json
from pathlib import Path

import pytest

from conformance.errors import ParseError
from conformance.facts.kubelet import (
    effective_config,
    flags_to_config,
    load_config_document,
    parse_kubelet_args,
    split_cmdline,
)

SAMPLES = Path(__file__).parent / "samples"


def test_config_flag_forms():
    assert parse_kubelet_args(["kubelet", "--config=/etc/k/c.yaml"]).config == "/etc/k/c.yaml"
    assert parse_kubelet_args(["kubelet", "--config", "/opt/c.json", "--v=2"]).config == "/opt/c.json"
    assert parse_kubelet_args(["kubelet", "-config", "/opt/c.json"]).config == "/opt/c.json"
    assert parse_kubelet_args(["kubelet", "--config", "rel/c.yaml"], cwd="/var/lib").config == "/var/lib/rel/c.yaml"
    # no --config: no file, and no assumed default path
    assert parse_kubelet_args(["kubelet", "--v=2"]).config is None


def test_bool_flag_does_not_swallow_next_argument():
    args = parse_kubelet_args(["kubelet", "--cgroups-per-qos", "--config", "/c.yaml"])
    assert args.config == "/c.yaml"
    assert flags_to_config(args.flags)["cgroupsPerQOS"][0] is True


def test_cmdline_split():
    assert split_cmdline(b"/usr/bin/kubelet\0--config=/a b\0") == ["/usr/bin/kubelet", "--config=/a b"]


def test_flags_override_file_and_dropins_in_order():
    file_doc = ("/etc/k.yaml", {"cpuManagerPolicy": "static", "topologyManagerPolicy": "none", "featureGates": {"A": True}})
    dropins = [
        ("/d/10.conf", {"topologyManagerPolicy": "best-effort", "featureGates": {"B": False}}),
        ("/d/20.conf", {"topologyManagerPolicy": "single-numa-node"}),
    ]
    flags = flags_to_config(
        parse_kubelet_args(
            [
                "kubelet",
                "--cpu-manager-policy=none",
                "--reserved-memory",
                "0:memory=1Gi",
                "--reserved-memory",
                "1:memory=2Gi;2:memory=1Gi",
                "--kube-reserved=cpu=1,memory=1Gi",
            ]
        ).flags
    )
    cfg = effective_config(file_doc, dropins, flags)
    assert cfg.get("cpuManagerPolicy").value == "none"
    assert cfg.get("cpuManagerPolicy").source == "flag --cpu-manager-policy"
    assert cfg.get("topologyManagerPolicy").value == "single-numa-node"
    assert cfg.get("topologyManagerPolicy").source == "drop-in /d/20.conf (--config-dir)"
    assert cfg.get("featureGates").value == {"A": True, "B": False}
    assert [e["numaNode"] for e in cfg.get("reservedMemory").value] == [0, 1, 2]
    assert cfg.get("kubeReserved").value == {"cpu": "1", "memory": "1Gi"}
    assert cfg.get("memoryManagerPolicy").value == "None"
    assert cfg.get("memoryManagerPolicy").source.startswith("upstream default")


def test_defaulted_roundtrip_sample():
    path = SAMPLES / "kubeletconfiguration.v1beta1.defaults.k8s-roundtrip-testdata.yaml"
    doc = load_config_document(path.read_text(), str(path))
    cfg = effective_config((str(path), doc), [], {})
    assert cfg.get("cpuManagerPolicy").value == "none"
    assert cfg.get("cgroupDriver").value == "cgroupfs"
    assert cfg.get("cpuManagerReconcilePeriod").value == "10s"
    assert cfg.get("cgroupsPerQOS").value is True


def test_configz_sample_body_is_a_kubelet_configuration():
    path = SAMPLES / "configz.kind.none-policies.aquasecurity-node-collector.json"
    inner = json.loads(path.read_text())["kubeletconfig"]
    cfg = effective_config(("configz", load_config_document(json.dumps(inner), "configz")), [], {})
    assert cfg.get("cpuManagerPolicy").value == "none"


@pytest.mark.parametrize("text", ["a: [", "- 1\n- 2\n", "kind: Pod\n", "\x00\x01"])
def test_bad_documents(text):
    with pytest.raises(ParseError) as e:
        load_config_document(text, "/etc/kubelet.yaml")
    assert "/etc/kubelet.yaml" in str(e.value)


def _k3s_bundle(drop_ins_status: str, drop_ins: dict[str, str]):
    from conformance.collection.bundle import Bundle, Record

    records = [
        Record("P", "k3s", "42"),
        Record("F", "/proc/42/cmdline", "ok", b"/usr/local/bin/k3s\0agent\0"),
        Record("L", "/proc/42/exe", "ok", b"/usr/local/bin/k3s"),
        Record("M", "daemon:42", "ok", b""),  # the collector found it to be the node's daemon (issue 50)
        Record("F", "/etc/rancher/k3s/config.yaml", "ok", b"kubelet-arg:\n  - cpu-manager-policy=static\n"),
        Record("G", "/etc/rancher/k3s/config.yaml.d/*.yaml", drop_ins_status, "\n".join(drop_ins).encode()),
        *(Record("F", path, "ok", text.encode()) for path, text in drop_ins.items()),
        Record("M", "end", "ok"),
    ]
    return Bundle("k3s-node", records)


def test_k3s_drop_ins_set_kubelet_flags_and_an_unlistable_folder_is_unknown():
    """k3s applies config.yaml, then config.yaml.d/*.yaml; a drop-in may change a kubelet-arg, so a folder
    that could not be listed leaves the kubelet's flags unknown, never "no drop-ins"."""
    from conformance.errors import FactUnavailable
    from conformance.facts.node_facts import NodeFacts

    drop_in = {"/etc/rancher/k3s/config.yaml.d/50-none.yaml": "kubelet-arg+:\n  - cpu-manager-policy=none\n"}
    args = NodeFacts(_k3s_bundle("ok", drop_in)).kubelet_args
    assert args.flags["cpu-manager-policy"][-1] == "none"
    with pytest.raises(FactUnavailable, match=r"config\.yaml\.d"):
        _ = NodeFacts(_k3s_bundle("denied", {})).kubelet_args


def _kubelets(*procs: tuple[int, str | None]):
    """A bundle with processes named kubelet: (pid, the collector's verdict; None: no verdict recorded)."""
    from conformance.collection.bundle import Bundle, Record

    records = [Record("M", "start", "ok")]
    for pid, why in procs:
        records += [
            Record("P", "kubelet", str(pid)),
            Record("F", f"/proc/{pid}/cmdline", "ok", b"/usr/bin/kubelet\0--config=/etc/kubelet.yaml\0"),
            Record("L", f"/proc/{pid}/exe", "ok", b"/usr/bin/kubelet"),
        ]
        if why is not None:
            records.append(Record("M", f"daemon:{pid}", "ok", why.encode()))
    return Bundle("n", [*records, Record("M", "end", "ok")])


def test_the_kubelet_is_the_one_verified_process_never_the_first_named_one():
    """Issue 50: a name is forgeable. The verified process is the kubelet wherever it comes in the listing;
    two verified ones, none, or a snapshot without verdicts leave it unknown, naming every candidate."""
    from conformance.errors import FactUnavailable
    from conformance.facts.node_facts import NodeFacts

    decoy = "it runs as uid 65534 (uids 65534 65534 65534 65534), not root"
    assert NodeFacts(_kubelets((7, decoy), (9, ""))).kubelet_pid == 9
    with pytest.raises(FactUnavailable, match=r"2 processes qualify as the kubelet.*pid 7.*pid 9"):
        _ = NodeFacts(_kubelets((7, ""), (9, ""))).kubelet_pid
    with pytest.raises(FactUnavailable, match=r"could not have started: kubelet pid 7 .*uid 65534"):
        _ = NodeFacts(_kubelets((7, decoy))).kubelet_args
    with pytest.raises(FactUnavailable, match=r"not verified as the node's daemon"):
        _ = NodeFacts(_kubelets((7, None))).kubelet_config
