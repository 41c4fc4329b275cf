"""Issue 53.21: whatever a node sends, the answer is a verdict naming the record, never the suite's own exception.

Real records (the real collector over the sample host root, as `conformance collect` writes them) are mangled
the way broken collections mangle them: cut short, emptied, a number made huge or not a number, a line
repeated, a listing cut mid-path. A seeded choice of variants, one node each, is judged in one replay; no
result may say "a defect in the check"."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.test_cli_local import sample_host_root

SEED = 53021
MANGLES = {
    "cut": lambda t: t[: len(t) // 2],
    "empty": lambda t: "",
    "huge": lambda t: "".join("99999999999999999999" if c.isdigit() else c for c in t[:40]) or "9" * 20,
    "not-a-number": lambda t: "".join("x" if c.isdigit() else c for c in t) or "x",
    "big-range": lambda t: "0-4096\n",
    "reversed": lambda t: "3-0\n",
    "negative": lambda t: "-1\n",
    "dash": lambda t: "-\n",
    "blank-items": lambda t: " , \n",
    "repeated": lambda t: t + t,
    "line-added": lambda t: t + "0-3\n",
    "cut-line": lambda t: "\n".join(line[: max(0, len(line) - 3)] for line in t.split("\n")),
}


def _variants(doc: dict, folder: Path, count: int) -> int:
    rng = random.Random(SEED)
    targets = [i for i, r in enumerate(doc["records"]) if r["kind"] in ("F", "T", "G", "C") and "text" in r]
    cpu = [i for i in targets if any(k in doc["records"][i]["name"] for k in ("cpulist", "cpu/online", "thread_sib"))]
    # every mangle of every CPU list record (the ones round 5 found leaking), then a seeded sample of the rest
    chosen = [(i, m) for i in cpu for m in MANGLES]
    rest = [(i, m) for i in targets if i not in cpu for m in MANGLES]
    chosen += rng.sample(rest, min(len(rest), max(0, count - len(chosen))))
    for n, (i, m) in enumerate(chosen):
        d = copy.deepcopy(doc)
        d["records"][i]["text"] = MANGLES[m](d["records"][i]["text"])
        d["node"] = f"v{n:03d}-{m}"
        (folder / f"{d['node']}.json").write_text(json.dumps(d))
    return len(chosen)


@pytest.mark.slow  # every check over hundreds of mangled snapshots
def test_no_exception_of_the_suite_reaches_a_result(tmp_path):
    host = sample_host_root(tmp_path / "host")
    one = tmp_path / "one"
    argv = [sys.executable, "-m", "conformance", "collect", "--host-root", str(host), "--output", str(one)]
    assert subprocess.run(argv, capture_output=True, text=True, timeout=300).returncode == 0
    (snapshot,) = one.glob("*.json")
    variants = tmp_path / "variants"
    variants.mkdir()
    made = _variants(json.loads(snapshot.read_text()), variants, int(os.environ.get("GNC_MANGLED_VARIANTS", "240")))
    out = tmp_path / "out"
    run = [sys.executable, "-m", "conformance", "run", "--snapshot", str(variants), "--output", str(out)]
    p = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())["results"]
    assert len({r["node"] for r in results}) == made
    leaks = Counter(
        (r["node"].split("-", 1)[1], r["check"], r["message"][:120])
        for r in results
        if "a defect in the check" in (r.get("message") or "")
    )
    assert not leaks, f"{sum(leaks.values())} results carry the suite's own exception: {leaks.most_common(8)}"
