"""Container runtime configuration: containerd (config v1, v2, v3 with `imports`) and CRI-O."""

from __future__ import annotations

import copy
import json
import posixpath
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ParseError
from conformance.facts.canonical import digest
from conformance.facts.daemon_release import Span

RUNC_TYPE = "io.containerd.runc.v2"
RUNC_V1_TYPE = "io.containerd.runc.v1"
LINUX_V1_TYPE = "io.containerd.runtime.v1.linux"
CRI_V1, CRI_V2, CRI_V3 = "cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"
# A release as `containerd --version` prints it, with what distributions append: Debian "1.6.20~ds1",
# Ubuntu "1.4.4-0ubuntu1~20.04.2", k3s/RKE2 "v1.7.20-k3s1.28", Amazon Linux "1.7.11-1.amzn2023.0.1".
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:[-~+.][0-9A-Za-z.~+_-]*)?")


@dataclass(frozen=True)
class ContainerdRelease:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def triple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)


def parse_containerd_version(text: str | None) -> ContainerdRelease | None:
    """`containerd --version` prints 'containerd PACKAGE VERSION REVISION' (cmd/containerd/command/main.go):
    'containerd containerd.io 1.7.27 05044ec...', 'containerd github.com/containerd/containerd/v2 v2.0.0 207ad71...',
    Debian 12's 'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3'. The first word
    after the package that reads as a release is the release."""
    for word in (text or "").split()[1:]:
        m = _VERSION.fullmatch(word)
        if m:
            return ContainerdRelease(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return None


class RuntimeRefused(ParseError):
    """The files were read, and the runtime (or its CRI plugin) refuses them: no pod starts. A verdict
    (a failure), not an unknown."""


@dataclass(frozen=True)
class MergeRules:
    """How one span of containerd releases loads and merges its config files and reads its CRI section.

    glob_from_cwd: a relative import glob is matched against the daemon's working directory, not the
    importing file's folder. services/server/config/config.go resolveImports: before v1.6.29 and
    v1.7.16 only a literal path is joined with the file's folder (filepath.Glob gets the relative glob as
    written); commit 62e9535f2 "Fix config import relative path glob" joins both.
    highest_version: the highest config version the release starts with. 1.x checks the merged version
    (ValidateV2, "unsupported config version", commit 00347b7fa, from v1.6.32 and v1.7.17; earlier 1.x
    releases accept any version and, for version 2 and up, read the CRI plugin as
    io.containerd.grpc.v1.cri); 2.x checks each file."""

    family: str  # "1.x", "2.0-2.2" or "2.3"
    releases: str
    glob_from_cwd: bool
    highest_version: int | None

    @property
    def label(self) -> str:
        return f"containerd {self.releases}"


RULES_1_OLD = MergeRules("1.x", "1.x before 1.6.29, 1.7.0-1.7.15", True, None)
RULES_1_GLOB = MergeRules("1.x", "1.6.29-1.6.31, 1.7.16", False, None)
RULES_1_NEW = MergeRules("1.x", "1.6.32 and later 1.6, 1.7.17 and later 1.7", False, 2)
RULES_2_0 = MergeRules("2.0-2.2", "2.0-2.2", False, 3)
RULES_2_3 = MergeRules("2.3", "2.3 and later", False, 4)
EVERY_RULES = (RULES_1_OLD, RULES_1_GLOB, RULES_1_NEW, RULES_2_0, RULES_2_3)


def rules_for(release: ContainerdRelease) -> MergeRules:
    r = release.triple
    if release.major >= 2:
        return RULES_2_3 if r >= (2, 3, 0) else RULES_2_0
    if release.minor == 6:
        return RULES_1_OLD if r < (1, 6, 29) else (RULES_1_GLOB if r < (1, 6, 32) else RULES_1_NEW)
    if release.minor == 7:
        return RULES_1_OLD if r < (1, 7, 16) else (RULES_1_GLOB if r < (1, 7, 17) else RULES_1_NEW)
    return RULES_1_OLD if release.minor < 6 else RULES_1_NEW


# Where rules_for changes from one span of releases to the next (the first release of each)
RULES_BREAKS = ((1, 6, 0), (1, 6, 29), (1, 6, 32), (1, 7, 0), (1, 7, 16), (1, 7, 17), (1, 8, 0), (2, 0, 0), (2, 3, 0))


def rules_in(span: Span) -> list[MergeRules]:
    """Every span of releases' merge rules that a release of `span` may follow, in EVERY_RULES order."""
    found = {rules_for(ContainerdRelease(*span.low))}
    found |= {rules_for(ContainerdRelease(*b)) for b in RULES_BREAKS if span.low < b <= span.high}
    return [r for r in EVERY_RULES if r in found]


def load_toml(text: str, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise ParseError(f"{path}: not valid TOML: {e}") from e


@dataclass
class RuntimeHandler:
    name: str
    runtime_type: str
    systemd_cgroup: bool | None  # None: not a runc handler, the option does not apply
    source: str
    broken: str | None = None  # why pods of this handler cannot start, if they cannot

    def describe(self) -> str:
        return f"handler {self.name}: type {self.runtime_type or '(none)'}, systemd cgroup {self.systemd_cgroup} ({self.source})"


@dataclass
class RuntimeConfig:
    """The runtime's effective cgroup settings, per handler, and the files that made them."""

    runtime: str  # "containerd" or "cri-o"
    default_handler: str
    handlers: dict[str, RuntimeHandler]
    files: list[str] = field(default_factory=list)
    cgroup_manager: str | None = None  # CRI-O: one setting for all handlers
    rules: str | None = None  # containerd: the release whose merge rules were applied, and why
    # containerd whose release is unknown: what the files make under each span of releases (a config, or
    # why that release would not start); the check judges them all and passes only if all pass
    alternatives: dict[str, RuntimeConfig | ParseError] = field(default_factory=dict)
    refused: str | None = None  # why the runtime refuses these files (then there are no handlers)
    effective: str | None = None  # digest of the effective configuration: containerd's merged document, CRI-O's files
    # CDI: the runtime's enable_cdi as its files set it (None: not set, the release's default applies) and where,
    # and the cdi_spec_dirs they set (None: the default /etc/cdi, /var/run/cdi)
    cdi_enable: tuple[Any, str] | None = None
    cdi_dirs: list[str] | None = None


@dataclass
class ContainerdMerge:
    """containerd's effective configuration: the merged document, its CRI runtime plugin id, the files
    in load order, and the release rules that merged them."""

    doc: dict[str, Any]
    plugin_id: str
    files: list[str]
    rules: MergeRules


def merge_containerd(
    main_path: str,
    read: Callable[[str], str | None],
    expand: Callable[[str, str], list[str]],
    rules: MergeRules,
    cwd: str | None = None,
) -> ContainerdMerge:
    """Load containerd's main config and every file its `imports` pull in, in containerd's order
    (breadth first; relative paths against the importing file's folder, relative globs as `rules` say,
    against `cwd`, the daemon's working directory, where they are matched there), and merge them the way
    those releases do. `read` returns None for a missing file.

    containerd 1.x (services/server/config/config.go at v1.6.20 and v1.7.0, LoadConfig, mergeConfig):
    keys of later files win (mergo WithOverride: a later non-zero version too); each plugin section of a
    later file REPLACES the whole section; the merged document is validated once (ValidateV2).
    containerd 2.0-2.2 (cmd/containerd/server/config/config.go at v2.0.0): plugins are deep-merged
    (TestMergingPluginsWithTwoCriRuntimeDropInConfigs: a drop-in with only the nvidia handler keeps
    runc's options); version 0/1 files get plugin ids renamed first; the merged document takes the last
    file's version, and if that is below 3 the whole CRI section is migrated afterwards
    (cmd/containerd/server/server.go New; plugins/cri/runtime/plugin.go ConfigMigration REPLACES the
    io.containerd.cri.v1.runtime section with the old io.containerd.grpc.v1.cri one); versions up to 3.
    containerd 2.3 (v2.3.0 LoadConfigWithPlugins): a drop-in whose version is higher than the root
    file's is refused; every file is migrated to version 4 on its own before the deep merge; version 4
    keeps version 3's CRI runtime path."""
    return merge_docs(_load_all(main_path, read, expand, rules, cwd), rules)


def merge_docs(docs: list[tuple[str, dict]], rules: MergeRules) -> ContainerdMerge:
    """The loaded files (path, document), in load order, merged as `rules` say."""
    files = [p for p, _ in docs]
    if rules.family == "1.x":
        doc, plugin_id = _merge_1x(docs, rules)
    elif rules.family == "2.0-2.2":
        doc, plugin_id = _merge_20(docs, rules)
    else:
        doc, plugin_id = _merge_23(docs, rules)
    return ContainerdMerge(doc, plugin_id, files, rules)


def _load_all(
    main_path: str, read: Callable[[str], str | None], expand: Callable[[str, str], list[str]], rules: MergeRules, cwd: str | None
) -> list[tuple[str, dict]]:
    text = read(main_path)
    if text is None:
        raise ParseError(f"{main_path}: containerd config not found")
    out: list[tuple[str, dict]] = []
    pending = [main_path]
    seen: set[str] = set()
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        text = read(path)
        if text is None:
            # resolveImports passes a path without '*' on as it is, and loading it then fails
            raise RuntimeRefused(f"{path}: imported by the containerd config but missing; containerd refuses to start")
        doc = load_toml(text, path)
        out.append((path, doc))
        imports = doc.get("imports", [])
        if not isinstance(imports, list):
            raise ParseError(f"{path}: imports is not a list of paths")
        for pattern in imports:
            if not isinstance(pattern, str):
                raise ParseError(f"{path}: imports has a non-string entry {pattern!r}")
            if "*" not in pattern:
                pending.append(posixpath.normpath(posixpath.join(posixpath.dirname(path), pattern)))
                continue
            if not pattern.startswith("/"):
                if rules.glob_from_cwd:
                    if cwd is None:
                        raise ParseError(
                            f"{path}: imports {pattern!r} is a relative glob, which {rules.label} matches against the "
                            "daemon's working directory (resolveImports), and that directory (/proc/PID/cwd) was not read"
                        )
                    pattern = posixpath.join(cwd, pattern)
                else:
                    pattern = posixpath.join(posixpath.dirname(path), pattern)
            pending += expand(path, posixpath.normpath(pattern))
    return out


def _version_number(doc: dict[str, Any], path: str) -> int:
    v = doc.get("version", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ParseError(f"{path}: containerd config version {v!r} is not a version number")
    return v


def _version(doc: dict[str, Any], path: str, rules: MergeRules) -> int:
    """The file's config version; one above what these release rules read stops containerd (ValidateVersion)."""
    return _supported(_version_number(doc, path), path, rules)


def _supported(version: int, where: str, rules: MergeRules) -> int:
    if rules.highest_version is not None and version > rules.highest_version:
        raise RuntimeRefused(
            f"{where}: config version {version}: {rules.label} supports versions up to {rules.highest_version} "
            "and refuses to start"
        )
    return version


def _copy_top_level(merged: dict[str, Any], doc: dict[str, Any]) -> None:
    """Keys other than plugins: a later file's value replaces the earlier one (imports are per file)."""
    for k, val in doc.items():
        if k not in ("plugins", "imports", "version"):
            merged[k] = copy.deepcopy(val)


def _plugins(doc: dict[str, Any], path: str) -> dict[str, Any]:
    plugins = doc.get("plugins", {})
    if not isinstance(plugins, dict):
        raise ParseError(f"{path}: plugins is not a table")
    return plugins


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    """mergo.Merge with WithOverride over map[string]interface{}: tables merged key by key, values replaced."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)


def _rename_v1(plugins: dict[str, Any]) -> dict[str, Any]:
    """The version 1 migration: short plugin ids get their full names (only 'cri' matters here)."""
    return {(CRI_V2 if k == CRI_V1 else k): v for k, v in plugins.items()}


def _merge_1x(docs: list[tuple[str, dict]], rules: MergeRules) -> tuple[dict[str, Any], str]:
    merged: dict[str, Any] = {"plugins": {}}
    version = 0
    for path, doc in docs:
        version = _version_number(doc, path) or version
        merged["plugins"].update(copy.deepcopy(_plugins(doc, path)))  # whole sections replaced
        _copy_top_level(merged, doc)
    where = docs[-1][0] if len(docs) == 1 else f"{docs[0][0]} with its imports"
    version = _supported(version or 1, where, rules)  # GetVersion: unset is 1; ValidateV2 checks the merged version
    if version >= 2:
        for key in merged["plugins"]:
            if len(str(key).split(".")) < 4:  # ValidateV2
                raise RuntimeRefused(
                    f"{where}: plugin key {key!r} in a version {version} config: containerd 1.x refuses to start "
                    '("invalid plugin key URI ... expect io.containerd.x.vx"); version 2 names the CRI plugin '
                    f"{CRI_V2!r}"
                )
    merged["version"] = version
    # Decode: a version 1 config names plugins by id ("cri"), any later version by URI; 1.x has no
    # io.containerd.cri.v1.runtime plugin, so a version 3 file's CRI section is never read there.
    return merged, CRI_V1 if version == 1 else CRI_V2


def _merge_20(docs: list[tuple[str, dict]], rules: MergeRules) -> tuple[dict[str, Any], str]:
    merged: dict[str, Any] = {"plugins": {}}
    version = 3  # the default config's version, overridden by every file that sets one
    for path, doc in docs:
        v = _version(doc, path, rules)
        plugins = _plugins(doc, path)
        if v in (0, 1):
            # MigrateConfigTo(out.Version) renames plugin ids and lifts the file to the current version, so
            # the CRI plugin's own migration never sees it: its old-named section stays unused
            plugins = _rename_v1(plugins)
        else:
            version = v  # mergo WithOverride: the file's non-zero version replaces the merged one
        _deep_merge(merged["plugins"], plugins)
        _copy_top_level(merged, doc)
    if version < 3 and CRI_V2 in merged["plugins"]:
        merged["plugins"][CRI_V3] = merged["plugins"][CRI_V2]  # server.New's migration replaces the section
    merged["version"] = version
    return merged, CRI_V3


def _merge_23(docs: list[tuple[str, dict]], rules: MergeRules) -> tuple[dict[str, Any], str]:
    merged: dict[str, Any] = {"plugins": {}}
    root = 0
    for path, doc in docs:
        v = _version(doc, path, rules)
        root = root or v
        if v > root:
            raise RuntimeRefused(
                f"{path}: drop-in config version {v} higher than root config version {root}: containerd 2.3 refuses to start"
            )
        plugins = copy.deepcopy(_plugins(doc, path))
        if v in (0, 1):
            plugins = _rename_v1(plugins)
        if v < 3 and CRI_V2 in plugins:
            plugins[CRI_V3] = plugins[CRI_V2]  # this file alone migrated before merging
        _deep_merge(merged["plugins"], plugins)
        _copy_top_level(merged, doc)
    merged["version"] = 4
    return merged, CRI_V3


def _table(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key, {})
    if not isinstance(value, dict):
        raise ParseError(f"{where}.{key} is not a table")
    return value


# go-toml 1.x (vendored by containerd 1.x at v1.9.5, marshal.go valueFromTree) fills a struct field from the
# first of these keys the table has: the field name, all lower case, all upper case, first letter lower.
def _keys_go_toml_v1(name: str) -> list[str]:
    return list(dict.fromkeys([name, name.lower(), name.upper(), name[0].lower() + name[1:]]))


def _systemd_option(options: Any, where: str, family: str) -> tuple[bool, str]:
    """SystemdCgroup as the release decodes a handler's options into runc's Options (pkg/cri/server
    helpers.go generateRuntimeOptions at v1.6.20; internal/cri/config/config.go GenerateRuntimeOptions at
    v2.0.0, with go-toml v2, whose structFieldPath also matches a key case-insensitively)."""
    if not isinstance(options, dict):
        raise ParseError(f"{where}.options is not a table")
    if family == "1.x":
        found = [k for k in _keys_go_toml_v1("SystemdCgroup") if k in options][:1]
    else:
        found = [k for k in options if isinstance(k, str) and k.lower() == "systemdcgroup"]
        if len(found) > 1:
            raise ParseError(
                f"{where}.options sets {' and '.join(found)}: containerd 2.x reads them all as SystemdCgroup; "
                "which one wins is not defined"
            )
    if not found:
        return False, f"{where}.options.SystemdCgroup (not set: runc's default, false)"
    value = options[found[0]]
    if not isinstance(value, bool):
        raise ParseError(f"{where}.options.{found[0]} is {value!r}, not true or false")
    return value, f"{where}.options.{found[0]}"


def containerd_runtime(merge: ContainerdMerge) -> RuntimeConfig:
    """The CRI plugin's runtime handlers as the release decodes them from the merged document."""
    doc, files, plugin_id, rules = merge.doc, merge.files, merge.plugin_id, merge.rules
    plugins = _table(doc, "plugins", files[0])
    where = f"plugins.{_q(plugin_id)}"
    cri = _table(plugins, plugin_id, files[0] + ": plugins")
    containerd = _table(cri, "containerd", where)
    default = containerd.get("default_runtime_name", "runc")
    if not isinstance(default, str):
        raise ParseError(f"{files[0]}: default_runtime_name is not a string")
    user = _table(containerd, "runtimes", f"{where}.containerd")
    for name, rt in user.items():
        if not isinstance(rt, dict):
            raise ParseError(f"{files[0]}: runtimes.{name} is not a table")
    # The default config has one handler, runc: io.containerd.runc.v2 with runc's options
    # (pkg/cri/config/config_unix.go DefaultConfig; internal/cri/config/config_unix.go at v2.0.0).
    builtin = {"runc": {"runtime_type": RUNC_TYPE, "options": {}}}
    if rules.family == "1.x":
        # go-toml 1.x decodes a table into a NEW map: a `runtimes` table replaces the default handlers, and
        # a handler table replaces the default handler of its name (runtime_type and all).
        runtimes = user if "runtimes" in containerd else builtin
        legacy = _table(containerd, "default_runtime", f"{where}.containerd")
        if legacy.get("runtime_type"):
            # ValidatePluginConfig: the deprecated default_runtime becomes handler "default", and the default
            runtimes = {**runtimes, "default": legacy}
            default = "default"
    else:
        # go-toml 2 decodes into a copy of an existing map entry: runc keeps its type unless a file sets one
        runtimes = copy.deepcopy(builtin)
        for name, rt in user.items():
            if name in runtimes:
                _deep_merge(runtimes[name], rt)
            else:
                runtimes[name] = rt
    if not default:
        raise RuntimeRefused(
            f"{files[0]}: default_runtime_name is empty: containerd's CRI plugin does not load (ValidatePluginConfig)"
        )
    if default not in runtimes:
        raise RuntimeRefused(
            f"{files[0]}: default_runtime_name {default!r} names no handler under {where}.containerd.runtimes: "
            "containerd's CRI plugin does not load (ValidatePluginConfig), so no pod starts"
        )
    cri_systemd = cri.get("systemd_cgroup", False)
    if rules.family == "1.x" and cri_systemd is True and runtimes[default].get("runtime_type") != LINUX_V1_TYPE:
        raise RuntimeRefused(
            f"{files[0]}: {where}.systemd_cgroup = true only works for {LINUX_V1_TYPE}: containerd's CRI plugin does not load "
            "(ValidatePluginConfig); set options.SystemdCgroup on the handler instead"
        )
    handlers = {
        name: _handler(name, rt, f"{where}.containerd.runtimes.{name}", rules, cri_systemd) for name, rt in runtimes.items()
    }
    # CDI (containerd 1.7: the CRI plugin's enable_cdi, default false, pkg/cri/config/config_unix.go; 2.x: the
    # runtime plugin's, default true, internal/cri/config/config_unix.go; cdi_spec_dirs beside it in both)
    enable = (cri["enable_cdi"], f"{where}.enable_cdi") if "enable_cdi" in cri else None
    dirs = cri.get("cdi_spec_dirs")
    return RuntimeConfig(
        "containerd", default, handlers, files, rules=f"{rules.family} merge rules ({rules.label})", effective=digest(doc),
        cdi_enable=enable, cdi_dirs=[str(d) for d in dirs] if isinstance(dirs, list) else None,
    )  # fmt: skip


def _handler(name: str, rt: dict[str, Any], where: str, rules: MergeRules, cri_systemd: Any) -> RuntimeHandler:
    rtype = rt.get("runtime_type", "")
    if not isinstance(rtype, str):
        raise ParseError(f"{where}.runtime_type is not a string")
    if not rtype:
        return RuntimeHandler(
            name,
            "",
            None,
            f"{where}.runtime_type",
            broken=f"handler {name!r} has no runtime_type ({where}): containerd cannot start its pods "
            "(containerd issue 6964: in 1.x a file that sets only a handler's options replaces the whole handler)",
        )
    v2 = rules.family != "1.x"
    if v2 and rtype in (RUNC_V1_TYPE, LINUX_V1_TYPE):
        return RuntimeHandler(
            name,
            rtype,
            None,
            f"{where}.runtime_type",
            broken=f"handler {name!r}: {rtype} was removed in containerd 2.0 (RELEASES.md)",
        )
    if rtype in (RUNC_TYPE, RUNC_V1_TYPE):  # getRuntimeOptionsType: both decode runc's Options
        systemd, source = _systemd_option(rt.get("options", {}), where, rules.family)
        return RuntimeHandler(name, rtype, systemd, source)
    if rtype == LINUX_V1_TYPE:
        if "options" not in rt:  # generateRuntimeOptions: the legacy runtime takes the plugin-wide setting
            if not isinstance(cri_systemd, bool):
                raise ParseError(f"{where}: the CRI plugin's systemd_cgroup is {cri_systemd!r}, not true or false")
            return RuntimeHandler(name, rtype, cri_systemd, "the CRI plugin's systemd_cgroup (legacy runtime without options)")
        systemd, source = _systemd_option(rt["options"], where, rules.family)
        return RuntimeHandler(name, rtype, systemd, source)
    return RuntimeHandler(name, rtype, None, f"{where}.runtime_type {rtype}: not runc, SystemdCgroup does not apply")


def containerd_config(
    main_path: str,
    read: Callable[[str], str | None],
    expand: Callable[[str, str], list[str]],
    release: Span | ContainerdRelease | None,
    cwd: str | None = None,
) -> RuntimeConfig:
    """The effective containerd configuration as the running release reads it. Where the release is not one
    release, under every span of releases it may be (all of them when nothing is known; a minor's when only the
    minor is): `alternatives` holds each result (a config, or why that release would not start), and the primary
    result is the first that parsed."""
    span = release if isinstance(release, Span) else Span.any() if release is None else Span.exact(release.triple)
    if span.release is not None:
        exact = ContainerdRelease(*span.release)
        rules = rules_for(exact)
        how = f"containerd {exact}: {rules.family} merge rules ({rules.label})"
        try:
            rc = containerd_runtime(merge_containerd(main_path, read, expand, rules, cwd))
        except RuntimeRefused as e:
            return RuntimeConfig("containerd", "", {}, [main_path], rules=how, refused=str(e))
        rc.rules = how
        return rc
    every = rules_in(span)
    # The files are loaded once per way of resolving imports (only where relative globs are matched
    # differs between releases), then merged by each span's rules.
    loaded: dict[bool, list[tuple[str, dict]] | ParseError] = {}
    alternatives: dict[str, RuntimeConfig | ParseError] = {}
    for rules in every:
        if rules.glob_from_cwd not in loaded:
            try:
                loaded[rules.glob_from_cwd] = _load_all(main_path, read, expand, rules, cwd)
            except ParseError as e:
                loaded[rules.glob_from_cwd] = e
        docs = loaded[rules.glob_from_cwd]
        try:
            if isinstance(docs, ParseError):
                raise docs
            alternatives[rules.label] = containerd_runtime(merge_docs(docs, rules))
        except ParseError as e:
            alternatives[rules.label] = e
    parsed = [alt for alt in alternatives.values() if isinstance(alt, RuntimeConfig)]
    if not parsed:
        if all(isinstance(e, RuntimeRefused) for e in alternatives.values()):
            first = str(next(iter(alternatives.values())))
            return RuntimeConfig("containerd", "", {}, [main_path], rules="every release refuses these files", refused=first)
        raise ParseError(
            "containerd's release unknown, and no release reads these files: "
            + "; ".join(f"under {label}: {err}" for label, err in alternatives.items())
        )
    primary = copy.copy(parsed[0])
    primary.alternatives = alternatives
    primary.rules = (
        "containerd's release unknown: judged under every release's rules"
        if not span.known
        else f"containerd's release known only as {span}: judged under the rules of each release it may be"
    )
    return primary


def path_glob_match(pattern: str, path: str) -> bool:
    """Go's filepath.Match (path/filepath/match.go), which containerd's filepath.Glob applies per path
    element: '*' and '?' never match '/', '[...]' is a class ('^' negates), '\\' escapes."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j < 0:
                return False  # ErrBadPattern: Glob matches nothing
            body = pattern[i + 1 : j]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.fullmatch("".join(out), path) is not None
    except re.error:
        return False


def _q(plugin_id: str) -> str:
    return f'"{plugin_id}"' if "." in plugin_id else plugin_id


# CRI-O's command line and environment (internal/criocli/criocli.go, the same from v1.28 to v1.36): flags, and
# for each the environment variable urfave/cli reads when the flag is not given; either overrides every file.
CRIO_FLAGS = {  # flag (and its short alias) -> (environment variable, the config key it sets)
    "config": ("CONTAINER_CONFIG", None),
    "c": ("CONTAINER_CONFIG", None),
    "config-dir": ("CONTAINER_CONFIG_DIR", None),
    "d": ("CONTAINER_CONFIG_DIR", None),
    "cgroup-manager": ("CONTAINER_CGROUP_MANAGER", "cgroup_manager"),
    "default-runtime": ("CONTAINER_DEFAULT_RUNTIME", "default_runtime"),
    "runtimes": ("CONTAINER_RUNTIMES", "runtimes"),
}
CRIO_CONFIG, CRIO_CONFIG_DIR = "/etc/crio/crio.conf", "/etc/crio/crio.conf.d"


def crio_command_line(argv: list[str], env: dict[str, str]) -> dict[str, tuple[str | list[str], str]]:
    """What CRI-O's command line and environment set: {"config" | "config_dir" | "cgroup_manager" |
    "default_runtime" | "runtimes": (value, where it came from)}. urfave/cli takes `--name value`, `--name=value`,
    `-c value` and `-c=value`; a flag given wins over its environment variable; `--runtimes` repeats."""
    found: dict[str, tuple[str | list[str], str]] = {}
    runtimes: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if not a.startswith("-") or a in ("-", "--"):
            continue
        name, eq, value = a.lstrip("-").partition("=")
        if name not in CRIO_FLAGS:
            continue
        if not eq:
            if i >= len(argv):
                break
            value = argv[i]
            i += 1
        key = CRIO_FLAGS[name][1] or ("config" if name in ("config", "c") else "config_dir")
        if key == "runtimes":
            runtimes.append(value)
            found["runtimes"] = (list(runtimes), "crio --runtimes")
        else:
            found[key] = (value, f"crio --{name}")
    for name, (var, key) in CRIO_FLAGS.items():
        key = key or ("config" if name in ("config", "c") else "config_dir")
        if key not in found and var in env:
            found[key] = ([env[var]] if key == "runtimes" else env[var], f"crio's environment {var}")
    return found


def crio_default_handler(release: str | None) -> str:
    """The handler CRI-O runs when no file names one: pkg/config/config_linux.go's default is "runc" up to the
    1.30 releases and "crun" from v1.31.0 (git grep of the cri-o tags v1.28.0-v1.30.9 and v1.31.0, v1.32.0; the
    packages' /etc/crio/crio.conf.d/10-crio.conf sets crun from 1.28 on, a file the collector reads like any
    other). An unknown release is taken as the newest."""
    m = re.match(r"v?(\d+)\.(\d+)", release or "")
    if m and (int(m.group(1)), int(m.group(2))) < (1, 31):
        return "runc"
    return "crun"


def crio_runtime(
    docs: list[tuple[str, str]],
    overrides: dict[str, tuple[str | list[str], str]] | None = None,
    release: str | None = None,
) -> RuntimeConfig:
    """CRI-O: its main file, then every file of its drop-in folder in filepath.Walk order (recursive, dotfiles
    too: pkg/config/config.go UpdateFromPath); later files win per key, and the command line or environment
    (`overrides`, crio_command_line) wins over every file. `cgroup_manager` defaults to "systemd"; the default
    handler is the release's (crio_default_handler)."""
    manager = "systemd"
    source = "CRI-O default"
    default_runtime = crio_default_handler(release)
    names: set[str] = set()
    files: list[str] = []
    parsed: list[tuple[str, dict[str, Any]]] = []
    cdi_dirs: list[str] | None = None  # [crio.runtime] cdi_spec_dirs (CRI-O has no switch: CDI is always on)
    for path, text in docs:
        doc = load_toml(text, path)
        files.append(path)
        parsed.append((path, doc))
        runtime = doc.get("crio", {}).get("runtime", {}) if isinstance(doc.get("crio"), dict) else {}
        if not isinstance(runtime, dict):
            raise ParseError(f"{path}: crio.runtime is not a table")
        if "cgroup_manager" in runtime:
            manager = str(runtime["cgroup_manager"])
            source = f"{path} [crio.runtime] cgroup_manager"
        if "default_runtime" in runtime:
            default_runtime = str(runtime["default_runtime"])
        rts = runtime.get("runtimes", {})
        if isinstance(rts, dict):
            names.update(rts)
        if isinstance(runtime.get("cdi_spec_dirs"), list):
            cdi_dirs = [str(d) for d in runtime["cdi_spec_dirs"]]
    o = overrides or {}
    if "cgroup_manager" in o:
        manager, source = str(o["cgroup_manager"][0]), o["cgroup_manager"][1]
    if "default_runtime" in o:
        default_runtime = str(o["default_runtime"][0])
    for spec in o.get("runtimes", ([], ""))[0] if "runtimes" in o else []:
        names.update(x.split(":", 1)[0] for x in str(spec).split(",") if x)  # name:path:root:type:...
    names.add(default_runtime)
    handlers = {n: RuntimeHandler(n, "oci", manager == "systemd", source) for n in sorted(names)}
    flags = {k: v for k, (v, _) in o.items() if k in ("cgroup_manager", "default_runtime", "runtimes")}
    layers: list[Any] = [*parsed, ("command line", flags)] if flags else parsed
    return RuntimeConfig("cri-o", default_runtime, handlers, files, cgroup_manager=manager, effective=digest(layers),
                         cdi_enable=(True, "CRI-O: CDI is always on (no enable switch)"), cdi_dirs=cdi_dirs)  # fmt: skip


DOCKER_CONFIG = "/etc/docker/daemon.json"  # dockerd(8) --config-file's default


def docker_runtime(path: str, text: str | None, exec_opts: list[str], cgroup_version: int) -> RuntimeConfig:
    """Docker behind cri-dockerd: its cgroup driver is the `native.cgroupdriver` exec-opt of daemon.json
    (`"exec-opts": ["native.cgroupdriver=systemd"]`) or of a `--exec-opt` flag (dockerd refuses one set in both:
    daemon/config "the following directives are specified both as a flag and in the configuration file");
    without one, moby's default: systemd on a cgroup v2 host, cgroupfs on v1 (daemon/daemon_unix.go
    getCgroupDriver, since Docker 20.10). Docker's default runtime is runc."""
    opts: list[tuple[str, str]] = [(o, "dockerd --exec-opt") for o in exec_opts]
    if text is not None:
        try:
            doc = json.loads(text) if text.strip() else {}
        except ValueError as e:
            raise ParseError(f"{path}: not JSON ({e}): dockerd does not start with it") from None
        if not isinstance(doc, dict):
            raise ParseError(f"{path}: not a JSON object")
        listed = doc.get("exec-opts", [])
        if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
            raise ParseError(f"{path}: exec-opts is not a list of strings")
        if listed and exec_opts:
            raise RuntimeRefused(f"{path} sets exec-opts and dockerd has --exec-opt: dockerd refuses to start")
        opts += [(o, f"{path} exec-opts") for o in listed]
    driver, source = ("systemd" if cgroup_version == 2 else "cgroupfs"), f"Docker's default on cgroup v{cgroup_version}"
    for opt, where in opts:
        key, _, value = opt.partition("=")
        if key.strip() in ("native.cgroupdriver",):
            driver, source = value.strip(), where
    handler = RuntimeHandler("runc", "io.containerd.runc.v2", driver == "systemd", f"cgroup driver {driver} ({source})")
    files = [path] if text is not None else []
    return RuntimeConfig("docker", "runc", {"runc": handler}, files, cgroup_manager=driver, effective=digest([(path, opts)]))
