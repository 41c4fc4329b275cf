"""Issue 59 item 3: every transport caps what one node may return. A program that prints more than the cap is
stopped and the collection is an error that names the cap, never a runner holding the output without limit (the
SSH transports are capped the same way: tests/test_lab_decoys.py shows what a node's users can no longer add)."""

from __future__ import annotations

import pytest

from conformance.collection.transports.base import OUTPUT_CAP
from conformance.collection.transports.local import LocalTransport
from conformance.errors import TransportError


def test_output_past_the_cap_is_a_clear_error():
    t = LocalTransport()
    with pytest.raises(TransportError) as e:
        t.run(["sh", "-c", f"head -c {OUTPUT_CAP + 5_000_000} /dev/zero; sleep 60"], b"", timeout=120)
    assert e.value.kind == "error"
    assert "passed 64 MiB" in str(e.value) and "nothing of it is judged" in str(e.value)


def test_output_below_the_cap_is_kept_whole():
    out = LocalTransport().run(["sh", "-c", "head -c 3000000 /dev/zero"], b"", timeout=120)
    assert out.exit_status == 0 and len(out.stdout) == 3_000_000
