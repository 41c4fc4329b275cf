"""The check reference of the documentation site (docs/checks.md), made from the checks themselves: id, severity,
family, what each asserts, why, how to fix it and where its facts come from. `conformance checks --markdown`
prints it; a test keeps the committed page equal to it."""

from __future__ import annotations

from collections.abc import Iterable

from conformance.config.check_contract import BLOCKING, CheckSpec


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def check_reference(specs: Iterable[CheckSpec]) -> str:
    specs = sorted(specs, key=lambda s: (s.origin != "built-in", s.family, s.id))
    lines = [
        "# Check reference",
        "",
        "<!-- Made by `conformance checks --markdown` from the checks themselves; tests/test_docs.py keeps it so. -->",
        "",
        "Every built-in check: its severity (critical and high block acceptance), its family (the suite module and "
        "the `--select` name), what it asserts, why it matters, how to fix a failure, and where its facts come from.",
        "",
        "| check | severity | family | asserts |",
        "|---|---|---|---|",
    ]
    lines += [f"| [`{s.id}`](#{s.id.lower()}) | {s.severity} | {s.family} | {_cell(s.title)} |" for s in specs]
    for s in specs:
        blocks = "blocks acceptance" if s.severity in BLOCKING else "does not block acceptance"
        lines += [
            "",
            f"## {s.id}",
            "",
            f"**{s.severity}** ({blocks}), family `{s.family}`{'' if s.origin == 'built-in' else f', from {s.origin}'}.",
            f"{_one_line(s.title)}.",
            "",
            f"**Why:** {_one_line(s.rationale)}",
            "",
            f"**Remediation:** {_one_line(s.remediation)}",
            "",
            f"**Source:** {_one_line(s.source)}",
        ]
    return "\n".join(lines) + "\n"
