"""Gathering: one remote execution per node, run concurrently across nodes with a bound."""

from __future__ import annotations

import base64
import functools
import random
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING

from conformance.collection.bundle import Bundle, parse_wire
from conformance.collection.cancel import INTERRUPTED, Cancel
from conformance.collection.probes import payload
from conformance.collection.redact import redact_bundle
from conformance.collection.transports.base import ExecResult
from conformance.collection.transports.local import LocalTransport
from conformance.collection.transports.openssh import OpenSshTransport
from conformance.collection.transports.target import SshTarget
from conformance.config.inventory import NodeSpec
from conformance.errors import ParseError, TransportError

if TYPE_CHECKING:
    from conformance.collection.transports.ssh import SshTransport

MAX_BYTES = 4 * 1024 * 1024


@functools.cache
def collector_script(site: str = "") -> bytes:
    """The collector, carrying the NVML probe (with its bindings) packed in a shell variable, and what
    the site rules read (`site`: "KIND PATH" lines, sent base64-encoded: no quote of a path reaches the shell)."""
    script = resources.files("conformance.collection").joinpath("collector.sh").read_bytes()
    script = script.replace(b"@NVML_PROBE@", payload.packed("nvml_facts").encode()).replace(b"@UNPACK@", payload.UNPACK.encode())
    return script.replace(b"@SITE@", base64.b64encode(site.encode("utf-8")) if site else b"")


def transport_for(node: NodeSpec) -> LocalTransport | SshTransport | OpenSshTransport:
    if node.transport == "local":
        return LocalTransport(node.host_root)
    s = node.ssh
    if node.transport == "openssh":
        kind: type[OpenSshTransport | SshTransport] = OpenSshTransport
    else:
        from conformance.collection.transports.ssh import SshTransport  # paramiko: only when a node is reached by it

        kind = SshTransport
    return kind(
        SshTarget(
            host=node.address or node.name,
            port=int(s.get("port", 22)),
            user=s.get("user", "root"),
            identity_file=s.get("identity_file"),
            known_hosts=s.get("known_hosts"),
            proxy_jump=s.get("proxy_jump"),
            ssh_config=s.get("ssh_config"),
            insecure_accept_unknown_host_keys=bool(s.get("insecure_accept_unknown_host_keys", False)),
            connect_timeout=float(s.get("connect_timeout", 10)),
        )
    )


RETRYABLE = ("unreachable",)  # refused, reset, no banner: worth another try; auth and host keys are not


def collect_node(
    node: NodeSpec,
    timeout: float = 120.0,
    max_bytes: int = MAX_BYTES,
    retries: int = 2,
    backoff: float = 0.5,
    site: str = "",
    cancel: Cancel | None = None,
) -> Bundle:
    """Run the collector on one node, retrying transient connection failures with exponential
    backoff (0.5 s, 1 s, ...). Never raises: failures become a bundle with `error` set. `cancel`
    cuts the collection under way, and any retry, at once (error kind "interrupted")."""
    started = time.monotonic()
    cancel = cancel or Cancel()
    earlier: list[str] = []
    executions = 0
    for attempt in range(retries + 1):
        bundle = _attempt(node, timeout, max_bytes, site, cancel)
        executions += bundle.executions
        if bundle.error is None or bundle.error_kind not in RETRYABLE or attempt == retries:
            break
        earlier.append(f"attempt {attempt + 1} failed: {bundle.error}")
        if cancel.wait(backoff * (2**attempt) * (0.8 + 0.4 * random.random())):
            bundle = _interrupted(node, "before its next attempt", bundle.collected_at)
            break
    bundle.executions = executions
    bundle.duration_s = round(time.monotonic() - started, 3)
    if earlier and bundle.error is None:
        bundle.notes = [*earlier, *bundle.notes]
    elif earlier:
        bundle.error = f"{bundle.error} (after {len(earlier) + 1} attempts)"
    return bundle


def _interrupted(node: NodeSpec, when: str, collected_at: str | None) -> Bundle:
    error = f"collection stopped {when}: the run was interrupted"
    return Bundle(node=node.name, error=error, error_kind=INTERRUPTED, collected_at=collected_at)


def _attempt(node: NodeSpec, timeout: float, max_bytes: int, site: str, cancel: Cancel) -> Bundle:
    started = time.monotonic()
    when = datetime.now(UTC).isoformat(timespec="seconds")
    if cancel.is_set():
        return _interrupted(node, "before it began", when)
    try:
        transport = transport_for(node)
    except TransportError as e:
        return Bundle(node=node.name, error=str(e), error_kind=e.kind, collected_at=when)
    notes: list[str] = []
    executions = 0
    try:
        with cancel.watching(transport.abort):  # Ctrl-C cuts the connection or program under way
            if not isinstance(transport, LocalTransport | OpenSshTransport):  # paramiko's: connects before running
                transport.set_deadline(timeout)  # --timeout: connection, authentication and the collector together
                transport.open()
            executions = 1
            result = transport.run(["sh", "-s", "--", node.host_root, str(max_bytes)], collector_script(site), timeout)
            accepted = getattr(transport, "accepted_unknown_keys", [])
            notes = [f"accepted unknown host key (insecure opt-in): {k}" for k in accepted]
            try:
                bundle = parse_wire(node.name, result.stdout, max_bytes)
            except ParseError:
                if result.exit_status != 0:  # the collector stopped itself (missing tools): its own words decide
                    raise _collector_failed(result, transport.description) from None
                raise
            if result.exit_status != 0 and not bundle.complete:
                raise _collector_failed(result, transport.description)
    except TransportError as e:
        return Bundle(
            node=node.name,
            error=str(e),
            error_kind=_kind(e.kind, cancel),
            collected_at=when,
            duration_s=round(time.monotonic() - started, 3),
            executions=executions if e.executed else 0,
        )
    except ParseError as e:
        return Bundle(
            node=node.name,
            error=f"collector output unreadable: {e}",
            error_kind=_kind("error", cancel),
            collected_at=when,
            duration_s=round(time.monotonic() - started, 3),
            executions=executions,
        )
    finally:
        transport.close()
    redacted = redact_bundle(bundle)
    if redacted:
        notes.append(f"{redacted} credential value(s) redacted from collected files")
    bundle.collected_at = when
    bundle.duration_s = round(time.monotonic() - started, 3)
    bundle.executions = 1
    bundle.notes = notes
    return bundle


def _kind(kind: str, cancel: Cancel) -> str:
    """A failure once the run was interrupted is the interrupt's doing, or may be (the cut broke the
    connection mid-output): the node is incomplete, neither judged unreachable nor judged at all."""
    return INTERRUPTED if cancel.is_set() else kind


def _collector_failed(result: ExecResult, where: str) -> TransportError:
    err = result.stderr.decode("utf-8", "replace").strip()[:500]
    return TransportError(f"collector exited {result.exit_status} on {where}: {err}", kind="error")


def collect_all(
    nodes: Iterable[NodeSpec],
    parallel: int = 16,
    timeout: float = 120.0,
    progress: Callable[[int, int, Bundle], None] | None = None,
    retries: int = 2,
    site: str = "",
) -> dict[str, Bundle]:
    """Collect every node with at most `parallel` at once. Returns bundles by node name. `site`: what the
    site rules read, in the same single execution (conformance.config.site_rules.needs_section)."""
    nodes = list(nodes)
    out: dict[str, Bundle] = {}
    cancel = Cancel()
    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(nodes) or 1)), thread_name_prefix="collect")
    try:
        futures = {pool.submit(collect_node, n, timeout, MAX_BYTES, retries, 0.5, site, cancel): n for n in nodes}
        for done, fut in enumerate(as_completed(futures), 1):
            bundle = fut.result()
            out[bundle.node] = bundle
            if progress:
                progress(done, len(nodes), bundle)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # interrupted: start nothing new,
        cancel.cancel()  # and cut what is under way, so that the process ends now
        raise
    pool.shutdown(wait=True)
    return {n.name: out[n.name] for n in nodes}


# A CI log (stderr not a terminal) gets a plain progress line at most this often, so a long gather shows it is
# moving without a line per node; a run shorter than this prints none.
CI_PROGRESS_EVERY_S = 15.0


def stderr_progress(
    verbose: bool, write: Callable[[str], None] | None = None, tty: bool | None = None
) -> Callable[[int, int, Bundle], None]:
    """Progress on stderr: on a terminal one line rewritten in place; in a CI log (not a terminal) a plain line
    every CI_PROGRESS_EVERY_S, and with -v a plain line per node. `tty`: whether stderr is a terminal, when asked
    while pytest captures it (it is not one then)."""
    is_tty = sys.stderr.isatty() if tty is None else tty
    out = write or _write_stderr
    last = [time.monotonic()]
    failed = [0]

    def show(done: int, total: int, bundle: Bundle) -> None:
        state = f"error: {bundle.error}" if bundle.error else f"ok in {bundle.duration_s:.2f} s"
        failed[0] += bundle.error is not None
        if is_tty:
            end = "\n" if verbose or done == total else ""
            out(f"\rcollecting {done}/{total} nodes  {bundle.node}: {state[:100]}\033[K{end}")
        elif verbose:
            out(f"collecting {done}/{total} nodes  {bundle.node}: {state[:100]}\n")
        elif time.monotonic() - last[0] >= CI_PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            out(f"collecting {done}/{total} nodes ({failed[0]} not collected so far)\n")

    return show


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()
