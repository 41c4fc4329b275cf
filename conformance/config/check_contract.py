"""The check contract's vocabulary: what every check declares (CheckSpec), its severities (the blocking
ones reject a node) and the outcomes a result may have. Built-in checks and an operator's site rules are
declared in these terms; checks/ keeps the registry of them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

SEVERITIES = ("critical", "high", "medium", "low")
SEVERITY_RANK = {sev: i for i, sev in enumerate(SEVERITIES)}  # most severe first
BLOCKING = ("critical", "high")
OUTCOMES = ("passed", "failed", "error", "skipped", "waived")
SITE_PREFIX = "SITE-"  # every site check's id starts with it; no built-in id does


@dataclass(frozen=True)
class CheckSpec:
    id: str
    severity: str
    title: str
    rationale: str
    remediation: str
    source: str
    family: str
    origin: str = "built-in"  # or the site check's file (a YAML rule file, a Python file)

    def to_json(self) -> dict[str, str]:
        return asdict(self)
