"""Releases that programs report about themselves: the kubelet's `--version` (`Kubernetes v1.31.0`), k3s's
(`k3s version v1.31.2+k3s1 (6da20424)`, the kubelet it runs), and the kernel's (`uname -r`,
`6.8.0-45-generic`), compared as (major, minor, patch)."""

from __future__ import annotations

import re

from conformance.errors import ParseError

Release = tuple[int, int, int]


def parse_release(text: str, what: str) -> Release:
    m = re.search(r"(?:^|[\s/v])(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ParseError(f"{what}: no release in {text.strip()[:120]!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def at_least(have: Release, want: str) -> bool:
    """Whether `have` is `want` (e.g. "1.27", "3.16") or later, as version.AtLeast compares them."""
    parts = [int(x) for x in want.split(".")]
    return have >= tuple(parts + [0] * (3 - len(parts)))
