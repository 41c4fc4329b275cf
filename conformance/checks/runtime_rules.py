"""How the container runtime's handlers are judged: each handler GPU pods use must run its pods and put
them in systemd-managed cgroups. Where containerd's release could not be read, its files are judged under
every span of releases (conformance/facts/runtime.py EVERY_RULES): a pass needs all of them to pass."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from conformance.errors import FactUnavailable, ParseError
from conformance.facts.runtime import RuntimeConfig, RuntimeRefused

Judge = Callable[[RuntimeConfig], list[str]]


def judged_handlers(rc: RuntimeConfig, gpu_handlers: Iterable[str]) -> list[str]:
    """The default handler and every GPU handler the configuration defines, each once."""
    return list(dict.fromkeys([rc.default_handler, *(h for h in gpu_handlers if h in rc.handlers)]))


def handler_problem(rc: RuntimeConfig, name: str) -> str | None:
    if rc.refused:
        return f"{rc.runtime} refuses its configuration, so no pod starts: {rc.refused}"
    h = rc.handlers.get(name)
    if h is None:
        defined = ", ".join(sorted(rc.handlers)) or "none"
        return f"handler {name!r} is not defined in the node's {rc.runtime} configuration (defined: {defined})"
    if h.broken:
        return h.broken
    if h.systemd_cgroup is False:
        return f"handler {name!r} does not use the systemd cgroup driver ({h.source})"
    return None


def handler_problems(rc: RuntimeConfig, gpu_handlers: Iterable[str]) -> list[str]:
    return [p for name in judged_handlers(rc, gpu_handlers) if (p := handler_problem(rc, name))]


def across_releases(rc: RuntimeConfig, judge: Judge) -> tuple[list[str], list[str]]:
    """(problems, evidence). With the release known, `judge(rc)`. Otherwise every span of releases is
    judged: all pass, a pass; all fail (a refusal is a failure), a failure; anything else is an error
    naming what each span makes of the files (the verdict depends on the release, which was not read)."""
    if not rc.alternatives:
        return judge(rc), []
    results: dict[str, list[str] | None] = {}  # None: that span cannot read the files (unknown)
    notes: dict[str, str] = {}
    for label, alt in rc.alternatives.items():
        if isinstance(alt, RuntimeRefused):
            results[label] = [f"containerd would not start: {alt}"]
        elif isinstance(alt, ParseError):
            results[label], notes[label] = None, str(alt)
        else:
            results[label] = judge(alt)
    evidence = [f"under {label}: {notes[label] if p is None else ('; '.join(p) or 'passes')}" for label, p in results.items()]
    passing = [label for label, p in results.items() if p == []]
    failing = [label for label, p in results.items() if p]
    if len(passing) == len(results):
        return [], evidence
    if len(failing) == len(results):
        first = next(p for p in results.values() if p)
        return [f"under every containerd release: {first[0]}", *first[1:]], evidence
    unread = [label for label, p in results.items() if p is None]
    raise FactUnavailable(
        "containerd's release is not known (no package of the node owns the running containerd's executable, or it "
        "was replaced since it started), and its releases read these "
        f"files differently: they pass under {'; '.join(passing) or 'none'}, fail under {'; '.join(failing) or 'none'}"
        + (f", and cannot be read under {'; '.join(unread)} ({notes[unread[0]]})" if unread else "")
    )
