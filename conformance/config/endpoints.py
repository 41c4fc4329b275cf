"""The inventory's `endpoints:` entries: the inference endpoints whose latency a node's checks measure,
with their request, headers (literal, or read at run time from an environment variable or a file: secrets
never reach a report) and TLS settings. Read and validated here; measurements/latency.py sends them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conformance.config.urls import redact_url
from conformance.config.validation import each_mapping, unknown_fields

ENDPOINT_KEYS = {
    "name",
    "url",
    "method",
    "body",
    "headers",
    "requests",
    "concurrency",
    "warmup",
    "time_budget_s",
    "request_timeout_s",
    "tls",
}
TLS_KEYS = {"verify", "ca_file", "client_cert", "client_key"}
METHODS = {"GET", "POST", "PUT", "HEAD"}
SECRET_HEADER_WORDS = ("authorization", "token", "key", "secret", "password", "cookie", "auth")


@dataclass
class HeaderValue:
    """A header value: literal, or read at run time from an environment variable or a file."""

    literal: str | None = None
    env: str | None = None
    file: str | None = None

    def resolve(self) -> str:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise LookupError(f"environment variable {self.env} is not set")
            return value
        if self.file is not None:
            return Path(self.file).expanduser().read_text(encoding="utf-8").strip()
        return self.literal or ""

    def shown(self, name: str) -> str:
        """How the value appears in reports: secrets never, their origin only."""
        if self.env is not None:
            return f"<from env {self.env}>"
        if self.file is not None:
            return f"<from file {self.file}>"
        if any(w in name.lower() for w in SECRET_HEADER_WORDS):
            return "<redacted>"
        return self.literal or ""


@dataclass
class Endpoint:
    name: str
    url: str
    method: str = "GET"
    body: str | None = None
    headers: dict[str, HeaderValue] = field(default_factory=dict)
    requests: int = 200
    concurrency: int = 1
    warmup: int = 5
    time_budget_s: float = 120.0
    request_timeout_s: float = 30.0
    verify: bool = True
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    def describe(self) -> str:
        heads = ", ".join(f"{k}: {v.shown(k)}" for k, v in self.headers.items())
        return (
            f"{self.method} {redact_url(self.url)}; {self.requests} requests, concurrency {self.concurrency}, "
            f"{self.warmup} warm-up, budget {self.time_budget_s:g} s" + (f"; headers {heads}" if heads else "")
        )


def _number(v: Any, key: str, where: str, errors: list[str], *, integer: bool, minimum: float) -> Any:
    ok = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok or v < minimum:
        errors.append(f"{where}.{key}: must be {'an integer' if integer else 'a number'} >= {minimum:g}, got {v!r}")
        return None
    return v


def _is_indirect(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) == 1
        and set(value) <= {"env", "file"}
        and isinstance(next(iter(value.values())), str)
    )


def _request_fields(ep: Endpoint, e: dict[str, Any], w: str, errors: list[str]) -> None:
    """The request body, headers, sizes and TLS settings of one endpoint entry, set on `ep`."""
    body = e.get("body")
    if body is not None and not isinstance(body, str | dict | list):
        errors.append(f"{w}.body: must be a string or a JSON-like mapping")
    elif isinstance(body, dict | list):
        ep.body = json.dumps(body)
        ep.headers.setdefault("Content-Type", HeaderValue(literal="application/json"))
    else:
        ep.body = body
    headers = e.get("headers", {})
    if not isinstance(headers, dict):
        errors.append(f"{w}.headers: must be a mapping of header names to values")
        headers = {}
    for hk, hv in headers.items():
        if isinstance(hv, str):
            ep.headers[str(hk)] = HeaderValue(literal=hv)
        elif isinstance(hv, dict) and len(hv) == 1 and set(hv) <= {"env", "file"} and isinstance(next(iter(hv.values())), str):
            ep.headers[str(hk)] = HeaderValue(env=hv.get("env"), file=hv.get("file"))
        else:
            errors.append(f"{w}.headers.{hk}: must be a string, {{env: VAR}} or {{file: PATH}}")
    for key, integer, minimum in (
        ("requests", True, 1),
        ("concurrency", True, 1),
        ("warmup", True, 0),
        ("time_budget_s", False, 0.1),
        ("request_timeout_s", False, 0.01),
    ):
        if key in e:
            v = _number(e[key], key, w, errors, integer=integer, minimum=minimum)
            if v is not None:
                setattr(ep, key, v)
    tls = e.get("tls", {})
    if not isinstance(tls, dict):
        errors.append(f"{w}.tls: must be a mapping")
        tls = {}
    unknown_fields(tls, TLS_KEYS, f"{w}.tls", errors)
    for k, v in tls.items():
        if k not in TLS_KEYS:
            continue
        if k == "verify" and not isinstance(v, bool):
            errors.append(f"{w}.tls.verify: must be true or false")
        elif k != "verify" and not isinstance(v, str):
            errors.append(f"{w}.tls.{k}: must be a file path")
        else:
            setattr(ep, k, v)


def parse_endpoints(raw: Any, where: str, errors: list[str]) -> list[Endpoint]:
    """Validate a node's `endpoints:` list; problems are appended to `errors` as `where[i].field: ...`."""
    out: list[Endpoint] = []
    names: set[str] = set()
    for i, w, e in each_mapping(raw, where, ENDPOINT_KEYS, errors, "endpoints", "a mapping with name and url"):
        name, url = e.get("name"), e.get("url")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "._-" for c in name):
            errors.append(f"{w}.name: {name!r} is not a valid endpoint name (letters, digits, '.', '-', '_')")
            name = f"#{i}"
        elif name in names:
            errors.append(f"{w}.name: duplicate endpoint name {name!r}")
        names.add(name)
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            errors.append(f"{w}.url: {url!r} is not an http:// or https:// URL")
            url = "http://invalid"
        ep = Endpoint(name=name, url=url)
        method = str(e.get("method", "GET")).upper()
        if method not in METHODS:
            errors.append(f"{w}.method: {e.get('method')!r} is not one of {', '.join(sorted(METHODS))}")
        ep.method = method
        _request_fields(ep, e, w, errors)
        out.append(ep)
    return out
