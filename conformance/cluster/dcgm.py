"""Reading a dcgm-exporter's metrics (Prometheus text format) and listing the metric names it serves."""

from __future__ import annotations

import re

import urllib3

from conformance.errors import FactUnavailable

MAX_BYTES = 8 * 1024 * 1024
_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{|\s)")


def metric_series(text: str) -> dict[str, int]:
    """{metric name: number of series} of a Prometheus text exposition (comments skipped)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out


def fetch(url: str, timeout: float = 5.0) -> str:
    """GET the exporter's metrics. Errors name the URL and the cause."""
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout))
    try:
        r = http.request("GET", url, preload_content=False)
        body = r.read(MAX_BYTES + 1)
        r.release_conn()
    except urllib3.exceptions.HTTPError as e:
        raise FactUnavailable(f"dcgm-exporter at {url}: {type(e).__name__}: {e}") from None
    if r.status != 200:
        raise FactUnavailable(f"dcgm-exporter at {url}: HTTP {r.status}")
    if len(body) > MAX_BYTES:
        raise FactUnavailable(f"dcgm-exporter at {url}: answer larger than {MAX_BYTES} bytes")
    return body.decode("utf-8", "replace")
