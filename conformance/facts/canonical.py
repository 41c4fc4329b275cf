"""Digests of parsed configuration: SHA-256 over the canonical JSON of the parsed value (keys sorted, no
whitespace), so a file's formatting, comments and key order do not change them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any


def digest(value: Any) -> str:
    """sha256: of the canonical JSON of a parsed value (the first 16 hex digits: enough to tell apart)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    if isinstance(v, set | frozenset):
        return sorted(v)
    return str(v)
