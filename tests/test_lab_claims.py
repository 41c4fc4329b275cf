"""Labs that would share a 198.18.N.0/24 take turns (tests/lab/builder.py _claim): under pytest-xdist two modules'
labs ran at once on overlapping ranges, and the second one's stale-link sweep deleted the first one's veth (a lab
that failed to start with `ip link set ... up` exit 2, in one of three full runs this round)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.conftest import require_or_skip
from tests.lab import builder

NET = 199  # a range no lab of the suite uses


@pytest.fixture
def as_root():
    require_or_skip(None if os.geteuid() == 0 else "the labs' range claims live in /run: root only")


def test_a_held_range_makes_the_next_lab_wait_and_names_the_holder(as_root, monkeypatch):
    first = builder._claim([NET], "the first lab")
    try:
        monkeypatch.setattr(builder, "CLAIM_WAIT_S", 1)
        with pytest.raises(RuntimeError, match=r"198\.18\.199\.0/24 is still held by another lab \(the first lab, pid"):
            builder._claim([NET, NET - 1], "the second lab")
        # the range below it was not left held by the failed claim
        builder._release(builder._claim([NET - 1], "a third lab"))
    finally:
        builder._release(first)
    builder._release(builder._claim([NET], "after the first"))


def test_the_waiting_lab_gets_the_range_when_the_holder_lets_go(as_root):
    first = builder._claim([NET], "the first lab")
    threading.Timer(1.0, builder._release, args=(first,)).start()
    t0 = time.monotonic()
    second = builder._claim([NET], "the second lab")  # waits for the timer, well inside CLAIM_WAIT_S
    try:
        assert time.monotonic() - t0 >= 0.9
        assert b"the second lab" in os.pread(second[0][0], 4096, 0)
    finally:
        builder._release(second)


def test_a_lab_leaves_no_lock_file_behind(as_root):
    builder._release(builder._claim([NET, NET - 1], "a lab"))
    assert not (builder.CLAIMS / f"198.18.{NET}").exists()
    assert not (builder.CLAIMS / f"198.18.{NET - 1}").exists()
