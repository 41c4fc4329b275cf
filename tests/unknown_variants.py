"""Less information never makes a pass: the variants and the comparison behind
tests/test_unknown_never_passes.py.

From each base snapshot (a node as the collector returned it), one variant per record: that record made
unreadable (status `denied`, no data), everything else as it was. All variants are judged offline in one
`conformance run --snapshot`; a (check, subject) that failed or errored on the base node must still fail or
error on every variant of it, and the node's verdict must never improve."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

BAD = ("failed", "error")
VERDICT_RANK = {"accepted": 0, "rejected": 1, "unreachable": 2}


@dataclass(frozen=True)
class Violation:
    node: str  # the base node
    record: str  # the record made unreadable: "KIND NAME"
    check: str
    subject: str
    before: str  # outcome on the base node
    after: str  # outcome on the variant (or "absent")
    message: str  # the variant's message

    def __str__(self) -> str:
        where = f"{self.node}: {self.record} unreadable: {self.check} {self.subject}"
        return f"{where} {self.before} -> {self.after} ({self.message[:160]})"


def variant_name(base: str, index: int) -> str:
    return f"{base}--r{index}"


def write_variants(bases: list[Path], out: Path) -> dict[str, tuple[str, str]]:
    """Write every base snapshot and its variants to `out`; returns variant node -> (base node, record)."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, tuple[str, str]] = {}
    for path in bases:
        doc = json.loads(path.read_text())
        if doc.get("error"):
            continue  # a node that was not collected has no records to take away
        (out / path.name).write_text(json.dumps(doc))
        for i, rec in enumerate(doc["records"]):
            variant = dict(doc, node=variant_name(doc["node"], i))
            variant["records"] = [*doc["records"][:i], {"kind": rec["kind"], "name": rec["name"], "status": "denied"}]
            variant["records"] += doc["records"][i + 1 :]
            (out / f"{variant['node']}.json").write_text(json.dumps(variant))
            made[variant["node"]] = (doc["node"], f"{rec['kind']} {rec['name']}")
    return made


def judge(snapshots: Path, out: Path, profile: Path | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    args = [sys.executable, "-m", "conformance", "run", "--snapshot", str(snapshots), "--output", str(out)]
    if profile is not None:
        args += ["--profile", str(profile)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    return p, json.loads((out / "results.json").read_text())


def violations(doc: dict, made: dict[str, tuple[str, str]]) -> list[Violation]:
    results: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
    for r in doc["results"]:
        results[r["node"]][(r["check"], json.dumps(r.get("subject") or {}, sort_keys=True))] = r
    verdict = {n["name"]: n["verdict"] for n in doc["nodes"]}
    found = []
    for variant, (base, record) in made.items():
        got = results[variant]
        for key, r in results[base].items():
            if r["outcome"] not in BAD:
                continue
            v = got.get(key)
            if v is None:  # the subject vanished: its failure must show as another failure of the check
                if not any(c == key[0] and x["outcome"] in BAD for (c, _), x in got.items()):
                    found.append(Violation(base, record, key[0], key[1], r["outcome"], "absent", ""))
            elif v["outcome"] not in BAD:
                found.append(Violation(base, record, key[0], key[1], r["outcome"], v["outcome"], v["message"]))
        if VERDICT_RANK[verdict[variant]] < VERDICT_RANK[verdict[base]]:
            found.append(Violation(base, record, "(verdict)", "", verdict[base], verdict[variant], ""))
    return found
