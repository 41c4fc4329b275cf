"""Shared wording for configuration errors, so every file reports problems the same way."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import UsageError


def read_yaml(path: Path, what: str) -> Any:
    """A YAML file's document; a file that cannot be read or parsed is a usage error naming it."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"{path}: cannot read the {what}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the {what} is not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None


def unknown_fields(mapping: Mapping[Any, Any], allowed: Iterable[str], where: str, errors: list[str]) -> None:
    """Append `WHERE.KEY: unknown field (allowed: ...)` for every key not in `allowed`."""
    allowed = set(allowed)
    for k in mapping:
        if k not in allowed:
            errors.append(f"{where}.{k}: unknown field (allowed: {', '.join(sorted(allowed))})")


def each_mapping(
    raw: Any, where: str, allowed: Iterable[str], errors: list[str], listing: str, item: str = "a mapping"
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """The mappings of a configuration list, each with its index and place (`WHERE[i]`); a value that is not a
    list ("WHERE: must be a list of LISTING"), an item that is not a mapping and unknown fields are errors."""
    if not isinstance(raw, list):
        errors.append(f"{where}: must be a list of {listing}")
        return
    for i, value in enumerate(raw):
        w = f"{where}[{i}]"
        if not isinstance(value, dict):
            errors.append(f"{w}: must be {item}")
            continue
        unknown_fields(value, allowed, w, errors)
        yield i, w, value


def type_name(t: Any) -> str:
    if isinstance(t, tuple):
        return "number"
    return {str: "string", int: "integer", bool: "boolean"}.get(t, t.__name__)


def typed_fields(mapping: Mapping[Any, Any], types: Mapping[str, Any], where: str, errors: list[str]) -> dict[str, Any]:
    """Unknown keys and values of the wrong type, reported as `WHERE.KEY: ...`; returns the valid entries."""
    unknown_fields(mapping, types, where, errors)
    valid = {}
    for k, v in mapping.items():
        if k not in types:
            continue
        t = types[k]
        if (isinstance(v, bool) and t is not bool) or not isinstance(v, t):
            errors.append(f"{where}.{k}: must be a {type_name(t)}, got {v!r}")
        else:
            valid[k] = v
    return valid
