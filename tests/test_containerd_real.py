"""RUNTIME-SYSTEMD-CGROUP against the real containerd (Debian ships 1.6.20; .ci/run installs it).

Each case is a set of config files from a real installer or a known trap. The real binary's
`containerd -c FILE config dump` loads and merges them exactly as that release's daemon does (LoadConfig,
resolveImports, mergeConfig, then each plugin's Decode) and prints the CRI plugin's config as the plugin
sees it: which handlers exist, their runtime_type and options. The expected verdict is derived from that
dump here, in the test, and the suite's own model (conformance/facts/runtime.py), given the release the
real binary's `--version` prints, must agree on every handler and on the verdict.

What the dump cannot show is taken from containerd's source at the same release, cited where used:
ValidatePluginConfig (pkg/cri/config/config.go: the CRI plugin does not load when the default handler is
missing, or systemd_cgroup is set for a non-legacy default), and how runc's options are decoded from a
handler's options (pkg/cri/server/helpers.go generateRuntimeOptions, with go-toml 1.9.5's valueFromTree
key order: SystemdCgroup, systemdcgroup, SYSTEMDCGROUP, systemdCgroup)."""

from __future__ import annotations

import glob as pyglob
import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.checks.runtime_rules import handler_problems
from conformance.errors import ParseError
from conformance.facts.runtime import RuntimeConfig, containerd_config, parse_containerd_version
from tests.conftest import require_or_skip

pytestmark = pytest.mark.slow  # the real containerd decides

CONTAINERD = shutil.which("containerd")
SAMPLES = Path(__file__).parent / "samples"
GPU_HANDLERS = ["nvidia"]
CRI = "io.containerd.grpc.v1.cri"
P = f'plugins."{CRI}".containerd.runtimes'
RUNC_TYPES = ("io.containerd.runc.v1", "io.containerd.runc.v2")


@pytest.fixture(scope="module")
def containerd() -> str:
    require_or_skip(None if CONTAINERD else "the real containerd binary is not installed (apt-get install containerd)")
    assert CONTAINERD is not None
    return CONTAINERD


@pytest.fixture(scope="module")
def default_config(containerd) -> str:
    """`containerd config default`, the file most installers start from (kubeadm's container runtime docs:
    generate it, then set SystemdCgroup = true)."""
    return subprocess.run([containerd, "config", "default"], capture_output=True, text=True, check=True).stdout


@dataclass
class Case:
    files: dict[str, str]  # path under the case's root -> text; "{root}" in a text is that root
    why: str
    cwd: str | None = None  # the daemon's working directory, under the root (None: the root itself)
    main: str = "etc/containerd/config.toml"
    extra: dict[str, str] = field(default_factory=dict)


def _handler(name: str, rtype: str | None, options: dict[str, object] | None = None) -> str:
    text = f"[{P}.{name}]\n"
    if rtype is not None:
        text += f'  runtime_type = "{rtype}"\n'
    if options is not None:
        text += f"[{P}.{name}.options]\n" + "".join(f"  {k} = {_toml(v)}\n" for k, v in options.items())
    return text


def _toml(v: object) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else f'"{v}"'


RUNC_SYSTEMD = _handler("runc", "io.containerd.runc.v2", {"SystemdCgroup": True})
NVIDIA_TOOLKIT = _handler(
    "nvidia", "io.containerd.runc.v2", {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
)

# kubespray roles/container-engine/containerd/templates/config.toml.j2 rendered with its default
# containerd_runc_runtime (options systemdCgroup / binaryName, first letter lower case).
KUBESPRAY = f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0
[plugins]
  [plugins."{CRI}"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."{CRI}".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"
      [plugins."{CRI}".containerd.runtimes]
        [{P}.runc]
          runtime_type = "io.containerd.runc.v2"
          runtime_engine = ""
          runtime_root = ""
          base_runtime_spec = "/etc/containerd/cri-base.json"
          [{P}.runc.options]
            systemdCgroup = true
            binaryName = "/usr/local/bin/runc"
"""

# k3s pkg/agent/templates/templates_linux.go ContainerdConfigTemplate rendered with SystemdCgroup = true and the
# nvidia runtime k3s finds on the node: its ExtraRuntimes get runtime_type and BinaryName only.
K3S = f"""version = 2
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/rancher/k3s/agent/containerd"
[plugins."{CRI}"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "10010"
  enable_selinux = false
  sandbox_image = "rancher/mirrored-pause:3.6"
[plugins."{CRI}".containerd]
  snapshotter = "overlayfs"
  disable_snapshot_annotations = true
[{P}.runc]
  runtime_type = "io.containerd.runc.v2"
[{P}.runc.options]
  SystemdCgroup = true
[{P}."nvidia"]
  runtime_type = "io.containerd.runc.v2"
[{P}."nvidia".options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""

MAIN = "etc/containerd/config.toml"
DROP_IN = "etc/containerd/conf.d/99-nvidia.toml"


def cases(default_config: str) -> dict[str, Case]:
    sed = default_config.replace("SystemdCgroup = false", "SystemdCgroup = true")
    glob_main = 'version = 2\nimports = ["conf.d/*.toml"]\n' + RUNC_SYSTEMD
    glob_files = {
        MAIN: glob_main,
        "etc/containerd/conf.d/50-cgroupfs.toml": "version = 2\n" + RUNC_SYSTEMD.replace("true", "false"),
    }
    return {
        "config-default-sed": Case({MAIN: sed}, "containerd config default, SystemdCgroup set to true (kubeadm docs)"),
        "config-default": Case({MAIN: default_config}, "containerd config default as it is: cgroupfs"),
        "docs-1x-snippet": Case(
            {MAIN: (SAMPLES / "containerd.config.v2.systemdcgroup.containerd-docs.toml").read_text()},
            "only runc's options: 1.x decodes the handler anew, without runtime_type (containerd issue 6964)",
        ),
        "docs-2x-snippet-v3": Case(
            {MAIN: (SAMPLES / "containerd.config.v3.systemdcgroup.containerd-docs.toml").read_text()},
            "a version 3 file: 1.6 has no io.containerd.cri.v1.runtime plugin, its CRI defaults apply",
        ),
        "kubespray": Case({MAIN: KUBESPRAY}, "kubespray writes systemdCgroup: go-toml 1.x matches it"),
        "k3s-nvidia": Case({MAIN: K3S}, "k3s's nvidia handler has no SystemdCgroup"),
        "nvidia-toolkit-drop-in": Case(
            {
                MAIN: 'version = 2\nimports = ["{root}/etc/containerd/conf.d/*.toml"]\n' + RUNC_SYSTEMD,
                DROP_IN: f'version = 2\n[plugins."{CRI}".containerd]\n  default_runtime_name = "nvidia"\n' + NVIDIA_TOOLKIT,
            },
            "the toolkit's drop-in replaces the CRI section in 1.x; nvidia is the default",
        ),
        "hidden-drop-in": Case(
            {
                MAIN: 'version = 2\nimports = ["{root}/etc/containerd/conf.d/*.toml"]\n' + RUNC_SYSTEMD,
                "etc/containerd/conf.d/.99-cgroupfs.toml": "version = 2\n" + RUNC_SYSTEMD.replace("true", "false"),
            },
            "Go's filepath.Glob matches a dot file with '*': the hidden drop-in is imported and runc is on cgroupfs",
        ),
        "options-only-import": Case(
            {
                MAIN: 'version = 2\nimports = ["{root}/etc/containerd/conf.d/*.toml"]\n' + RUNC_SYSTEMD,
                DROP_IN: f"version = 2\n[{P}.runc.options]\n  SystemdCgroup = true\n",
            },
            "an import that sets only runc's options: runc loses its runtime_type (containerd issue 6964)",
        ),
        "runc-v1-default-option": Case(
            {MAIN: "version = 2\n" + _handler("runc", "io.containerd.runc.v1", {"BinaryName": "/usr/sbin/runc"})},
            "io.containerd.runc.v1 decodes runc's options too: SystemdCgroup defaults to false",
        ),
        "runc-v1-systemd": Case(
            {MAIN: "version = 2\n" + _handler("runc", "io.containerd.runc.v1", {"SystemdCgroup": True})}, "runc.v1 with systemd"
        ),
        "relative-glob-cwd-root": Case(
            dict(glob_files), "a relative glob matched against the daemon's working directory: not this folder", cwd=""
        ),
        "relative-glob-cwd-config-folder": Case(
            dict(glob_files), "the daemon runs in the config folder: the relative glob finds the drop-in", cwd="etc/containerd"
        ),
        "relative-literal-import": Case(
            {
                MAIN: 'version = 2\nimports = ["conf.d/50-cgroupfs.toml"]\n' + RUNC_SYSTEMD,
                "etc/containerd/conf.d/50-cgroupfs.toml": "version = 2\n" + RUNC_SYSTEMD.replace("true", "false"),
            },
            "a relative path (no glob) is joined with the file's folder",
        ),
        "empty-import": Case(
            {
                MAIN: 'version = 2\nimports = ["{root}/etc/containerd/conf.d/*.toml"]\n' + RUNC_SYSTEMD,
                DROP_IN: "",
            },
            "an empty imported file is a valid config that sets nothing (tests/unknown_variants.py relies on this)",
        ),
        "missing-literal-import": Case(
            {MAIN: 'version = 2\nimports = ["conf.d/absent.toml"]\n' + RUNC_SYSTEMD},
            "an import without '*' that does not exist: containerd stops (failed to load TOML)",
        ),
        "default-handler-missing": Case(
            {MAIN: f'version = 2\n[plugins."{CRI}".containerd]\n  default_runtime_name = "nvidia"\n' + RUNC_SYSTEMD},
            "default_runtime_name names no handler: the CRI plugin does not load",
        ),
        "empty-runtimes-table": Case(
            {MAIN: f'version = 2\n[plugins."{CRI}".containerd.runtimes]\n'}, "an empty runtimes table replaces runc"
        ),
        "v1-plugin-key-in-v2": Case(
            {MAIN: 'version = 2\n[plugins.cri.containerd]\n  default_runtime_name = "runc"\n'},
            "a version 1 plugin id in a version 2 file: containerd refuses to start",
        ),
        "version-1-file": Case(
            {
                MAIN: '[plugins.cri.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
                "[plugins.cri.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
            },
            "a version 1 file names the CRI plugin 'cri'",
        ),
        "lower-case-key": Case(
            {MAIN: "version = 2\n" + _handler("runc", "io.containerd.runc.v2", {"systemdcgroup": True})},
            "go-toml 1.x also tries the all-lower-case key",
        ),
        "odd-case-key": Case(
            {MAIN: "version = 2\n" + _handler("runc", "io.containerd.runc.v2", {"Systemdcgroup": True})},
            "a spelling go-toml 1.x does not try: runc stays on cgroupfs",
        ),
        "plugin-wide-systemd-cgroup": Case(
            {MAIN: f'version = 2\n[plugins."{CRI}"]\n  systemd_cgroup = true\n' + RUNC_SYSTEMD},
            "systemd_cgroup only works for io.containerd.runtime.v1.linux: the CRI plugin does not load",
        ),
    }


def write(case: Case, root: Path) -> None:
    for rel, text in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{root}", str(root)))


def dump(containerd: str, root: Path, case: Case) -> dict | None:
    """The real containerd's effective config, or None when it would not start."""
    cwd = root / (case.cwd or "")
    got = subprocess.run([containerd, "-c", str(root / case.main), "config", "dump"], capture_output=True, text=True, cwd=cwd)
    return tomllib.loads(got.stdout) if got.returncode == 0 else None


def _systemd_go_toml_v1(options: dict) -> bool:
    for key in ("SystemdCgroup", "systemdcgroup", "SYSTEMDCGROUP", "systemdCgroup"):
        if key in options:
            return bool(options[key])
    return False


def expected(effective: dict | None) -> dict[str, object] | str:
    """Per handler: 'broken', or SystemdCgroup (None: not runc); or 'refused' when the CRI plugin would not run."""
    if effective is None:
        return "refused"
    cri = effective["plugins"][CRI]
    default = cri["containerd"]["default_runtime_name"]
    runtimes = cri["containerd"].get("runtimes", {})
    if default not in runtimes:  # ValidatePluginConfig
        return "refused"
    if cri.get("systemd_cgroup") and runtimes[default]["runtime_type"] != "io.containerd.runtime.v1.linux":
        return "refused"  # ValidatePluginConfig: systemd_cgroup only works for the legacy runtime
    out: dict[str, object] = {"default": default}
    for name, rt in runtimes.items():
        rtype = rt.get("runtime_type", "")
        out[name] = "broken" if not rtype else (_systemd_go_toml_v1(rt.get("options", {})) if rtype in RUNC_TYPES else None)
    return out


def modelled(rc: RuntimeConfig) -> dict[str, object] | str:
    if rc.refused:
        return "refused"
    out: dict[str, object] = {"default": rc.default_handler}
    for name, h in rc.handlers.items():
        out[name] = "broken" if h.broken else h.systemd_cgroup
    return out


def verdict(handlers: dict[str, object] | str) -> str:
    if isinstance(handlers, str):
        return "fails"
    wanted = [handlers["default"], *(h for h in GPU_HANDLERS if h in handlers)]
    return "passes" if all(handlers[h] is True for h in wanted) else "fails"


@pytest.fixture(scope="module")
def release(containerd):
    text = subprocess.run([containerd, "--version"], capture_output=True, text=True, check=True).stdout
    got = parse_containerd_version(text)
    assert got is not None, f"the real binary's --version is not parsed: {text!r}"
    return got


def test_the_real_binarys_version_is_parsed(release, containerd):
    text = subprocess.run([containerd, "--version"], capture_output=True, text=True, check=True).stdout
    assert str(release) in text.split()[2]  # the package's version word, e.g. Debian's "1.6.20~ds1"


def test_every_case_judged_as_the_real_containerd_reads_it(containerd, default_config, release, tmp_path):
    assert release.major == 1, "these cases are written for the 1.x binary Debian ships"
    report = []
    for name, case in cases(default_config).items():
        root = tmp_path / name
        write(case, root)
        want = expected(dump(containerd, root, case))

        def read(path: str) -> str | None:
            try:
                return Path(path).read_text()
            except (FileNotFoundError, IsADirectoryError):
                return None

        def expand(importer: str, pattern: str) -> list[str]:
            return sorted(pyglob.glob(pattern, include_hidden=True))  # Go's Glob matches dot files too

        cwd = str(root / (case.cwd or ""))
        try:
            rc = containerd_config(str(root / case.main), read, expand, release, os.path.normpath(cwd))
            got: dict[str, object] | str = modelled(rc)
            suite = "passes" if not handler_problems(rc, GPU_HANDLERS) else "fails"
        except ParseError as e:
            got, suite = "refused", f"fails ({e})"
        if got != want or suite.split()[0] != verdict(want):
            report.append(f"{name} ({case.why}): containerd {release} reads {want} ({verdict(want)}); the suite {got} ({suite})")
    assert not report, "\n".join(report)


def test_the_cases_cover_both_verdicts(containerd, default_config, tmp_path):
    """The real program decides each case; make sure the set still holds passes, failures and refusals."""
    seen = set()
    for name, case in cases(default_config).items():
        root = tmp_path / name
        write(case, root)
        want = expected(dump(containerd, root, case))
        seen.add("refused" if want == "refused" else verdict(want))
        if name == "relative-glob-cwd-root":
            assert verdict(want) == "passes", "the daemon's working directory decides a relative glob in 1.6"
        if name == "relative-glob-cwd-config-folder":
            assert verdict(want) == "fails"
    assert seen == {"passes", "fails", "refused"}
