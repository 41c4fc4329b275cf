"""Workload latency: send a bounded number of requests to an inference endpoint and summarise.

Percentiles use linear interpolation between the closest ranks (Hyndman & Fan type 7, the default
of numpy.percentile and statistics.quantiles(method="inclusive")). The jitter coefficient is the
sample standard deviation over the mean of the successful requests' latencies.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3

from conformance.config.endpoints import Endpoint
from conformance.config.urls import redact_text

MIN_SAMPLES_P999 = 1000


# -- statistics --------------------------------------------------------------------------------
def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (type 7). `sorted_values` must be sorted."""
    if not sorted_values:
        raise ValueError("no values")
    if len(sorted_values) == 1:
        return sorted_values[0]
    h = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


@dataclass
class LatencyResult:
    endpoint: str
    latencies_ms: list[float]  # successful requests only, in completion order
    statuses: dict[str, int]  # "200": 180, "503": 2, "timeout": 1, ...
    sent: int
    planned: int
    budget_exhausted: bool
    wall_s: float
    errors_sample: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return self.sent - len(self.latencies_ms)

    @property
    def error_rate(self) -> float:
        return self.errors / self.sent if self.sent else 0.0

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        out: dict[str, Any] = {
            "samples": len(lat),
            "sent": self.sent,
            "planned": self.planned,
            "errors": self.errors,
            "error_rate": round(self.error_rate, 6),
            "statuses": dict(self.statuses),
            "wall_s": round(self.wall_s, 3),
            "budget_exhausted": self.budget_exhausted,
            "percentile_method": "linear interpolation between closest ranks (numpy default, type 7)",
        }
        if lat:
            mean = statistics.fmean(lat)
            sd = statistics.stdev(lat) if len(lat) > 1 else 0.0
            out.update(
                {
                    "mean_ms": round(mean, 3),
                    "stdev_ms": round(sd, 3),
                    "min_ms": round(lat[0], 3),
                    "max_ms": round(lat[-1], 3),
                    "p50_ms": round(percentile(lat, 50), 3),
                    "p99_ms": round(percentile(lat, 99), 3),
                    "jitter_coefficient": round(sd / mean, 4) if mean > 0 else 0.0,
                }
            )
            if len(lat) >= MIN_SAMPLES_P999:
                out["p99_9_ms"] = round(percentile(lat, 99.9), 3)
            else:
                out["p99_9_ms"] = None
                out["p99_9_note"] = f"P99.9 needs at least {MIN_SAMPLES_P999} samples; {len(lat)} were taken"
        return out


def _pool(ep: Endpoint) -> urllib3.PoolManager:
    kw: dict[str, Any] = {"retries": False, "maxsize": max(1, ep.concurrency), "block": True}
    if ep.url.startswith("https"):
        kw["cert_reqs"] = "CERT_REQUIRED" if ep.verify else "CERT_NONE"
        if ep.ca_file:
            kw["ca_certs"] = os.path.expanduser(ep.ca_file)
        if ep.client_cert:
            kw["cert_file"] = os.path.expanduser(ep.client_cert)
        if ep.client_key:
            kw["key_file"] = os.path.expanduser(ep.client_key)
    return urllib3.PoolManager(**kw)


class _Sender:
    """The requests of one measurement: shared counters, latencies and statuses, and the deadline."""

    def __init__(self, ep: Endpoint, deadline: float) -> None:
        self.ep = ep
        self.headers = {k: v.resolve() for k, v in ep.headers.items()}
        self.body = ep.body.encode("utf-8") if ep.body is not None else None
        self.deadline = deadline
        self.pool = _pool(ep)
        self.lock = threading.Lock()
        self.next = self.sent = 0
        self.latencies: list[float] = []
        self.statuses: dict[str, int] = {}
        self.errors_sample: list[str] = []
        self.exhausted = threading.Event()

    def one(self, record: bool) -> None:
        ep = self.ep
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.exhausted.set()
            return
        timeout = urllib3.Timeout(total=min(ep.request_timeout_s, remaining))
        t0 = time.perf_counter()
        try:
            r = self.pool.request(
                ep.method, ep.url, body=self.body, headers=self.headers, timeout=timeout, preload_content=True, redirect=False
            )
            elapsed = (time.perf_counter() - t0) * 1000.0
            key, ok = str(r.status), 200 <= r.status < 300
        except urllib3.exceptions.TimeoutError:
            elapsed, key, ok = 0.0, "timeout", False
            if time.monotonic() >= self.deadline:
                self.exhausted.set()
                if remaining < ep.request_timeout_s:  # cut by the run's budget, not by its own timeout: no answer at all
                    return
        except urllib3.exceptions.HTTPError as e:
            elapsed, key, ok = 0.0, type(e).__name__, False
            with self.lock:
                if len(self.errors_sample) < 5:
                    self.errors_sample.append(redact_text(str(e))[:300])
        if not record:
            return
        with self.lock:
            self.sent += 1
            self.statuses[key] = self.statuses.get(key, 0) + 1
            if ok:
                self.latencies.append(elapsed)

    def worker(self, progress: Callable[[int, int], None] | None) -> None:
        while not self.exhausted.is_set():
            with self.lock:
                if self.next >= self.ep.requests:
                    return
                self.next += 1
            self.one(record=True)
            if progress:
                progress(self.sent, self.ep.requests)


def measure(ep: Endpoint, progress: Callable[[int, int], None] | None = None) -> LatencyResult:
    """Send warm-up then `ep.requests` requests with `ep.concurrency` workers, within the time budget.

    Raises LookupError/OSError when a header secret cannot be read."""
    if not ep.verify:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    start = time.monotonic()
    s = _Sender(ep, start + ep.time_budget_s)
    for _ in range(ep.warmup):
        s.one(record=False)
    threads = [threading.Thread(target=s.worker, args=(progress,), daemon=True) for _ in range(min(ep.concurrency, ep.requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, s.deadline - time.monotonic()) + ep.request_timeout_s + 1)
    s.pool.clear()
    return LatencyResult(
        endpoint=ep.name,
        latencies_ms=list(s.latencies),
        statuses=dict(s.statuses),
        sent=s.sent,
        planned=ep.requests,
        budget_exhausted=s.exhausted.is_set() or s.sent < ep.requests,
        wall_s=time.monotonic() - start,
        errors_sample=s.errors_sample,
    )
