"""Shared wording for configuration errors, so every file reports problems the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def unknown_fields(mapping: Mapping[Any, Any], allowed: Iterable[str], where: str, errors: list[str]) -> None:
    """Append `WHERE.KEY: unknown field (allowed: ...)` for every key not in `allowed`."""
    allowed = set(allowed)
    for k in mapping:
        if k not in allowed:
            errors.append(f"{where}.{k}: unknown field (allowed: {', '.join(sorted(allowed))})")
