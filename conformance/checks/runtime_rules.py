"""How the container runtime's handlers are judged: each handler GPU pods use must run its pods and put
them in systemd-managed cgroups. Where containerd's release could not be read, its files are judged under
every span of releases (conformance/facts/runtime.py EVERY_RULES): a pass needs all of them to pass."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from conformance.errors import FactUnavailable, ParseError
from conformance.facts.daemon_release import Release, Span, as_span
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
        "containerd's release is not known to be one release, and the releases it may be read these "
        f"files differently: they pass under {'; '.join(passing) or 'none'}, fail under {'; '.join(failing) or 'none'}"
        + (f", and cannot be read under {'; '.join(unread)} ({notes[unread[0]]})" if unread else "")
    )


# KEP-4033: the kubelet takes its cgroup driver from the runtime's CRI RuntimeConfig call (beta 1.31, GA 1.34); a runtime
# that does not answer it leaves the kubelet on its own cgroupDriver setting, counted by kubelet_cri_losing_support.
# The runtimes that answer it (the feature gate's page, KubeletCgroupDriverFromCRI): containerd from v2.0.0 (containerd
# PR 8722), CRI-O from v1.28.0. The fallback's removal (kubernetes/kubernetes PR 136731: the kubelet then does not start)
# is taken as 1.38, the release after 1.37's notes deferred it: a kubelet 1.37 is told what 1.38 will do.
RUNTIME_CONFIG_FROM = {"containerd": (2, 0, 0), "cri-o": (1, 28, 0)}
FALLBACK_REMOVED = (1, 38)


def runtime_config_support(
    kubelet: Span | Release | None, runtime: str, release: Span | Release | None
) -> tuple[str | None, str | None, str]:
    """(problem, what is unknown, evidence) of whether the runtime answers the kubelet's RuntimeConfig call, for a
    kubelet where that matters now or at its next minor release. Where a release is known only as a span (or not
    at all), every release of it is judged: an unknown is said only where the releases disagree, naming the one
    that decides."""
    need = RUNTIME_CONFIG_FROM.get(runtime)
    if need is None:
        return None, None, f"{runtime}: whether it answers RuntimeConfig is not judged (cri-dockerd: from 0.3.16)"
    k, r = as_span(kubelet), as_span(release)
    warn_from = (FALLBACK_REMOVED[0], FALLBACK_REMOVED[1] - 1, 0)
    removed = (*FALLBACK_REMOVED, 0)
    n = ".".join(map(str, need))
    if k.at_least(warn_from) is False:
        return None, None, f"kubelet {k} falls back to its own cgroupDriver where the runtime is older"
    if r.at_least(need) is True:
        return None, None, f"{runtime} {r} answers RuntimeConfig (from {n})"
    if r.at_least(need) is None or k.at_least(warn_from) is None:
        deciding = []
        if r.at_least(need) is None:
            deciding.append(f"whether {runtime} is {n} or later (it is {_known(r)})")
        if k.at_least(warn_from) is None:
            deciding.append(f"whether the kubelet is {warn_from[0]}.{warn_from[1]} or later (it is {_known(k)})")
        return None, (f"whether {runtime} answers the kubelet's RuntimeConfig call depends on releases that are not known: "
                      + " and ".join(deciding)), ""  # fmt: skip
    # the runtime is older than `need` under every release, and the kubelet past the warning release
    kt = str(k)
    if k.at_least(removed) is True:
        return (
            f"{runtime} {r} does not answer the CRI RuntimeConfig call (from {n}) and kubelet {kt} no longer falls back to "
            "its cgroupDriver: the kubelet does not start",
            None,
            "",
        )
    if k.at_least(removed) is None:
        return (
            f"{runtime} {r} does not answer the CRI RuntimeConfig call (from {n}): kubelet {kt} falls back to its "
            f"cgroupDriver at best (kubelet_cri_losing_support), and from {FALLBACK_REMOVED[0]}.{FALLBACK_REMOVED[1]} does "
            f"not start; upgrade {runtime} before the kubelet",
            None,
            "",
        )
    return (
        f"{runtime} {r} does not answer the CRI RuntimeConfig call (from {n}): kubelet {kt} falls back to its cgroupDriver "
        f"(kubelet_cri_losing_support), which kubelet {FALLBACK_REMOVED[0]}.{FALLBACK_REMOVED[1]} removes; upgrade {runtime} "
        "before the kubelet",
        None,
        "",
    )


# CDI in the runtime (tags.cncf.io/container-device-interface README, "How to configure CDI?"): CRI-O reads CDI specs
# from v1.23.0 with no setting; containerd from 1.7, where the CRI plugin's enable_cdi defaults to false
# (pkg/cri/config/config_unix.go), and 2.0 turned it on by default (internal/cri/config/config_unix.go).
CONTAINERD_CDI_FROM = (1, 7)
CONTAINERD_CDI_DEFAULT_ON = (2, 0)


def cdi_enabled(runtime: str, setting: tuple[object, str] | None, release: Span | Release | None) -> tuple[bool | None, str]:
    """(whether the runtime injects CDI devices, why); None: unknown (the releases it may be disagree)."""
    if runtime == "cri-o":
        return True, "CRI-O reads CDI specs with no setting (from 1.23)"
    if runtime != "containerd":
        return False, f"{runtime}: no CRI CDI support judged"
    if setting is not None and not isinstance(setting[0], bool):
        return None, f"{setting[1]} is {setting[0]!r}, not true or false: containerd does not start its CRI plugin"
    span = as_span(release)
    has_cdi = span.at_least((*CONTAINERD_CDI_FROM, 0))
    if has_cdi is False:
        return False, f"containerd {span} has no CDI support (from 1.7)"
    if setting is not None:
        on = bool(setting[0])
        if on and has_cdi is None:
            return None, f"{setting[1]} = true, and containerd is {_known(span)} (CDI needs 1.7 or later): the release decides"
        return on, f"{setting[1]} = {str(on).lower()}"
    default_on = span.at_least((*CONTAINERD_CDI_DEFAULT_ON, 0))
    if default_on is None:
        return None, (f"enable_cdi is not set and containerd is {_known(span)} (its default: false in 1.7, true from "
                      "2.0): the release decides")  # fmt: skip
    return default_on, f"enable_cdi not set: containerd {span}'s default, {str(default_on).lower()}"


def _known(span: Span) -> str:
    return f"known only as {span}" if span.known else "of an unknown release"  # "containerd is of an unknown release"
