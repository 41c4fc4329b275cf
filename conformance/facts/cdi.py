"""CDI (Container Device Interface) specs as a runtime's CDI cache reads them, and the NVIDIA Container Toolkit's
runtime mode.

tags.cncf.io/container-device-interface pkg/cdi: the cache scans its spec folders in order (containerd's and
CRI-O's default `cdi_spec_dirs`: /etc/cdi, then /var/run/cdi), reads only `*.json` and `*.yaml` files, and gives
each spec the priority of its folder (a later folder wins). A device (`KIND=NAME`, KIND `vendor/class`) defined
twice at one priority is a conflict: cache.go refresh() drops it, and a container asking for it fails
("unresolvable CDI devices"). A file that does not parse or validate is left out with its error.

The NVIDIA Container Toolkit writes `nvidia.com/gpu` specs (`nvidia-ctk cdi generate`; from toolkit 1.18 the
nvidia-cdi-refresh service writes /var/run/cdi/nvidia.yaml at boot and on driver changes): one device per GPU
by index and by UUID, and `all`, with the driver's libraries mounted by their versioned names and the
`enable-cuda-compat --host-driver-version=...` hook naming the driver it was generated for."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from conformance.errors import ParseError

SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # the runtimes' default cdi_spec_dirs, lowest priority first
NVIDIA_GPU_KIND = "nvidia.com/gpu"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
# pkg/parser: a vendor is a DNS-like name, a class starts with a letter or digit; names as in ValidateDeviceName
_KIND = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_HOST_DRIVER = re.compile(r"^--host-driver-version=(\S+)$")
_LIBCUDA = re.compile(r"/libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")


@dataclass
class CdiSpec:
    path: str
    kind: str
    devices: list[str]
    driver: str | None  # the NVIDIA driver release the spec was generated for (None: it names none)
    env: dict[str, list[str]] = field(default_factory=dict)  # device name -> its containerEdits.env ("NAME=value")


@dataclass
class CdiRegistry:
    """What the runtime's CDI cache holds: the specs read, every resolvable device (qualified name -> its spec's
    path), the devices dropped as conflicts, and the files left out with why."""

    specs: list[CdiSpec] = field(default_factory=list)
    devices: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    looked_in: tuple[str, ...] = SPEC_DIRS

    def of_kind(self, kind: str) -> list[CdiSpec]:
        return [s for s in self.specs if s.kind == kind]


def parse_spec(text: str, path: str) -> CdiSpec:
    """One spec file (JSON is YAML), validated as the CDI cache validates what it uses. A fleet's nodes carry the
    same generated spec: it is parsed once per run (a copy each, so that no node's facts share a list)."""
    spec = _parse_spec(text, path)
    return CdiSpec(spec.path, spec.kind, list(spec.devices), spec.driver, {k: list(v) for k, v in spec.env.items()})


@functools.lru_cache(maxsize=32)
def _parse_spec(text: str, path: str) -> CdiSpec:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ParseError(f"{path}: not YAML or JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ParseError(f"{path}: not a CDI spec (a mapping with cdiVersion, kind and devices)")
    if not isinstance(doc.get("cdiVersion"), str) or not doc["cdiVersion"]:
        raise ParseError(f"{path}: cdiVersion is missing")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise ParseError(f"{path}: kind {kind!r} is not vendor/class")
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices:
        raise ParseError(f"{path}: no devices (a spec must define at least one)")
    names: list[str] = []
    for i, d in enumerate(devices):
        name = d.get("name") if isinstance(d, dict) else None
        if not isinstance(name, str) or not _DEVICE.match(name):
            raise ParseError(f"{path}: devices[{i}].name {name!r} is not a valid device name")
        if name in names:
            raise ParseError(f"{path}: device {name!r} is defined twice")
        names.append(name)
    env: dict[str, list[str]] = {}
    for d in devices:
        edits = d.get("containerEdits") if isinstance(d.get("containerEdits"), dict) else {}
        values = edits.get("env") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ParseError(f"{path}: device {d['name']!r} containerEdits.env is not a list of NAME=value strings")
        env[d["name"]] = values
    return CdiSpec(path, kind, names, spec_driver(doc), env)


def spec_driver(doc: dict[str, Any]) -> str | None:
    """The driver release an NVIDIA spec was generated for: its enable-cuda-compat hook's --host-driver-version, else
    the release in the name of the libcuda.so it mounts."""
    edits = doc.get("containerEdits") if isinstance(doc.get("containerEdits"), dict) else {}
    for hook in edits.get("hooks") or []:
        for arg in (hook.get("args") or []) if isinstance(hook, dict) else []:
            m = _HOST_DRIVER.match(str(arg))
            if m:
                return m.group(1)
    for mount in edits.get("mounts") or []:
        m = _LIBCUDA.search(str(mount.get("hostPath", ""))) if isinstance(mount, dict) else None
        if m:
            return m.group(1)
    return None


def cdi_registry(files: list[tuple[int, str, str]], looked_in: tuple[str, ...] = SPEC_DIRS) -> CdiRegistry:
    """The cache over (priority, path, text) files in scan order: what resolves, what conflicts, what is left out."""
    reg = CdiRegistry(looked_in=looked_in)
    owner: dict[str, tuple[int, str]] = {}
    for priority, path, text in files:
        if not path.endswith((".json", ".yaml")):
            continue  # the cache reads only these
        try:
            spec = parse_spec(text, path)
        except ParseError as e:
            reg.errors[path] = str(e)
            continue
        reg.specs.append(spec)
        for name in spec.devices:
            qualified = f"{spec.kind}={name}"
            held = owner.get(qualified)
            if held is not None and held[0] > priority:
                continue
            if held is not None and held[0] == priority:
                reg.conflicts.setdefault(qualified, [held[1]]).append(path)
                continue
            owner[qualified] = (priority, path)
    reg.devices = {q: p for q, (_, p) in owner.items() if q not in reg.conflicts}
    return reg


def toolkit_mode(text: str | None, path: str = TOOLKIT_CONFIG) -> tuple[str, str]:
    """(mode, where it was read) of the NVIDIA Container Runtime: `[nvidia-container-runtime] mode` of its config
    (legacy, cdi, csv, auto), "auto" when the file or the key is absent (the toolkit's default)."""
    import tomllib

    if text is None:
        return "auto", f"{path} absent: the toolkit's default mode, auto"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ParseError(f"{path}: not TOML: {e}") from None
    table = doc.get("nvidia-container-runtime")
    mode = table.get("mode") if isinstance(table, dict) else None
    if mode is None:
        return "auto", f"{path}: [nvidia-container-runtime] mode not set (auto)"
    if mode not in ("auto", "legacy", "cdi", "csv"):
        raise ParseError(f"{path}: [nvidia-container-runtime] mode is {mode!r}, not auto, legacy, cdi or csv")
    return str(mode), f"{path}: [nvidia-container-runtime] mode = {mode!r}"
