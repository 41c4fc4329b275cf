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


# dcgm-exporter's collection interval (NVIDIA/dcgm-exporter, its CLI: --collect-interval / -c in
# milliseconds, else the DCGM_EXPORTER_INTERVAL environment variable, default 30000).
DEFAULT_INTERVAL_MS = 30000


def collect_interval(args: list[str], env: dict[str, str]) -> tuple[int | None, str]:
    """(interval in ms, where it comes from) of a dcgm-exporter container: its command-line flag wins
    over the environment (urfave/cli), which wins over the default."""
    value = None
    for i, a in enumerate(args):
        name, eq, v = a.partition("=")
        if name in ("-c", "--c", "-collect-interval", "--collect-interval"):
            value = (v if eq else (args[i + 1] if i + 1 < len(args) else None), f"argument {name}")
    if value is None and "DCGM_EXPORTER_INTERVAL" in env:
        value = (env["DCGM_EXPORTER_INTERVAL"], "environment DCGM_EXPORTER_INTERVAL")
    if value is None:
        return DEFAULT_INTERVAL_MS, "dcgm-exporter's default (no -c, no DCGM_EXPORTER_INTERVAL)"
    text, source = value
    if text is None or not str(text).strip().isdigit():
        return None, f"{source} is {text!r}, not a number of milliseconds"
    return int(str(text).strip()), source
