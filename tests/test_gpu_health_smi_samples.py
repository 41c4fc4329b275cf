"""GPU health judged from real `nvidia-smi -q -x` documents (tests/samples/README.md: telegraf's captures of
an A100 with MIG on, an A10G, a Tesla T4 and a GeForce RTX 3080), and from the same documents with one value
made unreadable: what nvidia-smi prints as N/A is "not supported", what it leaves out is unknown, never 0."""

from __future__ import annotations

import pytest

from conformance.checks.gpu_health import judge_clock_events, judge_ecc, judge_row_remap
from conformance.config.profile import load_profile
from conformance.facts.gpu import parse_smi_xml
from tests.lab.nodes import SAMPLES

GP = load_profile(None).get("gpu")


def doc(name: str) -> str:
    return (SAMPLES / f"nvidia-smi_q_x.{name}.telegraf-testdata.xml").read_text()


def gpus(text: str):
    return parse_smi_xml(text).gpus


def test_no_ecc_geforce_skips_ecc_and_memory_repair():
    (g,) = gpus(doc("rtx-3080-v12"))
    ecc, rows = judge_ecc([g], GP), judge_row_remap([g], GP)
    assert (ecc.applied, ecc.unknowns, ecc.failures) == (0, [], []) and ecc.why_not == "no GPU on this node supports ECC"
    assert (rows.applied, rows.unknowns) == (0, []) and "neither row remapping nor page retirement" in rows.lines[0]


def test_turing_t4_is_judged_by_page_retirement_and_lifetime_count():
    (g,) = gpus(doc("tesla-t4"))
    rows = judge_row_remap([g], GP)
    assert rows.applied == 1 and not rows.failures and not rows.unknowns
    assert "retired pages: 0 for single-bit, 0 for double-bit errors; pending no" in rows.lines[0]
    # pre-Ampere: the lifetime (aggregate) uncorrected count is judged against the profile's limit
    worn = doc("tesla-t4").replace(
        "<aggregate>\n                <sram_correctable>0</sram_correctable>\n                <sram_uncorrectable>0",
        "<aggregate>\n                <sram_correctable>0</sram_correctable>\n                <sram_uncorrectable>3",
    )
    assert worn != doc("tesla-t4")
    assert any("3 uncorrected ECC error(s) in the GPU's lifetime" in f for f in judge_ecc(gpus(worn), GP).failures)


def test_ampere_a10g_is_judged_by_row_remapping_not_its_lifetime_count():
    (g,) = gpus(doc("a10g"))
    rows = judge_row_remap([g], GP)
    assert rows.applied == 1 and not rows.failures and not rows.unknowns and "row remapping:" in rows.lines[0]
    text = doc("a10g")
    block = text[text.index("<aggregate>") :]
    worn = text.replace(block, block.replace("<dram_uncorrectable>0<", "<dram_uncorrectable>2<", 1), 1)
    assert worn != text
    v = judge_ecc(gpus(worn), GP)
    assert not v.failures and any("lifetime uncorrected count 2 not judged: this GPU remaps rows" in x for x in v.lines)


def test_mig_a100_row_remapping_is_unknown_not_absent():
    (g,) = gpus(doc("a100-sxm4-v12"))
    assert g.mig is True
    rows = judge_row_remap([g], GP)
    assert rows.applied == 0 and len(rows.unknowns) == 1 and "not reported while MIG is enabled" in rows.unknowns[0]
    ecc = judge_ecc([g], GP)
    assert ecc.applied == 1 and not ecc.failures and not ecc.unknowns


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("<pending_retirement>No</pending_retirement>", "<pending_retirement>Unknown Error</pending_retirement>"),
        ("<pending_blacklist>No</pending_blacklist>\n            <pending_retirement>No</pending_retirement>", ""),
    ],
    ids=["garbled", "left-out"],
)
def test_an_unread_retirement_pending_status_is_unknown(old, new):
    text = doc("tesla-t4")
    assert old in text
    rows = judge_row_remap(gpus(text.replace(old, new)), GP)
    assert (
        "pending unknown" in rows.lines[0]
        and rows.unknowns
        and "page retirement is pending could not be read" in rows.unknowns[0]
    )


def test_an_unread_process_list_is_not_an_idle_gpu():
    text = doc("tesla-t4")
    start, end = text.index("<processes>"), text.index("</processes>") + len("</processes>")
    (g,) = gpus(text[:start] + text[end:])
    v = judge_clock_events([g], GP)
    assert v.applied == 0 and v.unknowns and "compute processes could not be read" in v.unknowns[0]
    (busy,) = gpus(text)  # the real document lists its processes: one compute process (and Xorg)
    assert (
        not judge_clock_events([busy], GP).unknowns and "busy (1 compute process(es))" in judge_clock_events([busy], GP).lines[0]
    )
