import json
from pathlib import Path

import pytest

from conformance.errors import ParseError
from conformance.facts.checkpoints import parse_cpu_manager_state, parse_dra_checkpoint, parse_memory_manager_state

SAMPLES = Path(__file__).parent / "samples"


def load(name):
    return (SAMPLES / name).read_text()


def test_v2_issue_122171_init_containers():
    st = parse_cpu_manager_state(load("cpu_manager_state.static.v2.k8s-issue-122171.json"))
    assert st.policy == "static" and st.version == 2
    assert len(st.entries) == 3
    pod = st.entries["305a43e7-60c8-4c79-b8cc-96ffc983b912"]
    assert pod["init-container-1"] == pod["container-1"]
    assert 0 in st.default_cpus and 20 not in st.default_cpus


def test_v1_container_id_keyed():
    st = parse_cpu_manager_state(load("cpu_manager_state.static.v1.containerid-keyed.k8s-issue-86255.json"))
    assert st.version == 1
    (entry,) = st.entries.values()
    assert entry[""] == {3, 27}


def test_key_casing_and_none_policy():
    st = parse_cpu_manager_state(load("cpu_manager_state.k8s-unittest.v2.defaultCPUSet-casing.json"))
    assert st.default_cpus == {1, 2, 3} and st.entries["pod"]["container1"] == {4, 5, 6}
    st = parse_cpu_manager_state(load("cpu_manager_state.none.v2.lx1036.raw.json"))
    assert st.policy == "none" and st.entries == {} and st.default_cpus == frozenset()
    st = parse_cpu_manager_state(load("cpu_manager_state.static.v2.lx1036.raw.json"))
    assert st.entries["235148fe-393f-47a8-a17d-bd55bc1a836b"]["cgroup1-0"] == {1, 13}
    assert parse_cpu_manager_state(load("cpu_manager_state.k8s-unittest.v1.migration.json")).version == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"policyName": "static", "defaultCpuSet": "0-',
        "[]",
        '{"defaultCpuSet": ""}',
        '{"policyName": "static", "defaultCpuSet": "5-2"}',
        '{"policyName":"static","entries":{"p":{"c":5}}}',
        "[" * 100000,
    ],
)
def test_malformed_cpu_state(text):
    with pytest.raises(ParseError):
        parse_cpu_manager_state(text, "/var/lib/kubelet/cpu_manager_state")


def test_memory_state_nodes_and_cells():
    st = parse_memory_manager_state(load("memory_manager_state.static.with-entries.k8s-website.json"))
    assert st.policy == "Static" and st.numa_cells == {0: [0, 1], 1: [0, 1]}
    assert "fa9bdd38-6df9-4cf9-aa67-8c4814da37a8" in st.entries
    st = parse_memory_manager_state('{"policyName":"Static","machineState":{"0":{"cells":[0]}}}')
    assert st.numa_cells == {0: [0]}
    assert parse_memory_manager_state(load("memory_manager_state.none.gengwg.json")).policy == "None"


def test_device_checkpoint_in_both_layouts():
    """pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go: DeviceIDs per NUMA node since 1.20, a list
    before; the NVIDIA device plugin's ids are GPU UUIDs, with '::<replica>' under time-slicing."""
    from conformance.facts.checkpoints import parse_device_checkpoint

    numa = {
        "Data": {
            "PodDeviceEntries": [
                {"PodUID": "u1", "ContainerName": "llm", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-aaa"]},
                 "AllocResp": "CgA="},
                {"PodUID": "u2", "ContainerName": "tok", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"1": ["GPU-bbb::3"]}},
            ],
            "RegisteredDevices": {"nvidia.com/gpu": ["GPU-aaa", "GPU-bbb::3"]},
        },
        "Checksum": 1234,
    }  # fmt: skip
    got = parse_device_checkpoint(json.dumps(numa), "cp")
    assert got == {"GPU-aaa": "pod u1 container llm (nvidia.com/gpu)", "GPU-bbb": "pod u2 container tok (nvidia.com/gpu)"}
    old = {"Data": {"PodDeviceEntries": [{"PodUID": "u3", "ContainerName": "c", "ResourceName": "nvidia.com/gpu",
                                          "DeviceIDs": ["GPU-ccc"]}], "RegisteredDevices": {}}, "Checksum": 1}  # fmt: skip
    assert parse_device_checkpoint(json.dumps(old), "cp") == {"GPU-ccc": "pod u3 container c (nvidia.com/gpu)"}
    assert parse_device_checkpoint('{"Data": {}, "Checksum": 0}', "cp") == {}
    with pytest.raises(ParseError, match="cp: not JSON"):
        parse_device_checkpoint("{", "cp")


def _gpus():
    from conformance.facts.gpu import Gpu, GpuFacts

    return GpuFacts(
        gpus=[
            Gpu(0, "GPU-ad63c684-5593-111a-cbb1-c1451ebcd0aa", "00000000:18:00.0", mig=False),
            Gpu(1, "GPU-bbb", "00000000:9a:00.0", mig=False),
            Gpu(2, "GPU-ccc", "00000000:c1:00.0", mig=False),
        ],
        source="NVML",
    )


def _assignments(*grants, dra=()):
    from conformance.facts.checkpoints import DeviceGrant, KubeletAssignments

    return KubeletAssignments(frozenset(), tuple(DeviceGrant(d, r, "pod u container c") for d, r in grants), dra)


def test_the_real_list_layout_checkpoint_names_its_gpus():
    """kubernetes/kubernetes issue 75880: a node's checkpoint before 1.20, GPU UUIDs as device ids."""
    from conformance.facts.checkpoints import parse_device_grants
    from conformance.measurements.gpu_measure import plan

    grants = parse_device_grants(load("kubelet_internal_checkpoint.list-layout.k8s-issue-75880.json"), "cp")
    assert [(g.device, g.resource) for g in grants] == [
        ("GPU-ad63c684-5593-111a-cbb1-c1451ebcd0aa", "nvidia.com/gpu"),
        ("GPU-72cbf723-9f70-7d49-a6bb-626fcb3f8c30", "nvidia.com/gpu"),
    ]
    from conformance.facts.checkpoints import KubeletAssignments

    measure, skipped = plan(_gpus(), KubeletAssignments(frozenset(), tuple(grants)))
    # GPU0 is held; the other UUID is a GPU this node does not list (another node's, or gone): it could be
    # any GPU of this node, so none is touched
    assert measure == []
    assert skipped["GPU-ad63c684-5593-111a-cbb1-c1451ebcd0aa"].startswith(
        "assigned by the kubelet to pod 9a422c32-4fc2-11e9-bb64-505dac4c3a38 container notebook (nvidia.com/gpu)"
    )
    assert "names no GPU of this node" in skipped["GPU-bbb"]


def test_a_gpu_the_kubelet_gave_to_a_pod_is_not_measured():
    from conformance.measurements.gpu_measure import plan

    measure, skipped = plan(_gpus(), _assignments(("GPU-bbb::3", "nvidia.com/gpu")))  # time-slicing replica
    assert measure == ["GPU-ad63c684-5593-111a-cbb1-c1451ebcd0aa", "GPU-ccc"]
    assert skipped == {"GPU-bbb": "assigned by the kubelet to pod u container c (nvidia.com/gpu): not touched"}


@pytest.mark.parametrize(
    ("grant", "measured"),
    [
        # NVIDIA/k8s-device-plugin issue 373 / PR 386: DEVICE_ID_STRATEGY=index made plugins report "0", "1"
        (("1", "nvidia.com/gpu"), 0),
        (("0:1", "nvidia.com/mig-1g.10gb"), 0),  # a MIG slice by index
        (("gpu-0", "example.com/gpu"), 0),  # another vendor's or a sharing plugin's own ids
        (("0000:9a:00.0", "intel.com/vfio"), 2),  # a passthrough plugin's PCI address: that GPU only
        (("0000:3b:00.1", "openshift.io/sriov_nic"), 3),  # a NIC: no GPU
        (("MIG-5c6d", "nvidia.com/mig-1g.10gb"), 0),  # a MIG device, and no GPU of the node in MIG mode
    ],
)
def test_device_ids_that_name_no_gpu_count_as_every_gpu(grant, measured):
    from conformance.measurements.gpu_measure import plan

    measure, skipped = plan(_gpus(), _assignments(grant))
    assert len(measure) == measured, skipped


def test_unknown_assignments_touch_no_gpu():
    from conformance.measurements.gpu_measure import plan

    measure, skipped = plan(_gpus(), "cpu_manager_state: permission denied")
    assert measure == [] and set(skipped.values()) == {
        "what the kubelet assigned could not be established (cpu_manager_state: permission denied): not touched"
    }
    measure, skipped = plan(_gpus(), _assignments(dra=("gpu.nvidia.com",)))
    assert measure == [] and "GPU DRA driver(s) gpu.nvidia.com registered with the kubelet" in skipped["GPU-bbb"]


@pytest.mark.parametrize(
    "text",
    ['{"Data": {"PodDeviceEntries": [7]}}', '{"Data": {"PodDeviceEntries": [{"DeviceIDs": 3}]}}', "[]", '{"Checksum": 1}'],
)
def test_a_device_checkpoint_of_another_shape_is_a_parse_error(text):
    from conformance.facts.checkpoints import parse_device_grants

    with pytest.raises(ParseError, match="cp: "):
        parse_device_grants(text, "cp")


# -- the kubelet's DRA checkpoint, on the kubelet's own test inputs (tests/samples/README.md) ---------------
def test_dra_checkpoint_single_claim():
    (e,) = parse_dra_checkpoint((SAMPLES / "dra_manager_state.k8s-unittest.single-claim.json").read_text(), "dra_manager_state")
    assert e.claim == "default/example" and e.claim_uid == "067798be-454e-4be4-9047-1aa06aea63f7"
    assert e.pod_uids == {"139cdb46-f989-4f17-9561-ca10cfb509a6"}
    assert e.devices == (("test-driver.cdi.k8s.io", "worker-1", "dev-1"),)


def test_dra_checkpoint_two_claims_with_null_request_names():
    got = parse_dra_checkpoint((SAMPLES / "dra_manager_state.k8s-unittest.two-claims.json").read_text(), "dra_manager_state")
    assert [(e.claim, e.devices) for e in got] == [
        ("default/example-1", (("test-driver.cdi.k8s.io", "worker-1", "dev-1"),)),
        ("default/example-2", (("test-driver.cdi.k8s.io", "worker-1", "dev-2"),)),
    ]


def test_dra_checkpoint_with_a_wrong_checksum_is_refused_as_the_kubelet_refuses_it():
    text = (SAMPLES / "dra_manager_state.k8s-unittest.incorrect-checksum.json").read_text()
    with pytest.raises(ParseError, match="checksum 2930258365 does not match"):
        parse_dra_checkpoint(text, "dra_manager_state")


@pytest.mark.parametrize(
    "text, why",
    [
        ("{", "not valid JSON"),
        ('{"version": "v1", "entries": [], "checksum": 1}', "alpha DRA checkpoint layout"),
        ('{"Data": 5, "Checksum": 1}', "Data is not a string"),
        (json.dumps({"Data": '{"kind":"Other"}', "Checksum": 3}), "does not match"),
    ],
)
def test_dra_checkpoint_malformed(text, why):
    with pytest.raises(ParseError, match=why):
        parse_dra_checkpoint(text, "dra_manager_state")


@pytest.mark.parametrize(
    "driver_state",
    [{"d": ["x"]}, {"d": {"Devices": "x"}}, {"d": {"Devices": [1]}}, {"d": 7}],
    ids=["state-a-list", "devices-a-string", "device-a-number", "state-a-number"],
)
def test_dra_checkpoint_with_a_valid_checksum_over_unexpected_json_is_a_parse_error(driver_state):
    """Issue 53.10: a well-formed checksum over JSON of another shape is a ParseError naming the file and the
    entry, never the suite's own AttributeError."""
    import json
    import zlib

    entry = {"ClaimUID": "u", "ClaimName": "c", "Namespace": "n", "DriverState": driver_state}
    data = json.dumps({"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "Entries": [entry]})
    text = json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())})
    with pytest.raises(ParseError, match=r"/var/lib/kubelet/dra_manager_state: Data.Entries\[0\].DriverState\[d\]"):
        parse_dra_checkpoint(text, "/var/lib/kubelet/dra_manager_state")


def test_the_1_37_cpu_checkpoint_is_read_from_its_data_field():
    """Issue 52.8: a 1.37 kubelet writes V4, the payload as JSON text in `data` (with `dataChecksum`), and the older
    layout beside it with `checksum` 0 for a downgraded kubelet (pkg/kubelet/cm/cpumanager/state/checkpoint.go,
    MarshalCheckpoint; kubernetes/kubernetes PR 139102). Pod-level sets (`podEntries`) are read too."""
    st = parse_cpu_manager_state(load("cpu_manager_state.static.v4.k8s-1.37-layout.constructed.json"))
    uid = "6e1b2c9d-0b8a-4a53-9a44-5e2f0c7d1a11"
    assert (st.policy, st.version) == ("static", 4)
    assert st.entries[uid]["vllm"] == {2, 3, 4, 5, 12, 13, 14, 15}
    assert st.pod_entries[uid] == st.entries[uid]["vllm"]
    assert st.default_cpus == {0, 1, 10, 11}


def test_the_upstream_v4_unit_test_checkpoint_holds_only_data():
    """The upstream unit test's V4 input has `data` and no legacy fields: everything comes from `data` (its key
    spelled defaultCPUSet, which Go's case-insensitive decoding accepts)."""
    st = parse_cpu_manager_state(load("cpu_manager_state.k8s-unittest.v4.data-only.json"))
    assert st.version == 4 and st.policy == "static"
    assert st.entries == {"pod": {"container1": {4, 5, 6}, "container2": {7, 8, 9}}}
    assert st.pod_entries == {"pod": frozenset(range(4, 11))} and st.default_cpus == {1, 2, 3}


def test_data_decides_when_the_legacy_fields_disagree():
    """A 1.37 kubelet restores `data` alone (UnmarshalCheckpoint, VerifyChecksum over Data): the legacy copy
    never decides, so an assignment only it shows is not one."""
    doc = json.loads(load("cpu_manager_state.static.v4.k8s-1.37-layout.constructed.json"))
    doc["entries"] = {"other": {"c": "6-7"}}
    st = parse_cpu_manager_state(json.dumps(doc))
    assert "other" not in st.entries and "6e1b2c9d-0b8a-4a53-9a44-5e2f0c7d1a11" in st.entries


@pytest.mark.parametrize(
    "data, why",
    [
        (5, "field data is not a string"),
        ("", r"\(field data\): not valid JSON"),
        ("[1]", r"\(field data\): expected a JSON object"),
    ],
)
def test_an_unreadable_data_field_is_a_parse_error(data, why):
    doc = {"policyName": "static", "defaultCpuSet": "0-3", "checksum": 0, "data": data, "dataChecksum": 1}
    with pytest.raises(ParseError, match=why):
        parse_cpu_manager_state(json.dumps(doc), "/var/lib/kubelet/cpu_manager_state")
    with pytest.raises(ParseError, match=why):
        parse_memory_manager_state(json.dumps({**doc, "policyName": "Static"}), "/var/lib/kubelet/memory_manager_state")


def test_pod_entries_of_another_shape_are_a_parse_error():
    with pytest.raises(ParseError, match=r"podEntries\[p\].cpuSet"):
        parse_cpu_manager_state(json.dumps({"policyName": "static", "defaultCpuSet": "", "podEntries": {"p": "1-2"}}))


def test_the_1_37_memory_checkpoint_is_read_from_its_data_field():
    """Memory manager V3 (1.37, kubernetes/kubernetes PR 139626): the same dual layout; here on a Grace node in
    CDMM, whose HBM node 2 holds no system memory."""
    st = parse_memory_manager_state(load("memory_manager_state.static.v3.k8s-1.37-layout.constructed.json"))
    assert st.policy == "Static" and st.numa_cells == {0: [0], 2: [2]}
    assert st.entries["6e1b2c9d-0b8a-4a53-9a44-5e2f0c7d1a11"]["vllm"][0]["numaAffinity"] == [0]
