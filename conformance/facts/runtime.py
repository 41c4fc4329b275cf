"""Container runtime configuration: containerd (config v1, v2, v3 with `imports`) and CRI-O."""

from __future__ import annotations

import copy
import posixpath
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ParseError

RUNC_TYPE = "io.containerd.runc.v2"
CRI_V1, CRI_V2, CRI_V3 = "cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"
# Where each containerd config version keeps the CRI runtimes table (version 4, containerd 2.3, keeps 3's).
_CRI_PLUGIN = {0: CRI_V1, 1: CRI_V1, 2: CRI_V2, 3: CRI_V3, 4: CRI_V3}
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class ContainerdRelease:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_containerd_version(text: str | None) -> ContainerdRelease | None:
    """`containerd --version`: 'containerd containerd.io 1.7.27 05044ec...' or
    'containerd github.com/containerd/containerd/v2 v2.0.0 207ad71...'."""
    for word in (text or "").split()[1:]:
        m = _VERSION.fullmatch(word.split("-")[0].split("+")[0])
        if m:
            return ContainerdRelease(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return None


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


@dataclass
class RuntimeConfig:
    """The runtime's effective cgroup settings, per handler, and the files that made them."""

    runtime: str  # "containerd" or "cri-o"
    default_handler: str
    handlers: dict[str, RuntimeHandler]
    files: list[str] = field(default_factory=list)
    cgroup_manager: str | None = None  # CRI-O: one setting for all handlers
    rules: str | None = None  # containerd: the release whose merge rules were applied, and why


@dataclass
class ContainerdMerge:
    """containerd's effective configuration: the merged document, its CRI runtime plugin id, the files
    in load order, and the release rules that merged them."""

    doc: dict[str, Any]
    plugin_id: str
    files: list[str]
    rules: str


def merge_containerd(
    main_path: str,
    read: Callable[[str], str | None],
    expand: Callable[[str], list[str]],
    release: ContainerdRelease | None = None,
) -> ContainerdMerge:
    """Load containerd's main config and every file its `imports` pull in, in containerd's order
    (breadth first; relative paths against the importing file's folder; globs expanded), and merge
    them the way the running release does. `read` returns None for a missing file.

    containerd 1.x (services/server/config/config.go at v1.7.0, mergeConfig): keys of later files win;
    each plugin section of a later file REPLACES the whole section; config versions 1 and 2 only.
    containerd 2.0-2.2 (cmd/containerd/server/config/config.go at v2.0.0): plugins are deep-merged
    (TestMergingPluginsWithTwoCriRuntimeDropInConfigs: a drop-in with only the nvidia handler keeps
    runc's options); version 0/1 files get plugin ids renamed first; the merged document takes the last
    file's version, and if that is below 3 the whole CRI section is migrated afterwards
    (cmd/containerd/server/server.go New; plugins/cri/runtime/plugin.go ConfigMigration REPLACES the
    io.containerd.cri.v1.runtime section with the old io.containerd.grpc.v1.cri one); versions up to 3.
    containerd 2.3 (v2.3.0 LoadConfigWithPlugins): a drop-in whose version is higher than the root
    file's is refused; every file is migrated to version 4 on its own before the deep merge; version 4
    keeps version 3's CRI runtime path."""
    docs = _load_all(main_path, read, expand)
    files = [p for p, _ in docs]
    first_version = _version_number(docs[0][1], docs[0][0])
    if release is None:
        rules = "1.x" if first_version <= 2 else ("2.0-2.2" if first_version == 3 else "2.3")
        how = f"containerd's version unknown: modelled as {rules} from the main file's config version {first_version}"
    else:
        rules = "1.x" if release.major < 2 else ("2.0-2.2" if (release.major, release.minor) < (2, 3) else "2.3")
        how = f"containerd {release}: {rules} merge rules"
    if rules == "1.x":
        doc, plugin_id = _merge_1x(docs)
    elif rules == "2.0-2.2":
        doc, plugin_id = _merge_20(docs)
    else:
        doc, plugin_id = _merge_23(docs)
    return ContainerdMerge(doc, plugin_id, files, how)


def _load_all(main_path: str, read: Callable[[str], str | None], expand: Callable[[str], list[str]]) -> list[tuple[str, dict]]:
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
            raise ParseError(f"{path}: imported by the containerd config but missing; containerd refuses to start")
        doc = load_toml(text, path)
        out.append((path, doc))
        imports = doc.get("imports", [])
        if not isinstance(imports, list):
            raise ParseError(f"{path}: imports is not a list of paths")
        for pattern in imports:
            if not isinstance(pattern, str):
                raise ParseError(f"{path}: imports has a non-string entry {pattern!r}")
            if not pattern.startswith("/"):
                pattern = posixpath.join(posixpath.dirname(path), pattern)
            pending += expand(pattern) if "*" in pattern else [posixpath.normpath(pattern)]
    return out


def _version_number(doc: dict[str, Any], path: str) -> int:
    v = doc.get("version", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ParseError(f"{path}: containerd config version {v!r} is not a version number")
    return v


def _version(doc: dict[str, Any], path: str, rules: str, highest: int) -> int:
    """The file's config version; one above what these release rules read stops containerd (ValidateVersion)."""
    v = _version_number(doc, path)
    if v > highest:
        raise ParseError(f"{path}: config version {v}: containerd {rules} supports versions up to {highest} and refuses to start")
    return v


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


def _merge_1x(docs: list[tuple[str, dict]]) -> tuple[dict[str, Any], str]:
    merged: dict[str, Any] = {"plugins": {}}
    version = 0
    for path, doc in docs:
        v = _version(doc, path, "1.x", 2)
        version = v or version
        merged["plugins"].update(copy.deepcopy(_plugins(doc, path)))  # whole sections replaced
        _copy_top_level(merged, doc)
    merged["version"] = version or 1
    return merged, _CRI_PLUGIN[merged["version"]]


def _merge_20(docs: list[tuple[str, dict]]) -> tuple[dict[str, Any], str]:
    merged: dict[str, Any] = {"plugins": {}}
    version = 3  # the default config's version, overridden by every file that sets one
    for path, doc in docs:
        v = _version(doc, path, "2.0-2.2", 3)
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


def _merge_23(docs: list[tuple[str, dict]]) -> tuple[dict[str, Any], str]:
    merged: dict[str, Any] = {"plugins": {}}
    root = 0
    for path, doc in docs:
        v = _version(doc, path, "2.3", 4)
        root = root or v
        if v > root:
            raise ParseError(
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


def containerd_runtime(merge: ContainerdMerge) -> RuntimeConfig:
    doc, files, plugin_id = merge.doc, merge.files, merge.plugin_id
    plugins = doc.get("plugins", {})
    if not isinstance(plugins, dict):
        raise ParseError(f"{files[0]}: plugins is not a table")
    cri = plugins.get(plugin_id, {})
    if not isinstance(cri, dict):
        raise ParseError(f"{files[0]}: plugins.{_q(plugin_id)} is not a table")
    containerd = cri.get("containerd", {})
    if not isinstance(containerd, dict):
        raise ParseError(f"{files[0]}: plugins.{plugin_id}.containerd is not a table")
    default = containerd.get("default_runtime_name", "runc")
    if not isinstance(default, str):
        raise ParseError(f"{files[0]}: default_runtime_name is not a string")
    runtimes = containerd.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ParseError(f"{files[0]}: plugins.{plugin_id}.containerd.runtimes is not a table")
    handlers: dict[str, RuntimeHandler] = {}
    for name, rt in runtimes.items():
        if not isinstance(rt, dict):
            raise ParseError(f"{files[0]}: runtimes.{name} is not a table")
        rtype = rt.get("runtime_type", RUNC_TYPE)
        if not isinstance(rtype, str):
            raise ParseError(f"{files[0]}: runtimes.{name}.runtime_type is not a string")
        options = rt.get("options", {})
        systemd = None
        if rtype == RUNC_TYPE:
            if not isinstance(options, dict):
                raise ParseError(f"{files[0]}: runtimes.{name}.options is not a table")
            systemd = options.get("SystemdCgroup", False)
            if not isinstance(systemd, bool):
                raise ParseError(f"{files[0]}: runtimes.{name}.options.SystemdCgroup is {systemd!r}, not true or false")
        handlers[name] = RuntimeHandler(
            name,
            rtype,
            systemd,
            f"plugins.{_q(plugin_id)}.containerd.runtimes.{name}.options.SystemdCgroup",
        )
    if default not in handlers:
        # containerd's built-in runc handler, with SystemdCgroup at its default (false).
        handlers[default] = RuntimeHandler(default, RUNC_TYPE, False, f"built-in default for handler {default!r}")
    return RuntimeConfig("containerd", default, handlers, files, rules=merge.rules)


def _q(plugin_id: str) -> str:
    return f'"{plugin_id}"' if "." in plugin_id else plugin_id


def crio_runtime(docs: list[tuple[str, str]]) -> RuntimeConfig:
    """CRI-O: `/etc/crio/crio.conf` then `crio.conf.d/*` in name order; later files win per key.

    `cgroup_manager` defaults to "systemd" in CRI-O."""
    manager = "systemd"
    source = "CRI-O default"
    default_runtime = "crun"
    names: set[str] = set()
    files: list[str] = []
    for path, text in docs:
        doc = load_toml(text, path)
        files.append(path)
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
    names.add(default_runtime)
    handlers = {n: RuntimeHandler(n, "oci", manager == "systemd", source) for n in sorted(names)}
    return RuntimeConfig("cri-o", default_runtime, handlers, files, cgroup_manager=manager)
