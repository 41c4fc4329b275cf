import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.config.units import parse_duration, parse_quantity
from conformance.errors import ParseError
from conformance.facts.cpulist import format_cpulist, parse_cpulist

SAMPLES = Path(__file__).parent / "samples"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("", set()), ("\n", set()), ("5", {5}), ("0,4", {0, 4})],
)
def test_parse(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["0-", "5-2", "99999999", "a", "1,,2", "-1", "1-2-3", "٣"])
def test_malformed_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_cpulist(text)


def test_sysfs_samples():
    assert parse_cpulist((SAMPLES / "sysfs.cpu0.topology.thread_siblings_list.prometheus-procfs.txt").read_text()) == {0, 4}
    assert parse_cpulist((SAMPLES / "sysfs.cpu0.topology.core_siblings_list.prometheus-procfs.txt").read_text()) == set(range(8))
    assert parse_cpulist((SAMPLES / "sysfs.pci.0000-a2-00.0.local_cpulist.prometheus-procfs.txt").read_text()) == set(
        range(64, 128)
    )


@given(st.sets(st.integers(0, 4000), max_size=200))
def test_format_roundtrip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@given(st.text(max_size=40))
def test_only_parse_errors_escape(text):
    with contextlib.suppress(ParseError):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10), ("1m0s", 60), ("4h0m0s", 14400), ("500ms", 0.5), ("1m30.5s", 90.5), ("0", 0)]
)
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10", "s", "1x", "", True, None])
def test_bad_durations(text):
    with pytest.raises(ParseError):
        parse_duration(text)


def test_quantities():
    assert parse_quantity("1500m") == pytest.approx(1.5)
    assert parse_quantity("2") == 2
    assert parse_quantity(2) == 2
    assert parse_quantity("1Gi") == 2**30
    with pytest.raises(ParseError):
        parse_quantity("two")
