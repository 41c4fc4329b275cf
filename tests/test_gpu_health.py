"""GPU health facts and judges: Xid lines from real kernel logs, the nvidia-smi -q -x health elements,
the NVML probe's health fields, and each judge's verdicts at its edges. The end-to-end verdicts on lab
nodes are in tests/test_lab_gpu.py."""

from __future__ import annotations

import json

import pytest
import yaml

from conformance.checks.gpu_health import (
    judge_clock_events,
    judge_ecc,
    judge_fabric,
    judge_nvlink,
    judge_persistence,
    judge_row_remap,
    judge_xids,
)
from conformance.config.profile import load_profile
from conformance.errors import UsageError
from conformance.facts.gpu import Gpu, parse_nvml_probe, parse_smi_xml
from conformance.facts.gpu_health import GpuHealth, NvLink, health_from_nvml, parse_smi_nvlink
from conformance.facts.xid import XidLog, classify, parse_xid_lines, pci_key
from tests.lab.nodes import SAMPLES

GP = load_profile(None).get("gpu")
REAL = (SAMPLES / "kernel-log.xid.real-lines.txt").read_text()


def gpu(bus: str = "0000:18:00.0", **health) -> Gpu:
    return Gpu(index=0, uuid="GPU-x", bus_id=bus, health=GpuHealth(**health))


def test_real_xid_lines_parse_with_address_time_and_class():
    events = parse_xid_lines(REAL)
    assert [(e.xid, e.pci, e.cls) for e in events] == [
        (79, "0000:2b:00", "fatal"),
        (63, "0000:10:1c", "informational"),  # the catalogue's IGNORE: GPU-ROW-REMAP judges the pending remap
        (31, "0000:01:00", "application"),
    ]
    assert events[0].when == "May 18 19:02:39"
    assert events[2].when == "Nov 22 18:29:55, 966.503025 s after boot"  # syslog time and the kernel's own
    assert events[1].text.startswith("pid=1896, Row Remapper")


@pytest.mark.parametrize(
    "line",
    [
        # a program's own line, not the kernel's
        "Dec  3 09:11:00 gpu python3[4242]: NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus.",
        "Dec  3 09:11:00 gpu kernel: NVRM: Xid (PCI:zzzz:19:00): 79, x",  # not an address
        "Dec  3 09:11:00 gpu kernel: NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014",  # not an Xid
        "Dec  3 09:11:00 gpu kernel: NVRM: Xid (PCI:0000:19:00) 79 no comma or colon",
    ],
)
def test_lines_that_only_look_like_xids_are_ignored(line):
    assert parse_xid_lines(line) == []


def test_hostile_xid_text_is_bounded_and_loses_control_characters():
    line = "Dec  3 09:10:00 gpu kernel: NVRM: Xid (PCI:0000:18:00): 13, <b>x</b> \x1b[2J" + "A" * 5000
    (e,) = parse_xid_lines(line)
    assert "\x1b" not in e.text and len(e.text) == 200 and e.text.startswith("<b>x</b> ?[2J")


@pytest.mark.parametrize(
    ("xid", "text", "cls"),
    [
        (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "fatal"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "reset"),
        (154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "informational"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x9 (Something New)", "unknown"),
        # classes from the catalogue's Resolution Bucket (Immediate Action), conformance/facts/xid_catalog.py
        (95, "Uncontained", "reset"),  # RESET_GPU
        (64, "x", "reset"),  # RESET_GPU (INFOROM_DRAM_RETIREMENT_FAILURE)
        (79, "x", "fatal"),  # RESTART_BM
        (109, "x", "reset"),  # RESET_GPU: the device plugin treats it as an application Xid, the catalogue does not
        (32, "x", "application"),  # RESTART_APP
        (48, "x", "reset"),  # WORKFLOW_XID_48
        (74, "x", "reset"),  # WORKFLOW_NVLINK_ERR
        (54, "x", "service"),  # CHECK_MECHANICALS
        (45, "x", "application"),  # WORKFLOW_XID_45
        (92, "x", "informational"),  # IGNORE
        (9999, "x", "unknown"),
    ],
)
def test_classification(xid, text, cls):
    assert classify(xid, text)[0] == cls


def test_xid_judge_fails_the_profile_classes_and_maps_gpus():
    log = XidLog(source="file /var/log/kern.log", detail="d", events=parse_xid_lines(REAL), total=3)
    gpus = [gpu("0000:2b:00.0")]
    v = judge_xids(log, gpus, GP)
    assert v.failures == ["GPU0 GPU-x (0000:2b:00.0): Xid 79 at May 18 19:02:39"]
    v = judge_xids(log, gpus, {**GP, "xid_fail": ["informational"]})
    assert v.failures == ["PCI 0000:10:1c: Xid 63 at (no timestamp)"]
    v = judge_xids(log, gpus, {**GP, "xid_fail": ["unknown"]})
    assert not v.failures and (
        "by class: fatal 1, reset 0, service 0, application 1, informational 1, unknown 0; failing classes: unknown" in v.lines
    )
    assert pci_key("00000000:2B:00.0") == "0000:2b:00"


def test_smi_xml_health_elements():
    a, b = parse_smi_xml((SAMPLES / "nvidia-smi_q_x.2gpu.constructed.xml").read_text()).gpus
    assert a.health.ecc_enabled and a.health.ecc_counts == {
        "volatile": {"corrected": 3, "uncorrected": 0},
        "aggregate": {"corrected": 12, "uncorrected": 0},
    }
    assert b.health.remapped_rows == {"corrected": 0, "uncorrected": 1, "pending": 0, "failure": 1}
    assert a.health.retired_pages is None  # N/A on a row-remapping GPU
    assert a.health.persistence is True and a.health.active_clock_reasons() == ["gpu_idle"]
    assert b.health.active_clock_reasons() == ["hw_slowdown"]
    assert a.health.fabric is None and a.health.nvlinks is None  # N/A, and not in -q -x at all


def test_smi_xml_of_older_drivers():
    xml = (
        "<nvidia_smi_log><gpu id='00000000:18:00.0'><uuid>GPU-1</uuid><pci><pci_bus_id>00000000:18:00.0</pci_bus_id></pci>"
        "<ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Disabled</pending_ecc></ecc_mode>"
        "<ecc_errors><volatile><single_bit><device_memory>1</device_memory><total>1</total></single_bit>"
        "<double_bit><device_memory>2</device_memory><total>2</total></double_bit></volatile></ecc_errors>"
        "<retired_pages><multiple_single_bit_retirement><retired_count>3</retired_count></multiple_single_bit_retirement>"
        "<double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>"
        "<pending_retirement>Yes</pending_retirement></retired_pages>"
        "<clocks_throttle_reasons><clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>"
        "</clocks_throttle_reasons><fabric><state>In Progress</state><status>N/A</status></fabric></gpu></nvidia_smi_log>"
    )
    (g,) = parse_smi_xml(xml).gpus
    assert g.health.ecc_counts == {"volatile": {"corrected": 1, "uncorrected": 2}}
    assert g.health.ecc_pending is False
    assert g.health.retired_pages == {"sbe": 3, "dbe": 1, "pending": 1}
    assert g.health.active_clock_reasons() == ["hw_slowdown"]
    assert g.health.fabric == {"state": 2, "status": None}  # N/A is no success


def test_nvml_probe_health_fields_and_what_the_driver_lacks():
    doc = {
        "probe": 1,
        "nvml": "ok",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-a",
                "bus_id": "00000000:18:00.0",
                "ecc_mode": [1, 0],
                "ecc_volatile_uncorrected": 0,
                "ecc_aggregate_uncorrected": 4,
                "remapped_rows": [1, 2, 0, 0],
                "nvlinks": [{"link": 0, "active": True, "errors": {"replay": 1}}],
                "persistence_mode": 1,
                "errors": {"fabric": "function not in this driver's NVML", "clock_event_reasons": "GPU is lost"},
            }
        ],
    }
    (g,) = parse_nvml_probe(json.dumps(doc)).gpus
    h = g.health
    assert (h.ecc_enabled, h.ecc_pending) == (True, False)
    assert h.ecc_counts == {"volatile": {"uncorrected": 0}, "aggregate": {"uncorrected": 4}}
    assert h.remapped_rows == {"corrected": 1, "uncorrected": 2, "pending": 0, "failure": 0}
    # the counters the probe did not report are unread, never 0
    unread = dict.fromkeys(("recovery", "crc_flit", "crc_data"), "not reported")
    assert h.nvlinks == [NvLink(0, True, {"replay": 1}, unread)]
    assert h.unread == {"fabric": "function not in this driver's NVML", "clock_event_reasons": "GPU is lost"}
    assert health_from_nvml({}, {"nvlinks": "not supported on this GPU"}).nvlinks == []


def test_ecc_judge():
    counts = {"volatile": {"corrected": 50, "uncorrected": 0}, "aggregate": {"corrected": 90, "uncorrected": 1}}
    v = judge_ecc([gpu(ecc_enabled=True, ecc_pending=True, ecc_counts=counts)], GP)
    assert v.failures == ["GPU0 GPU-x (0000:18:00.0): 1 uncorrected ECC error(s) in the GPU's lifetime (limit 0)"]
    v = judge_ecc(
        [gpu(ecc_enabled=True, ecc_counts=counts)], {**GP, "ecc_aggregate_uncorrected_limit": 1, "ecc_corrected_limit": 10}
    )
    assert v.failures == ["GPU0 GPU-x (0000:18:00.0): 50 corrected ECC errors since the driver loaded (limit 10)"]
    v = judge_ecc([gpu(ecc_enabled=False, ecc_pending=True)], GP)
    assert v.failures == ["GPU0 GPU-x (0000:18:00.0): ECC is off (on after the next reboot)"]
    assert not judge_ecc([gpu(ecc_enabled=False)], {**GP, "ecc_required": False}).failures
    v = judge_ecc([gpu(unread={"ecc_mode": "not supported on this GPU"})], GP)
    assert not v.applied and not v.unknowns and v.why_not == "no GPU on this node supports ECC"


def test_row_remap_judge():
    v = judge_row_remap([gpu(remapped_rows={"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 1})], GP)
    assert "remapping failed" in v.failures[0]
    v = judge_row_remap([gpu(retired_pages={"sbe": 8, "dbe": 3, "pending": 0})], GP)
    assert v.failures == ["GPU0 GPU-x (0000:18:00.0): 11 retired pages, above the limit of 10"]
    v = judge_row_remap([gpu(unread={})], GP)
    assert v.unknowns and not v.failures


def test_nvlink_judge():
    links = [NvLink(0, True, {"crc_data": 101}), NvLink(1, False, {})]
    v = judge_nvlink([gpu(nvlinks=links)], GP)
    assert v.failures == [
        "GPU0 GPU-x (0000:18:00.0): NVLink link(s) 1 down of 2",
        "GPU0 GPU-x (0000:18:00.0): link 0: crc_data 101 > 100",
    ]
    v = judge_nvlink([gpu(nvlinks=[])], GP)
    assert not v.applied and v.why_not == "no GPU on this node has NVLink"


def test_fabric_judge():
    # NVSwitches on the bus but a driver without fabric info (A100 era): the fabric manager decides
    v = judge_fabric([gpu(unread={"fabric": "function not in this driver's NVML"})], ["0000:05:00.0"], [812])
    assert v.applied and not v.failures
    v = judge_fabric([gpu(fabric={"state": 3, "status": 15})], [], [])
    assert v.failures == ["GPU0 GPU-x (0000:18:00.0): fabric registration completed with status GPU_IS_LOST"]
    v = judge_fabric([gpu(fabric={"state": 0, "status": 0})], [], [])
    assert not v.applied and "no NVSwitch" in v.why_not


def test_fabric_state_not_read_is_unknown_even_without_a_local_nvswitch():
    """GB200 NVL: the NVSwitches sit in other trays, so this node's PCI bus shows none; a GPU whose fabric state
    could not be read is then unknown (it was skipped before), and a completed registration without a status
    (a missing <status>) is unknown, not success."""
    v = judge_fabric([gpu(unread={"fabric": "Unknown Error"})], [], [])
    assert v.unknowns == ["GPU0 GPU-x (0000:18:00.0): NVLink fabric state not read (Unknown Error)"] and not v.why_not
    v = judge_fabric([gpu(fabric={"state": 3})], [], [])
    assert v.unknowns == ["GPU0 GPU-x (0000:18:00.0): fabric registration completed, but its status was not read"]
    assert not v.failures
    xml = (
        "<nvidia_smi_log><gpu id='00000000:18:00.0'><uuid>GPU-1</uuid><pci><pci_bus_id>00000000:18:00.0</pci_bus_id></pci>"
        "<fabric><state>Completed</state></fabric></gpu></nvidia_smi_log>"
    )
    (g,) = parse_smi_xml(xml).gpus
    assert g.health.fabric == {"state": 3, "status": None}
    assert judge_fabric([g], [], []).unknowns
    # no <fabric> at all: a driver before the fabric API, which predates multi-node NVLink; the fabric manager
    # decides where NVSwitches are on the bus
    no_fabric = parse_smi_xml(xml.replace("<fabric><state>Completed</state></fabric>", "")).gpus[0]
    assert not judge_fabric([no_fabric], [], []).unknowns and judge_fabric([no_fabric], [], []).why_not
    blank = parse_smi_xml(xml.replace("Completed", "")).gpus[0]  # an element with nothing in it: not read
    assert judge_fabric([blank], [], []).unknowns


@pytest.mark.parametrize(
    ("want", "mode", "daemon", "fails"),
    [
        ("mode_or_daemon", False, [9], False),
        ("mode_or_daemon", False, [], True),
        ("mode", False, [9], True),
        ("mode", True, [], False),
        ("daemon", True, [], True),
        ("daemon", False, [9], False),
        ("any", False, [], False),
    ],
)
def test_persistence_judge(want, mode, daemon, fails):
    v = judge_persistence([gpu(persistence=mode)], {**GP, "persistence": want}, daemon)
    assert bool(v.failures) == fails


def test_clock_events_judge_only_idle_gpus():
    busy = gpu(clock_reasons=0x48)
    busy.processes = [7]
    v = judge_clock_events([busy, gpu("0000:19:00.0", clock_reasons=0x80)], GP)
    assert v.failures == ["GPU0 GPU-x (0000:19:00.0): hw_power_brake_slowdown active while idle"] and v.applied == 1
    assert not judge_clock_events([gpu(clock_reasons=0x4)], GP).failures  # software power cap: a setting


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("xid_fail", ["fatal", "nonsense"], "gpu.xid_fail must be a list drawn from"),
        ("persistence", "always", "gpu.persistence must be mode_or_daemon or mode or daemon or any"),
        ("nvlink_error_limits", {"replay": -1}, "gpu.nvlink_error_limits must be a mapping of"),
        ("nvlink_error_limits", {"replays": 1}, "unknown key 'gpu.nvlink_error_limits.replays'"),
        ("clock_events_fail", ["hot"], "gpu.clock_events_fail must be a list drawn from"),
    ],
)
def test_profile_health_keys_are_validated(tmp_path, key, value, says):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({"extends": "default", "gpu": {key: value}}))
    with pytest.raises(UsageError, match=says):
        load_profile(str(f))


def test_nvidia_smi_nvlink_status_and_errors():
    from tests.lab.gpu_nodes import SMI_NVLINK_E, SMI_NVLINK_S

    links = parse_smi_nvlink(SMI_NVLINK_S, SMI_NVLINK_E)
    assert [(x.link, x.active) for x in links[0]] == [(0, True), (1, True), (2, True), (3, False)]
    assert links[0][1].errors == {"replay": 7, "recovery": 0, "crc_flit": 0} and links[1] == []
    # `nvlink -e` prints no CRC data line for any link of this GPU (current drivers do not report it: NVML's
    # DL_CRC_DATA is not supported from Ampere on): not supported, shown and not judged, never 0 (issue 53.5)
    assert links[0][1].unread == {"crc_data": "not supported on this GPU"}
    v = judge_nvlink([gpu(nvlinks=links[0])], GP)
    assert not v.unknowns and any("counter crc_data not supported by this GPU (not judged)" in x for x in v.lines)
    # a counter printed for some links and not for another stays unread, and the profile's limit on it errors
    cut = SMI_NVLINK_E.replace("Link 1: Replay Errors: 7", "")
    assert "Link 1: Replay" not in cut
    some = parse_smi_nvlink(SMI_NVLINK_S, cut)
    assert some[0][1].unread["replay"] == "not in the output of nvidia-smi nvlink -e for this link"
    assert any("link 1: error counter replay not read" in u for u in judge_nvlink([gpu(nvlinks=some[0])], GP).unknowns)


def test_nvlink_counters_never_read_are_unknown_not_clean():
    """`nvidia-smi nvlink -e` failed or was not run: no counter of any link was read, so GPU-NVLINK cannot pass
    (it passed before: empty counters and nothing marked unread)."""
    from tests.lab.gpu_nodes import SMI_NVLINK_S

    links = parse_smi_nvlink(SMI_NVLINK_S, "", "nvidia-smi nvlink -e failed (exit 3)")
    assert all(x.unread == dict.fromkeys(("replay", "recovery", "crc_flit", "crc_data"), "nvidia-smi nvlink -e failed (exit 3)")
               for x in links[0])  # fmt: skip
    v = judge_nvlink([gpu(nvlinks=[x for x in links[0] if x.active])], GP)
    assert not v.failures and len(v.unknowns) == 3 * 4


def test_links_expected_up_can_be_a_number():
    links = [NvLink(i, i < 10) for i in range(12)]  # a PCIe card with bridges on 10 of its 12 links
    assert judge_nvlink([gpu(nvlinks=links)], GP).failures
    assert not judge_nvlink([gpu(nvlinks=links)], {**GP, "nvlink_links_up": 10}).failures
    assert judge_nvlink([gpu(nvlinks=links)], {**GP, "nvlink_links_up": 11}).failures == [
        "GPU0 GPU-x (0000:18:00.0): 10 NVLink link(s) up, gpu.nvlink_links_up wants 11 (down: [10, 11])"
    ]


def test_nvlink_links_are_judged_each_on_its_own():
    """A link NVML does not support, a link whose state fails, and counters that fail: the other links are still
    judged (a down link still fails), and what was not read is unknown, never 0 or "no NVLink"."""
    probe = {
        "link0": {"link": 0, "state_error": "Unknown Error"},
        "link1": {"link": 1, "active": False, "errors": dict.fromkeys(("replay", "recovery", "crc_flit", "crc_data"), 0)},
        "link2": {"link": 2, "active": True, "errors": {"replay": 0}, "unread": {"recovery": "Unknown Error"}},
        "link3": {"link": 3, "active": True, "errors": {"replay": 0, "recovery": 0, "crc_flit": 0},
                  "unread": {"crc_data": "not supported on this GPU"}},
    }  # fmt: skip
    h = health_from_nvml({"nvlinks": list(probe.values())}, {})
    v = judge_nvlink([gpu(**{"nvlinks": h.nvlinks})], GP)
    assert v.failures == ["GPU0 GPU-x (0000:18:00.0): NVLink link(s) 1 down of 4"]
    assert "link 0: state not read (Unknown Error)" in v.unknowns[0]
    assert any("link 2: error counter recovery not read (Unknown Error)" in u for u in v.unknowns)
    assert any("link 2: error counter crc_flit not read (not reported)" in u for u in v.unknowns)
    assert not any("link 3" in u for u in v.unknowns)  # crc_data not supported there: shown, not judged
    assert any("link 3: counter crc_data not supported by this GPU" in x for x in v.lines)
    # every link answering NOT_SUPPORTED: the probe lists none, and the GPU has no NVLink
    none = judge_nvlink([gpu(nvlinks=health_from_nvml({"nvlinks": []}, {}).nvlinks)], GP)
    assert none.applied == 0 and none.why_not == "no GPU on this node has NVLink"


def test_row_remap_before_r450_and_without_page_retirement_does_not_apply():
    """A GeForce RTX 2080 Ti under driver 410 (Turing, before R450): nvidia-smi -q -x has no <remapped_rows> and
    prints page retirement as N/A. Neither mechanism exists there: GPU-ROW-REMAP skips, saying why (it errored).
    The same document from a driver that does report row remapping, with the element missing, stays unknown."""
    xml = (
        "<nvidia_smi_log><driver_version>410.79</driver_version><gpu id='00000000:01:00.0'><product_name>GeForce RTX 2080 Ti"
        "</product_name><uuid>GPU-2080</uuid><pci><pci_bus_id>00000000:01:00.0</pci_bus_id></pci>"
        "<retired_pages><multiple_single_bit_retirement><retired_count>N/A</retired_count></multiple_single_bit_retirement>"
        "<double_bit_retirement><retired_count>N/A</retired_count></double_bit_retirement>"
        "<pending_retirement>N/A</pending_retirement></retired_pages></gpu></nvidia_smi_log>"
    )
    (old,) = parse_smi_xml(xml).gpus
    v = judge_row_remap([old], GP)
    assert not v.unknowns and not v.failures and v.why_not == "no GPU on this node remaps rows or retires pages"
    assert any("neither row remapping nor page retirement is supported" in line for line in v.lines)
    (new,) = parse_smi_xml(xml.replace("410.79", "535.154.05")).gpus
    assert judge_row_remap([new], GP).unknowns


def test_an_empty_xid_fail_list_fails_no_class_and_a_pending_remap_says_what_nvml_says():
    from conformance.facts.xid import XidCount, XidEvent, XidLog

    e = XidEvent(79, "0000:18:00", "Dec  3 09:00:00", "GPU has fallen off the bus.", "fatal", "fell off")
    log = XidLog("file /var/log/kern.log", "whole boot", [e], 1, [XidCount(79, "0000:18:00", 1, e, e, 1)])
    assert judge_xids(log, [gpu()], {**GP, "xid_fail": []}).failures == []  # as the profile says: nothing fails
    assert judge_xids(log, [gpu()], {**GP, "xid_fail": None}).failures  # the default: fatal
    pending = gpu(remapped_rows={"corrected": 0, "uncorrected": 1, "pending": 1, "failure": 0})
    (msg,) = judge_row_remap([pending], GP).failures
    assert "takes effect at the next GPU reset" in msg and "before its memory is used" not in msg
