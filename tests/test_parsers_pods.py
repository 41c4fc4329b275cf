"""What a container's exec prints, parsed: a real /proc status sample, a real /proc/<pid>/stat of this
process (field 39 after the command name, whatever the name holds), quantities, and redaction of
secret-looking environment values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.cluster.pods import last_cpu, parse_inside, selector_matches
from conformance.errors import FactUnavailable
from conformance.facts.units import bytes_of, cpu_count
from tests.lab.nodes import SAMPLES

STATUS = (SAMPLES / "proc_pid_status.prometheus-procfs-fixture.txt").read_text()


def inside_output(extra_env: str = "") -> str:
    own = [ln for ln in STATUS.splitlines() if ln.startswith(("Cpus_allowed_list", "Mems_allowed_list"))]
    stat = Path("/proc/self/stat").read_text().strip()
    return "\n".join(
        ["@self", *own, "@shm", "2097152", "@dev", "0", "3", "@task 1 1", "Name:\tpython3", "Cpus_allowed_list:\t0-1",
         f"stat {stat}", "@task 1 7", "Name:\tworker", "Cpus_allowed_list:\t1", "@env 1", "OMP_NUM_THREADS=4", extra_env, "@end"]
    )  # fmt: skip


def test_parse_inside_with_a_real_status_sample():
    f = parse_inside(inside_output(), "pod x")
    assert f.cpus == frozenset(range(8)) and f.mems == frozenset({0})  # the sample's 0-7 and 0
    assert f.shm_bytes == 2 * 2**30 and f.gpu_minors == [0, 3]
    assert [(t.pid, t.tid, t.name) for t in f.tasks] == [(1, 1, "python3"), (1, 7, "worker")]
    assert f.tasks[0].last_cpu in range(os.cpu_count() or 1)  # this process's own stat, field 39
    assert f.env == {1: {"OMP_NUM_THREADS": "4"}}


def test_secret_looking_values_are_masked_even_when_listed():
    f = parse_inside(inside_output("HF_TOKEN=hf_abcdef"), "pod x")
    assert f.env[1]["HF_TOKEN"] == "<redacted>"


def test_an_exec_that_said_nothing_about_itself_is_an_error():
    with pytest.raises(FactUnavailable, match="pod x: /proc/self/status gave no Cpus_allowed_list"):
        parse_inside("@self\n@end\n", "pod x")


def test_last_cpu_survives_spaces_and_parentheses_in_the_name():
    fields = " ".join(["S", *["0"] * 35, "7", "0"])  # state, ..., field 39 = 7
    assert last_cpu(f"42 (a) b) (c) {fields}") == 7
    assert last_cpu("42 (short) S 1") is None


@pytest.mark.parametrize(("q", "cpus"), [("4", 4), ("500m", 0.5), (2, 2), ("1.5", 1.5), (None, None), ("x", None)])
def test_cpu_quantities(q, cpus):
    assert cpu_count(q) == cpus


def test_memory_quantities():
    assert bytes_of("1Gi") == 2**30 and bytes_of("512Mi") == 512 * 2**20 and bytes_of(None) is None


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [("app=llm", {"app": "llm"}, True), ("app=llm,tier!=batch", {"app": "llm", "tier": "batch"}, False),
     ("gpu", {"gpu": ""}, True), ("gpu", {}, False), (None, {"app": "llm"}, False)],
)  # fmt: skip
def test_profile_selector(selector, labels, want):
    assert selector_matches(selector, labels) is want
