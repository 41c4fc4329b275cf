"""Judging declarative site rules (conformance.config.site_rules) against a node's collected records.

Pure: reads the records the collector brought back for the rules (files, stat lines, globs, links, rpm's
answer). Returns (problems, evidence lines); raises FactUnavailable when a fact the rule needs could not
be read. Sources of truth: stat(1) `%a %u %g %U %G %F` of what a path names; /proc/cmdline,
/proc/modules and modules.builtin; a systemd unit runs while its cgroup holds processes (systemd.unit(5):
each service gets its own cgroup under its slice), is enabled by the links `systemctl enable` makes in
the `.wants/` and `.requires/` folders of its [Install] targets, and is masked when the first file of it
along the unit search path links to /dev/null or is empty; installed packages as conformance.facts.packages
reads dpkg's status file and rpm's database.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
from collections.abc import Callable, Iterable
from typing import Any

from conformance.collection.bundle import Bundle, Record
from conformance.config.site_rules import (
    DPKG_STATUS,
    GROUP,
    MODULES_BUILTIN,
    PASSWD,
    RPM_DBPATHS,
    SYSTEMD_VENDOR_WANTS,
    SYSTEMD_WANTS,
    UNIT_CGROUPS,
    UNIT_PATH,
    UNIT_SLICE_CGROUPS,
    UNIT_V1_CHILDREN,
    SiteRule,
    sysctl_path,
    unit_cgroup,
)
from conformance.errors import FactUnavailable, ParseError, clipped
from conformance.facts.kubelet import load_yaml_mapping
from conformance.facts.packages import Package, dpkg_lookup, dpkg_packages, rpm_lookup, rpm_packages
from conformance.facts.runtime import load_toml

SHOWN = 160  # characters of a value shown in evidence


_short = functools.partial(clipped, limit=SHOWN)


def _number(v: Any, what: str) -> float:
    try:
        return float(str(v).split()[0]) if not isinstance(v, int | float) else float(v)
    except (ValueError, IndexError):
        raise FactUnavailable(f"{what}: {_short(v)!r} is not a number") from None


def compare(actual: Any, p: dict[str, Any], what: str) -> list[str]:
    """The comparators shared by file keys and sysctls: value/equals, in, min, max."""
    problems = []
    for k in ("value", "equals"):
        if k in p and str(actual).strip() != str(p[k]).strip() and actual != p[k]:
            problems.append(f"{what} is {_short(actual)!r}, expected {_short(p[k])!r}")
    if "in" in p and actual not in p["in"] and str(actual).strip() not in [str(x) for x in p["in"]]:
        problems.append(f"{what} is {_short(actual)!r}, expected one of {_short(p['in'])}")
    if "min" in p and _number(actual, what) < float(p["min"]):
        problems.append(f"{what} is {_short(actual)}, below the minimum {p['min']}")
    if "max" in p and _number(actual, what) > float(p["max"]):
        problems.append(f"{what} is {_short(actual)}, above the maximum {p['max']}")
    return problems


def _parsed(text: str, fmt: str, path: str) -> Any:
    """The file as the rule's format reads it, with the project's own loaders (a ParseError names the file)."""
    if fmt == "toml":
        return load_toml(text, path)
    if fmt == "json":
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ParseError(f"{path}: not valid JSON: {e}") from None
    return load_yaml_mapping(text, path, "a YAML mapping")


def _key(doc: Any, dotted: str, path: str) -> tuple[bool, Any]:
    cur = doc
    for part in str(dotted).split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


LOOP = "more than 40 symbolic links on the way to it (the kernel's limit, ELOOP), or a link that cannot be read"


def _examined(b: Bundle, name: str, path: str) -> Record:
    st = b.stat(name)
    if st is None:
        raise FactUnavailable(f"{path}: not collected (an older snapshot, or the collector stopped early)")
    if st.status == "loop":
        raise FactUnavailable(f"{path}: {LOOP}")
    if st.status not in ("ok", "missing"):
        raise FactUnavailable(f"{path}: could not be examined ({st.status})")
    return st


def _id_names(b: Bundle, table: str) -> dict[str, str] | None:
    """ID -> name from the node's own passwd(5) or group(5) file; None when the collection ran on the node
    itself, where stat(1) already named the owner through the node's name service."""
    root = b.meta("root")
    if root is None or not root.data:
        return None
    names: dict[str, str] = {}
    for line in b.text(table, f"{table} (the owner names under the host root)").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            names.setdefault(fields[2], fields[0])  # the first entry of an ID is the name ls and stat show
    return names


def _owned(b: Bundle, path: str, k: str, want: str, ident: str, stat_name: str) -> tuple[str, list[str]]:
    """(the owner's name as the node names it, problems): owner or group against a wanted name or number."""
    table = PASSWD if k == "owner" else GROUP
    try:
        names = _id_names(b, table)
    except FactUnavailable:
        if not want.isdigit():
            raise
        return "?", ([] if want == ident else [f"{path} is owned by {k} {ident}, expected {want}"])  # a number needs no name
    have = stat_name if names is None else names.get(ident, "")
    if want in (ident, have):
        return have, []
    if names is not None and not have and not want.isdigit():
        if want in names.values():
            return ident, [f"{path} is owned by {k} {ident} (not in the node's {table}), expected {want}"]
        raise FactUnavailable(
            f"{path}: {k} {ident} and the name {want} are both absent from the node's {table} (a directory service names "
            f"them, which a host root cannot ask): write the {k} as a number"
        )
    return have, [f"{path} is owned by {k} {have or '?'} ({ident}), expected {want}"]


def judge_file(b: Bundle, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The file the path names, with its links followed inside the node's root (the collector's `target`):
    its mode, owner and content are what a reader of the path gets. A link is named in the evidence."""
    path = p["path"]
    st = _examined(b, path, path)
    via = ""
    if st.status == "ok" and st.data.decode("utf-8", "replace").endswith(" symbolic link"):
        try:
            target = b.link(f"target:{path}")
        except FactUnavailable:
            raise FactUnavailable(f"{path}: {LOOP}") from None
        st = _examined(b, f"target:{path}", path)
        via = f" (a symbolic link to {target})"
    want_exists = p.get("exists", True)
    if st.status == "missing":
        return ([] if not want_exists else [f"{path} does not exist{via}"]), [f"{path}: does not exist{via}"]
    mode, uid, gid, user, group, *kind = st.data.decode("utf-8", "replace").split(" ", 5)
    problems = []
    for k, ident, stat_name in (("owner", uid, user), ("group", gid, group)):
        if k in p:
            name, bad = _owned(b, path, k, str(p[k]), ident, stat_name)
            problems += bad
            user, group = (name, group) if k == "owner" else (user, name)
    lines = [f"{path}{via}: {' '.join(kind)}, mode {mode.zfill(4)}, owner {user} ({uid}), group {group} ({gid})"]
    if not want_exists:
        return [f"{path} exists, and must not{via}"], lines
    if "mode" in p and int(mode, 8) != int(p["mode"], 8):
        problems.append(f"{path} has mode {mode.zfill(4)}, expected {p['mode'].zfill(4)}")
    if "mode_max" in p and int(mode, 8) & ~int(p["mode_max"], 8):
        problems.append(f"{path} has mode {mode.zfill(4)}: more permissive than {p['mode_max'].zfill(4)}")
    if any(k in p for k in ("equals", "contains", "not_contains", "regex", "format")):
        text = b.text(path)
        rec = b.file(path)
        if rec is not None and rec.truncated:
            lines.append(f"{path}: only the first {b.max_bytes} bytes were read")
        if "equals" in p and "key" not in p and rec is not None and rec.truncated:
            raise FactUnavailable(f"{path}: only the first {b.max_bytes} bytes were read: its whole content cannot be compared")
        if "equals" in p and "key" not in p and text.strip() != str(p["equals"]).strip():
            problems.append(f"{path} content is {_short(text.strip())!r}, expected {_short(p['equals'])!r}")
        if "contains" in p and str(p["contains"]) not in text:
            problems.append(f"{path} does not contain {_short(p['contains'])!r}")
        if "not_contains" in p and str(p["not_contains"]) in text:
            problems.append(f"{path} contains {_short(p['not_contains'])!r}")
        if "regex" in p:
            m = re.search(p["regex"], text, re.M)
            lines.append(f"{path}: /{_short(p['regex'])}/ " + (f"matches {_short(m.group(0))!r}" if m else "does not match"))
            if not m:
                problems.append(f"{path} does not match /{_short(p['regex'])}/")
        if "key" in p:
            found, value = _key(_parsed(text, p["format"], path), p["key"], path)
            lines.append(f"{path}: {p['key']} = {_short(value) if found else '(absent)'}")
            if not found:
                problems.append(f"{path}: key {p['key']} is absent")
            else:
                problems += compare(value, p, f"{path} {p['key']}")
    return problems, lines


def judge_sysctl(b: Bundle, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    value = " ".join(b.text(sysctl_path(p["name"])).split())
    return compare(value, p, p["name"]), [f"{p['name']} = {_short(value)} ({sysctl_path(p['name'])})"]


def kernel_param(param: str) -> str:
    """A kernel parameter as the kernel compares it: in its name (before '='), '-' and '_' are the same
    (kernel/params.c parameq/parameqn, dash2underscore); the value is compared as written."""
    name, eq, value = param.partition("=")
    return name.replace("-", "_") + eq + value


def judge_cmdline(b: Bundle, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    text = b.text("/proc/cmdline").strip()
    params = {kernel_param(x) for x in text.split()}
    lines = [f"/proc/cmdline: {_short(text)}"]
    if "has" in p:
        return ([] if kernel_param(p["has"]) in params else [f"the kernel command line lacks {p['has']}"]), lines
    if "lacks" in p:
        return ([f"the kernel command line has {p['lacks']}"] if kernel_param(p["lacks"]) in params else []), lines
    return ([] if re.search(p["regex"], text) else [f"the kernel command line does not match /{_short(p['regex'])}/"]), lines


def judge_module(b: Bundle, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    def norm(name: str) -> str:
        return name.replace("-", "_")  # the kernel treats - and _ in module names alike

    loaded = {norm(line.split()[0]) for line in b.text("/proc/modules").splitlines() if line.strip()}
    want = p.get("loaded", True)
    name = norm(p["name"])
    if name in loaded:
        is_loaded, how = True, f"loaded ({len(loaded)} modules in /proc/modules)"
    else:
        # A module built into the kernel is never in /proc/modules: modules.builtin(5) of the running kernel
        # lists it (one path per line, kernel/drivers/nvme/host/nvme-core.ko). Unread, it is unknown.
        uname = b.command("uname")
        if uname.status != "0" or not uname.data.strip():
            raise FactUnavailable(f"{p['name']} is not in /proc/modules, and the kernel release (uname -r) was not read")
        path = MODULES_BUILTIN.replace("@KREL@", uname.data.decode("utf-8", "replace").strip())
        rec = b.file(path)
        if rec is None or rec.status != "ok":
            state = "not collected" if rec is None else rec.status
            raise FactUnavailable(
                f"{p['name']} is not in /proc/modules, and {path} ({state}) was not read: whether it is built into the "
                "kernel is unknown"
            )
        builtin = {
            norm(posixpath.basename(line.strip()).removesuffix(".ko")) for line in b.text(path).splitlines() if line.strip()
        }
        is_loaded = name in builtin
        how = "built into the kernel (" + path + ")" if is_loaded else f"not loaded (not in /proc/modules nor {path})"
    lines = [f"kernel module {p['name']}: {how}"]
    if is_loaded != want:
        return [f"kernel module {p['name']} is {'loaded' if is_loaded else 'not loaded'}"], lines
    return [], lines


def judge_systemd(b: Bundle, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    unit = p["unit"]
    problems, lines = [], []
    if "running" in p:
        running, how = unit_running(b, unit)
        lines.append(f"{unit}: {how}")
        if running != p["running"]:
            problems.append(f"{unit} is {'running' if running else 'not running'}")
    masked, where = unit_masked(b, unit)
    if "masked" in p:
        lines.append(f"{unit}: {where}")
        if masked != p["masked"]:
            problems.append(f"{unit} is {'masked' if masked else 'not masked'}")
    if "enabled" in p:
        wanted = sorted({m for w in SYSTEMD_WANTS for m in b.glob(w + unit)})
        vendor = sorted({m for w in SYSTEMD_VENDOR_WANTS for m in b.glob(w + unit)})
        enabled = bool(wanted) and not masked
        lines.append(
            f"{unit}: "
            + (f"enabled by {', '.join(wanted)}" if wanted else "no .wants/.requires link in /etc or /run (not enabled)")
        )
        if vendor:
            lines.append(f"{unit}: wanted by the vendor's {', '.join(vendor)} (starts with that target; is-enabled ignores it)")
        if enabled != p["enabled"]:
            problems.append(f"{unit} is {'enabled' if enabled else 'not enabled'}" + (" (masked)" if masked else ""))
    return problems, lines


def unit_running(b: Bundle, unit: str) -> tuple[bool, str]:
    """(running, how it was decided) from the service's cgroup: cgroup v2's cgroup.events (populated, the
    whole subtree), else v1's cgroup.procs of it and of its child cgroups. No cgroup at either place: systemd
    has not started it, or it stopped and its cgroup went away. A cgroup file that could not be read is
    unknown, never "not running"."""
    group = unit_cgroup(unit)
    v2, v1 = (c.format(group) for c in UNIT_CGROUPS)
    found = _first_present(b.file, (v2, v1), f"whether {unit} runs")
    if found is None:
        found = _in_another_slice(b, unit)
        if found is None:
            return False, f"no cgroup {group} nor {unit} in any other slice (not running)"
        v2 = found[0] if found[0].endswith("/cgroup.events") else v2
    path, rec = found
    text = rec.data.decode("utf-8", "replace")
    if path == v2:
        populated = re.search(r"^populated (\d)$", text, re.M)
        if populated is None:
            raise ParseError(f"{path}: no 'populated' line")
        return populated.group(1) == "1", f"{path}: populated {populated.group(1)}"
    procs = [x for x in text.split() if x.isdigit()]
    if procs:
        return True, f"{path}: {len(procs)} process(es)"
    for pattern in (c.format(group) for c in UNIT_V1_CHILDREN):  # a Delegate= unit's own child cgroups
        for child in b.glob(pattern):
            if [x for x in b.text(child).split() if x.isdigit()]:
                return True, f"{path}: no process of its own, but {child} has some (a delegated subtree)"
    return False, f"{path} and its child cgroups (three levels): no process"


def _in_another_slice(b: Bundle, unit: str) -> tuple[str, Record] | None:
    """The unit's cgroup file where Slice= put it (site_rules.UNIT_SLICE_CGROUPS), v2 first; None when no slice
    holds it. A listing the collector did not make (an older snapshot) or could not make is unknown."""
    for pattern in (c.format(unit) for c in UNIT_SLICE_CGROUPS):
        if not b.listed(pattern):
            raise FactUnavailable(f"{pattern}: not listed (an older snapshot): whether {unit} runs in another slice is unknown")
        for path in b.glob(pattern):
            found = _first_present(b.file, (path,), f"whether {unit} runs")
            if found is not None:
                return found
    return None


def _first_present(get: Callable[[str], Record | None], paths: Iterable[str], what: str) -> tuple[str, Record] | None:
    """The first of `paths` whose record exists on the node; a path not collected or not readable before it
    makes `what` unknown."""
    for path in paths:
        rec = get(path)
        if rec is None:
            raise FactUnavailable(f"{path}: not collected (an older snapshot): {what} is unknown")
        if rec.status == "missing":
            continue
        if rec.status != "ok":
            raise FactUnavailable(f"{path} could not be read ({rec.status}): {what} is unknown")
        return path, rec
    return None


def unit_masked(b: Bundle, unit: str) -> tuple[bool, str]:
    """(masked, how it was decided). The first file of the unit along the search path is the one systemd
    loads; it masks the unit when it is a symlink to /dev/null or an empty file (systemd.unit(5)). A path
    that could not be examined before that first file makes the answer unknown."""
    found = _first_present(b.stat, (f"{d}/{unit}" for d in UNIT_PATH), f"whether {unit} is masked")
    if found is None:
        return False, "no unit file in systemd's search path (not masked)"
    path, st = found
    kind = st.data.decode("utf-8", "replace").split(" ", 5)[-1]
    if kind == "symbolic link":
        target = b.link(path)
        if target is None:
            raise FactUnavailable(f"{path}: its link target was not read: whether {unit} is masked is unknown")
        if target == "/dev/null":
            return True, f"{path} -> /dev/null (masked)"
        return False, f"{path} -> {target} (not masked)"
    if kind == "regular empty file":
        return True, f"{path} is empty (masked)"
    return False, f"{path}: {kind} (not masked)"


def tool_gap(b: Bundle, tool: str) -> str:
    """Whose gap a missing program is: below a host root, the audit's own image's (the node may well have it)."""
    root = b.meta("root")
    if root is not None and root.data:
        return f"the audit's image has no {tool} to read it (install it in the image; the node's own is not run)"
    return f"{tool} is not on the node's PATH to read it"


def installed_packages(b: Bundle) -> list[tuple[str, tuple[Package, ...]]]:
    """Every package database the node has, read, as (source, packages). A database
    that is there but could not be read makes every package rule unknown; none at all is an error too."""
    found: list[tuple[str, tuple[Package, ...]]] = []
    looked = []
    rec = b.file(DPKG_STATUS)
    if rec is None:
        raise FactUnavailable(f"{DPKG_STATUS}: not collected (an older snapshot): which packages are installed is unknown")
    if rec.status == "ok":
        found.append((f"dpkg ({DPKG_STATUS})", dpkg_packages(b.text(DPKG_STATUS))))
    elif rec.status != "missing":
        raise FactUnavailable(f"{DPKG_STATUS} could not be read ({rec.status}): which packages are installed is unknown")
    looked.append(f"{DPKG_STATUS} ({rec.status})")
    for dbpath in RPM_DBPATHS:
        cmd = b.optional_command(f"rpm:{dbpath}")
        if cmd is None:
            raise FactUnavailable(f"{dbpath}: not looked at for an RPM database (an older snapshot): installed packages unknown")
        looked.append(f"{dbpath} ({'no rpm database' if cmd.status == 'missing' else cmd.status})")
        if cmd.status == "missing":
            continue
        if cmd.status == "denied":
            raise FactUnavailable(f"{dbpath}: the RPM database folder cannot be entered by this user (needs execute permission)")
        if cmd.status == "127":
            raise FactUnavailable(f"{dbpath} holds an RPM database, and {tool_gap(b, 'rpm (or timeout)')}")
        if cmd.status == "loop":
            raise FactUnavailable(f"{dbpath}: its links could not be resolved inside the host root (a loop, or a link not read)")
        if cmd.status != "0":
            why = " (killed after 60 s)" if cmd.status in ("137", "124") else ""
            raise FactUnavailable(f"rpm --dbpath {dbpath} -qa exited {cmd.status}{why}: which packages are installed is unknown")
        found.append((f"rpm ({dbpath})", rpm_packages(cmd.data.decode("utf-8", "replace"))))
        break  # the first folder with a database is rpm's %_dbpath; the other is its compatibility link
    if not found:
        raise FactUnavailable(f"no package database on this node: looked at {', '.join(looked)}")
    return found


def judge_package(b: Bundle, p: dict[str, Any]) -> tuple[list[str], list[str]]:
    databases = installed_packages(b)
    found: list[Package] = []
    lines = []
    for source, packages in databases:
        mine = (rpm_lookup if source.startswith("rpm") else dpkg_lookup)(packages, p["name"])
        found += mine
        lines += [f"{source}: {i} {i.version} ({i.status})" for i in mine] or [f"{source}: {p['name']} not known"]
    installed = [i for i in found if i.installed]
    if "installed" in p and bool(installed) != p["installed"]:
        what = ", ".join(f"{i} {i.version}" for i in installed)
        return [f"package {p['name']} is {'installed (' + what + ')' if installed else 'not installed'}"], lines
    if "version" in p:
        if not installed:
            return [f"package {p['name']} is not installed (wanted {p['version']})"], lines
        # every installed instance must satisfy it: a second architecture's older build is still loaded
        bad = [i for i in installed if not i.satisfies(p["version"])]
        if bad:
            return [f"package {', '.join(f'{i} is {i.version}' for i in bad)}, wanted {p['version']}"], lines
    elif "installed" not in p and not installed:
        return [f"package {p['name']} is not installed"], lines
    return [], lines


JUDGES = {
    "file": judge_file,
    "sysctl": judge_sysctl,
    "cmdline": judge_cmdline,
    "module": judge_module,
    "systemd": judge_systemd,
    "package": judge_package,
}


def judge(rule: SiteRule, b: Bundle, params: dict[str, Any]) -> tuple[list[str], list[str]]:
    return JUDGES[rule.kind](b, params)
