"""Less information never makes a pass: the variants and the comparison behind
tests/test_unknown_never_passes.py.

From each base snapshot (a node as the collector returned it), variants of each record, everything else as
it was: the record made unreadable (status `denied`, no data) and absent (not returned at all); a record that
holds data also empty and cut short (half its data, marked truncated). And variants that take away, at once,
every record of a fact that has several sources (NVML and nvidia-smi for the GPUs; the kernel log's Xid lines
with where they came from), so that one source cannot stand in for another that was lost. All variants are judged offline in one
`conformance run --snapshot` per part of the bases; a (check, subject) that failed or errored on the base node must still fail or
error on every variant of it, and the node's verdict must never improve."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

BAD = ("failed", "error")
VERDICT_RANK = {"accepted": 0, "incomplete": 1, "rejected": 1, "unreachable": 2}
# The records one fact is read from, in any order of preference: all of them go at once in one variant.
SOURCES = (
    ("C nvml-probe", "C nvidia-smi-q", "C nvidia-smi-topo", "C nvidia-smi-nvlink", "C nvidia-smi-nvlink-errors"),
    ("C nvidia-smi-nvlink", "C nvidia-smi-nvlink-errors"),
    ("C xid-lines", "M kernel-log", "M kernel-log-tried"),
)


# An empty file is sometimes a real node that the component reads so, and then a flip is the component's own
# verdict, not unknown passing: each such record, and what decides it.
EMPTY_IS_REAL = (
    # containerd loads an empty imported TOML file as a config that sets nothing: the real 1.6 daemon's
    # `config dump` says so in tests/test_containerd_real.py (case "empty-import")
    re.compile(r"^F /etc/containerd/(conf\.d/)?[^/]+\.toml empty$"),
)


def real_when_empty(what: str) -> bool:
    return any(p.match(what) for p in EMPTY_IS_REAL) and not what.startswith("F /etc/containerd/config.toml ")


def _data(rec: dict) -> str | None:
    return rec.get("text") if "text" in rec else rec.get("base64")


def mutations(rec: dict) -> list[tuple[str, dict | None]]:
    """(mode, the record as the variant holds it; None: left out) for one record."""
    out: list[tuple[str, dict | None]] = [("denied", {"kind": rec["kind"], "name": rec["name"], "status": "denied"}),
                                          ("absent", None)]  # fmt: skip
    data = _data(rec)
    if data and len(data) > 1 and rec["kind"] in ("F", "C"):
        key = "text" if "text" in rec else "base64"
        empty = {k: v for k, v in rec.items() if k not in ("text", "base64")}
        out.append(("empty", empty))
        cut = data[: len(data) // 2] if key == "text" else data[: (len(data) // 8) * 4]
        out.append(("truncated", {**empty, key: cut, "truncated": True}))
    return out


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
        where = f"{self.node}: {self.record}: {self.check} {self.subject}"
        return f"{where} {self.before} -> {self.after} ({self.message[:160]})"


def variant_name(base: str, index: int) -> str:
    return f"{base}--r{index}"


def _cut(rec: dict) -> dict:
    if not rec.get("truncated"):
        return rec
    key = "text" if "text" in rec else "base64" if "base64" in rec else None
    if key is None or len(rec[key]) <= 4096:
        return rec
    return {**rec, key: rec[key][:4096] if key == "text" else rec[key][: 4096 - 4096 % 4]}


def write_variants(bases: list[Path], out: Path) -> dict[str, tuple[str, str]]:
    """Write every base snapshot and its variants to `out`; returns variant node -> (base node, what was changed)."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, tuple[str, str]] = {}

    def write(doc: dict, records: list[dict], name: str, what: str) -> None:
        variant = dict(doc, node=name, records=records)
        (out / f"{name}.json").write_text(json.dumps(variant))
        made[name] = (doc["node"], what)

    for path in bases:
        doc = json.loads(path.read_text())
        if doc.get("error"):
            continue  # a node that was not collected has no records to take away
        # a record cut at the read bound is never parsed (Bundle.text refuses it: "larger than the read bound"), so
        # its bytes beyond the first few decide nothing; kept whole, the hostile node's 4 MiB checkpoint would make
        # each of its 270 variants 25 MB (6.7 GB on disk, issue 54 item 12)
        doc["records"] = [_cut(r) for r in doc["records"]]
        (out / path.name).write_text(json.dumps(doc))
        records = doc["records"]
        for i, rec in enumerate(records):
            for mode, changed in mutations(rec):
                kept = [*records[:i], *([changed] if changed is not None else []), *records[i + 1 :]]
                write(doc, kept, f"{variant_name(doc['node'], i)}{mode[0]}", f"{rec['kind']} {rec['name']} {mode}")
        have = {f"{r['kind']} {r['name']}" for r in records}
        for g, group in enumerate(SOURCES):
            if len(have & set(group)) < 2:
                continue
            kept = [r if f"{r['kind']} {r['name']}" not in group else {"kind": r["kind"], "name": r["name"], "status": "denied"}
                    for r in records]  # fmt: skip
            write(doc, kept, f"{doc['node']}--rg{g}", f"{' + '.join(sorted(have & set(group)))} denied")
    return made


KEPT = ("node", "check", "subject", "outcome", "message")  # what violations() and the tests read of a result


def judge_in_parts(bases: list[Path], tmp: Path, profile: Path | None = None, parts: int = 4) -> tuple[
    dict[str, tuple[str, str]], list[subprocess.CompletedProcess], dict
]:  # fmt: skip
    """Write and judge the variants part by part, each base with all of its variants in one part (a fleet check
    judges a node beside its run's peers), keeping of each part's results only what the comparison reads and
    removing each part's files before the next: judged at once, the 4,600 variants' run held 450 MB under /tmp
    (junit.xml 190 MB, results.json 140 MB, issue 60), a part a quarter of it. Returns (variant -> (base, what
    was changed), each part's run, one document of every part's results and node verdicts)."""
    loads: list[list[Path]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for path in sorted(bases, key=lambda p: -p.stat().st_size):  # the largest first, each to the lightest part
        i = sizes.index(min(sizes))
        loads[i].append(path)
        sizes[i] += path.stat().st_size
    made: dict[str, tuple[str, str]] = {}
    runs: list[subprocess.CompletedProcess] = []
    doc: dict = {"results": [], "nodes": []}
    for i, part in enumerate(p for p in loads if p):
        folder = tmp / f"part{i}"
        made.update(write_variants(sorted(part), folder / "variants"))
        run, got = judge(folder / "variants", folder / "out", profile)
        runs.append(run)
        doc["results"] += [{k: r.get(k) for k in KEPT} for r in got["results"]]
        doc["nodes"] += [{"name": n["name"], "verdict": n["verdict"]} for n in got["nodes"]]
        del got
        shutil.rmtree(folder)
    return made, runs, doc


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
        if real_when_empty(record):
            continue
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
