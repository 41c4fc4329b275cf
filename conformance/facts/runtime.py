"""Container runtime configuration: containerd (config v1, v2, v3 with `imports`) and CRI-O."""

from __future__ import annotations

import posixpath
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ParseError

RUNC_TYPE = "io.containerd.runc.v2"
# Where each containerd config version keeps the CRI runtimes table.
_CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


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


def merge_containerd(
    main_path: str,
    read: Callable[[str], str | None],
    expand: Callable[[str], list[str]],
) -> tuple[dict[str, Any], list[str]]:
    """Load containerd's main config and everything its `imports` pull in, as containerd does.

    Imported files are merged over the main file in order; the `plugins` table is merged one
    plugin section at a time and an imported section replaces the whole section of that plugin
    (containerd merges sections, not keys). Relative import paths are relative to the importing
    file's folder; patterns are globs. `read` returns None for a missing file."""
    text = read(main_path)
    if text is None:
        raise ParseError(f"{main_path}: containerd config not found")
    merged = load_toml(text, main_path)
    files = [main_path]
    queue = [(main_path, merged)]
    seen = {main_path}
    while queue:
        path, doc = queue.pop(0)
        imports = doc.get("imports", [])
        if not isinstance(imports, list):
            raise ParseError(f"{path}: imports is not a list of paths")
        for pattern in imports:
            if not isinstance(pattern, str):
                raise ParseError(f"{path}: imports has a non-string entry {pattern!r}")
            if not pattern.startswith("/"):
                pattern = posixpath.join(posixpath.dirname(path), pattern)
            for imported in expand(pattern):
                if imported in seen:
                    continue
                seen.add(imported)
                itext = read(imported)
                if itext is None:
                    continue
                idoc = load_toml(itext, imported)
                files.append(imported)
                _merge_over(merged, idoc)
                queue.append((imported, idoc))
    return merged, files


def _merge_over(base: dict[str, Any], over: dict[str, Any]) -> None:
    for k, v in over.items():
        if k == "plugins" and isinstance(v, dict) and isinstance(base.get("plugins"), dict):
            base["plugins"].update(v)
        elif k != "imports":
            base[k] = v


def containerd_runtime(doc: dict[str, Any], files: list[str]) -> RuntimeConfig:
    version = doc.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version not in _CRI_PLUGIN:
        raise ParseError(f"{files[0]}: unsupported containerd config version {version!r}")
    plugin_id = _CRI_PLUGIN[version]
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
    return RuntimeConfig("containerd", default, handlers, files)


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
