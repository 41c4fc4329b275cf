"""Declarative site checks: an operator's own rules in YAML, beside the built-in checks.

A rule file holds `checks:`, a list of rules. Each rule has an id with the `SITE-` prefix (built-in
ids never have it), a severity, title, rationale, remediation, optionally a source, and exactly one
matcher over facts the collector can read without running a command:

  file:    {path, exists, mode, mode_max, owner, group, equals, contains, not_contains, regex,
            format: yaml|json|toml, key: dotted.path, value | in | min | max}
  sysctl:  {name: vm.nr_hugepages, equals | in | min | max}
  cmdline: {has: iommu=pt | lacks: ... | regex: ...}
  module:  {name: nvidia_peermem, loaded: true}
  systemd: {unit: nvidia-persistenced.service, running: true, enabled: true, masked: false}
  package: {name: nvidia-driver-550, version: ">=550.90.07" | installed: false}   (dpkg and rpm databases)

Everything a rule names is untrusted input: paths travel to the node base64-encoded, unit and module
names must be plain names, and every value reaches the report escaped. A malformed file is a usage
error naming the file, the rule and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.config.check_contract import SEVERITIES, CheckSpec
from conformance.config.validation import read_yaml
from conformance.errors import UsageError

ID = re.compile(r"SITE-[A-Z0-9][A-Z0-9-]{0,62}")
UNIT = re.compile(r"[A-Za-z0-9:_.@-]{1,200}\.(service|socket|timer|mount|target|path)")
NAME = re.compile(r"[A-Za-z0-9_.+:-]{1,200}")
SYSCTL = re.compile(r"[a-z0-9_]+(\.[A-Za-z0-9_-]+)+")
COMPARATORS = ("value", "equals", "in", "min", "max")
MATCHERS: dict[str, tuple[str, ...]] = {
    "file": ("path", "exists", "mode", "mode_max", "owner", "group", "contains", "not_contains", "regex", "format", "key",
             *COMPARATORS),
    "sysctl": ("name", "equals", "in", "min", "max"),
    "cmdline": ("has", "lacks", "regex"),
    "module": ("name", "loaded"),
    "systemd": ("unit", "running", "enabled", "masked"),
    "package": ("name", "version", "installed"),
}  # fmt: skip
REQUIRED = {"file": "path", "sysctl": "name", "module": "name", "systemd": "unit", "package": "name"}
TEXT_FIELDS = ("title", "rationale", "remediation")
DPKG_STATUS = "/var/lib/dpkg/status"
PASSWD, GROUP = "/etc/passwd", "/etc/group"  # passwd(5), group(5): name:password:ID:...
# RPM's database folders, in the order rpm's %_dbpath has them across distributions: /var/lib/rpm (RHEL 8/9,
# Rocky, Amazon Linux 2 and 2023), /usr/lib/sysimage/rpm (SUSE, Fedora 36+, where /var/lib/rpm links to it),
# /usr/share/rpm (rpm-ostree: RHCOS under OpenShift, Fedora CoreOS; /var/lib/rpm and /usr/lib/sysimage/rpm link to it).
RPM_DBPATHS = ("/var/lib/rpm", "/usr/lib/sysimage/rpm", "/usr/share/rpm")
# Where `systemctl enable` (and `enable --runtime`) links a unit into its [Install] targets: the .wants/ and
# .requires/ folders of /etc/systemd/system and /run/systemd/system. `systemctl is-enabled` counts those
# only (the real systemctl decides this in tests/test_site_checks.py); a vendor's link under /usr/lib or /lib
# starts the unit with its target too, but is-enabled says "disabled", so it is shown, not counted.
SYSTEMD_WANTS = tuple(f"{d}/*.{k}/" for d in ("/etc/systemd/system", "/run/systemd/system") for k in ("wants", "requires"))
SYSTEMD_VENDOR_WANTS = tuple(f"{d}/*.{k}/" for d in ("/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
                                                    "/lib/systemd/system") for k in ("wants", "requires"))  # fmt: skip
# The system manager's unit search path, first match wins (systemd.unit(5) "Unit File Load Path";
# src/basic/path-lookup.c lookup_paths_init: control, transient, generator.early, /etc, attached, /run,
# generator, /usr/local/lib, /usr/lib, /lib on split-usr systems, generator.late). `systemctl mask
# --runtime` links /run/systemd/system/UNIT to /dev/null.
UNIT_PATH = (
    "/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient", "/run/systemd/generator.early",
    "/etc/systemd/system", "/etc/systemd/system.attached", "/run/systemd/system", "/run/systemd/system.attached",
    "/run/systemd/generator", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
    "/run/systemd/generator.late",
)  # fmt: skip
# Where a service's processes are: its cgroup under system.slice (cgroup v2, then v1's name=systemd
# hierarchy). v2's cgroup.events says "populated 1" while any process is in the cgroup or below it, which
# also covers Delegate= units that keep their processes in child cgroups (cgroup-v2.rst "populated").
UNIT_CGROUPS = ("/sys/fs/cgroup/{}/cgroup.events", "/sys/fs/cgroup/systemd/{}/cgroup.procs")
# cgroup v1 has no "populated": a Delegate= unit's processes may sit in child cgroups of its own, so those
# are read too, three levels down (systemd.resource-control(5) Delegate=; cgroup-v1/cgroups.rst cgroup.procs)
UNIT_V1_CHILDREN = tuple("/sys/fs/cgroup/systemd/{}" + "/*" * depth + "/cgroup.procs" for depth in (1, 2, 3))
# A unit moved to another slice with Slice= (EKS AL2023 runs containerd in runtime.slice) has its cgroup there
# (systemd.resource-control(5) Slice=; a slice a-b.slice nests as a.slice/a-b.slice, systemd.slice(5)): looked
# for in every slice one and two levels down.
UNIT_SLICE_CGROUPS = (
    "/sys/fs/cgroup/*.slice/{}/cgroup.events", "/sys/fs/cgroup/*.slice/*.slice/{}/cgroup.events",
    "/sys/fs/cgroup/systemd/*.slice/{}/cgroup.procs", "/sys/fs/cgroup/systemd/*.slice/*.slice/{}/cgroup.procs",
)  # fmt: skip


def unit_cgroup(unit: str) -> str:
    """The cgroup systemd puts a system service in: system.slice/UNIT, and for a template instance
    (NAME@INSTANCE.service) system.slice/system-NAME.slice/UNIT, with '-' in NAME escaped as \\x2d
    (systemd.slice(5); src/core/unit.c unit_default_slice; e.g. system-serial\\x2dgetty.slice)."""
    if "@" in unit:
        prefix = unit.split("@", 1)[0].replace("-", "\\x2d")
        return f"system.slice/system-{prefix}.slice/{unit}"
    return f"system.slice/{unit}"


@dataclass(frozen=True)
class SiteRule:
    spec: CheckSpec
    kind: str  # the matcher: file, sysctl, cmdline, module, systemd, package
    params: dict[str, Any]
    origin: str  # the file it came from


@dataclass
class Needs:
    """What the collector must read for the rules, in the same single execution."""

    read: set[str] = field(default_factory=set)
    stat: set[str] = field(default_factory=set)
    glob: set[str] = field(default_factory=set)
    link: set[str] = field(default_factory=set)
    target: set[str] = field(default_factory=set)  # paths resolved inside the host root, and stat'ed there
    rpm: set[str] = field(default_factory=set)  # RPM databases to query with rpm itself
    KINDS = ("read", "stat", "link", "target", "glob", "rpm")

    def lines(self) -> list[str]:
        return [f"{kind} {p}" for kind in self.KINDS for p in sorted(getattr(self, kind))]


# The modules built into the running kernel (modules.builtin(5)): loaded, though /proc/modules never lists
# them. The collector puts the node's `uname -r` in place of @KREL@.
MODULES_BUILTIN = "/lib/modules/@KREL@/modules.builtin"


def sysctl_path(name: str) -> str:
    return "/proc/sys/" + name.replace(".", "/")


def needs_of(rule: SiteRule) -> Needs:
    n = Needs()
    p = rule.params
    if rule.kind == "file":
        n.stat.add(p["path"])  # the path itself: a symlink stays one
        n.target.add(p["path"])  # what it names, its links followed inside the host root: what is judged
        if any(k in p for k in ("equals", "contains", "not_contains", "regex", "format", "key", *COMPARATORS)):
            n.read.add(p["path"])
        if "owner" in p or "group" in p:  # names as the node itself has them, also under a host root
            n.read.update((PASSWD, GROUP))
    elif rule.kind == "sysctl":
        n.read.add(sysctl_path(p["name"]))
    elif rule.kind == "cmdline":
        n.read.add("/proc/cmdline")
    elif rule.kind == "module":
        n.read.update(("/proc/modules", MODULES_BUILTIN))
    elif rule.kind == "systemd":
        n.read.update(c.format(unit_cgroup(p["unit"])) for c in UNIT_CGROUPS)
        n.glob.update(c.format(unit_cgroup(p["unit"])) for c in UNIT_V1_CHILDREN)
        n.glob.update(c.format(p["unit"]) for c in UNIT_SLICE_CGROUPS)
        n.glob.update(w + p["unit"] for w in (*SYSTEMD_WANTS, *SYSTEMD_VENDOR_WANTS))
        for d in UNIT_PATH:  # where the unit's file is, and whether it is masked (a /dev/null link, or empty)
            n.stat.add(f"{d}/{p['unit']}")
            n.link.add(f"{d}/{p['unit']}")
    elif rule.kind == "package":
        n.read.add(DPKG_STATUS)
        n.rpm.update(RPM_DBPATHS)
    return n


class _Problem(Exception):
    pass


def _path(v: Any) -> str:
    if not isinstance(v, str) or not v.startswith("/") or any(c in v for c in "\n\0") or len(v) > 4096:
        raise _Problem("must be an absolute path (no newline or NUL, at most 4096 characters)")
    return v


def _check_params(kind: str, p: dict[str, Any]) -> None:
    allowed = MATCHERS[kind]
    for k in p:
        if k not in allowed:
            raise _Problem(f"{kind}.{k}: unknown field (allowed: {', '.join(allowed)})")
    need = REQUIRED.get(kind)
    if need and need not in p:
        raise _Problem(f"{kind}.{need}: missing")
    if kind == "file":
        try:
            _path(p["path"])
        except _Problem as e:
            raise _Problem(f"file.path: {e}") from None
        for k in ("mode", "mode_max"):
            if k in p and not (isinstance(p[k], str) and re.fullmatch(r"0?[0-7]{3,4}", p[k])):
                raise _Problem(f'file.{k}: must be an octal mode in quotes, e.g. "0644"')
        if "regex" in p:
            try:
                re.compile(p["regex"])
            except (re.error, TypeError) as e:
                raise _Problem(f"file.regex: not a regular expression: {e}") from None
        if "format" in p and p["format"] not in ("yaml", "json", "toml"):
            raise _Problem("file.format: must be yaml, json or toml")
        if "key" in p and "format" not in p:
            raise _Problem("file.key: needs file.format (yaml, json or toml)")
        # without a key, equals compares the whole content (whitespace at both ends ignored); the others
        # compare a parsed key's value
        if any(k in p for k in COMPARATORS if k != "equals") and "key" not in p:
            raise _Problem(f"file.{next(k for k in COMPARATORS if k in p)}: compares a parsed key: give file.format and file.key")
        if "equals" in p and "key" not in p and not isinstance(p["equals"], str):
            raise _Problem("file.equals: without file.key it compares the whole content: give the content as a string")
    elif kind == "sysctl":
        if not isinstance(p["name"], str) or not SYSCTL.fullmatch(p["name"]):
            raise _Problem("sysctl.name: must be a dotted sysctl name such as vm.nr_hugepages")
        if not any(k in p for k in ("equals", "in", "min", "max")):
            raise _Problem("sysctl: give equals, in, min or max")
    elif kind == "cmdline":
        if len(p) != 1:
            raise _Problem("cmdline: give exactly one of has, lacks, regex")
        if "regex" in p:
            try:
                re.compile(p["regex"])
            except (re.error, TypeError) as e:
                raise _Problem(f"cmdline.regex: not a regular expression: {e}") from None
        elif not isinstance(next(iter(p.values())), str) or " " in next(iter(p.values())):
            raise _Problem(f"cmdline.{next(iter(p))}: must be one kernel parameter, e.g. iommu=pt")
    elif kind == "module":
        if not isinstance(p["name"], str) or not NAME.fullmatch(p["name"]):
            raise _Problem("module.name: must be a module name such as nvidia_peermem")
    elif kind == "systemd":
        if not isinstance(p["unit"], str) or not UNIT.fullmatch(p["unit"]):
            raise _Problem("systemd.unit: must be a unit name with its type, e.g. nvidia-persistenced.service")
        if not any(k in p for k in ("running", "enabled", "masked")):
            raise _Problem("systemd: give running, enabled or masked")
        if "running" in p and not p["unit"].endswith(".service"):
            raise _Problem(
                "systemd.running: only a .service unit has processes of its own; a socket, timer, path, mount or "
                "target unit is judged by the service it starts: name that service"
            )
    elif kind == "package":
        if not isinstance(p["name"], str) or not NAME.fullmatch(p["name"]):
            raise _Problem("package.name: must be a package name")
        if "version" in p and not (isinstance(p["version"], str) and re.fullmatch(r"(>=|<=|>>|<<|=|>|<)?\s*\S+", p["version"])):
            raise _Problem('package.version: must be a version with an optional operator, e.g. ">=550.90.07"')
    for k in ("exists", "loaded", "running", "enabled", "masked", "installed"):
        if k in p and not isinstance(p[k], bool):
            raise _Problem(f"{kind}.{k}: must be true or false")


def parse_rule(doc: Any, origin: str, index: int) -> SiteRule:
    where = f"{origin}: checks[{index}]"
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: a rule must be a mapping")
    rid = doc.get("id")
    if isinstance(rid, str):
        where += f" ({rid})"
    try:
        if not isinstance(rid, str) or not ID.fullmatch(rid):
            raise _Problem("id: must start with SITE- followed by capitals, digits and dashes (e.g. SITE-IOMMU-PT)")
        if doc.get("severity") not in SEVERITIES:
            raise _Problem(f"severity: must be one of {', '.join(SEVERITIES)}")
        for k in TEXT_FIELDS:
            if not isinstance(doc.get(k), str) or not doc[k].strip():
                raise _Problem(f"{k}: missing (every check says why it matters and how to fix it)")
        kinds = [k for k in MATCHERS if k in doc]
        extra = [k for k in doc if k not in MATCHERS and k not in ("id", "severity", "source", *TEXT_FIELDS)]
        if extra:
            raise _Problem(f"{extra[0]}: unknown field (a rule has id, severity, title, rationale, remediation, source and "
                           f"one matcher: {', '.join(MATCHERS)})")  # fmt: skip
        if len(kinds) != 1:
            raise _Problem(f"needs exactly one matcher ({', '.join(MATCHERS)}), has {len(kinds)}")
        kind = kinds[0]
        params = doc[kind]
        if not isinstance(params, dict):
            raise _Problem(f"{kind}: must be a mapping")
        _check_params(kind, params)
    except _Problem as e:
        raise UsageError(f"{where}: {e}") from None
    source = doc.get("source") or f"site rule ({kind}) in {origin}"
    spec = CheckSpec(rid, doc["severity"], doc["title"].strip(), " ".join(doc["rationale"].split()),
                     " ".join(doc["remediation"].split()), str(source), "site", origin)  # fmt: skip
    return SiteRule(spec=spec, kind=kind, params=dict(params), origin=origin)


def rule_files(paths: list[str]) -> list[Path]:
    """The YAML files among `paths` (files, or folders whose *.yaml / *.yml files are read, sorted)."""
    out = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(x for x in p.iterdir() if x.suffix in (".yaml", ".yml") and x.is_file()))
        elif p.is_file():
            if p.suffix in (".yaml", ".yml"):
                out.append(p)
        else:
            raise UsageError(f"--checks {raw}: no such file or folder")
    return out


def load_rules(paths: list[str], builtin_ids: set[str]) -> list[SiteRule]:
    rules: list[SiteRule] = []
    seen: dict[str, str] = {}
    for f in rule_files(paths):
        doc = read_yaml(f, "site rule file")
        if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
            raise UsageError(f"{f}: a site rule file is a mapping with a `checks:` list")
        unknown = [k for k in doc if k != "checks"]
        if unknown:
            raise UsageError(f"{f}: unknown top-level key {unknown[0]!r} (only `checks:`)")
        for i, d in enumerate(doc["checks"]):
            rule = parse_rule(d, str(f), i)
            if rule.spec.id in builtin_ids:
                raise UsageError(f"{f}: checks[{i}] ({rule.spec.id}): id collides with a built-in check")
            if rule.spec.id in seen:
                raise UsageError(f"{f}: checks[{i}] ({rule.spec.id}): id already declared in {seen[rule.spec.id]}")
            seen[rule.spec.id] = str(f)
            rules.append(rule)
    return rules


def python_dirs(paths: list[str]) -> list[str]:
    """Folders and files among `paths` that hold Python site checks (test_*.py), for pytest to collect."""
    out = []
    for raw in paths:
        p = Path(raw)
        if (p.is_dir() and any(p.glob("test_*.py"))) or (p.is_file() and p.suffix == ".py"):
            out.append(str(p.resolve()))
    return out


def needs_section(rules: list[SiteRule]) -> str:
    """The lines the collector reads for these rules (paths verbatim; the caller base64-encodes them)."""
    total = Needs()
    for r in rules:
        n = needs_of(r)
        for kind in Needs.KINDS:
            getattr(total, kind).update(getattr(n, kind))
    return "\n".join(total.lines())


def apply_overrides(rule: SiteRule, overrides: dict[str, Any], source: str) -> dict[str, Any]:
    """The rule's matcher parameters with the profile's `site.<ID>` values laid over them (thresholds)."""
    if not overrides:
        return rule.params
    merged = {**rule.params, **overrides}
    try:
        _check_params(rule.kind, merged)
    except _Problem as e:
        raise UsageError(f"{source}: site.{rule.spec.id}: {e}") from None
    return merged
