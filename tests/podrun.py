"""Runs the container of a `conformance manifests` pod on a lab node the way the kubelet and runc would:
in the node's PID and network namespaces (hostPID, hostNetwork), in a mount namespace of its own whose
root is an image made of this machine's programs and the installed package (read-only root filesystem),
with the volumes of the pod spec (the node's root at /host, read-only, HostToContainer propagation; an
emptyDir at /tmp), the container's capabilities (all dropped but the added ones), no new privileges,
and its environment (fieldRef spec.nodeName resolved). Its standard output is the pod log."""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.streams import lines_of

IMAGE_DIRS = ("usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32")
IMAGE_ETC = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "hosts", "alternatives")  # awk is one
IMAGE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"  # the python image's PATH


@dataclass
class PodRun:
    log: str
    returncode: int | None  # None: still running when the log was complete (a DaemonSet's pod sleeps on)


def _env(container: dict[str, Any], node: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path == "spec.nodeName", f"unsupported fieldRef {path}"
            env[e["name"]] = node
    return env


def _caps(container: dict[str, Any]) -> str:
    caps = container.get("securityContext", {}).get("capabilities", {})
    assert caps.get("drop") == ["ALL"], "the lab runs containers that drop ALL capabilities"
    return ",".join(["-all", *(f"+{c.lower()}" for c in caps.get("add", []))])


def _mount_script(pod: dict[str, Any], container: dict[str, Any], root: Path, venv: Path, base_prefix: Path) -> list[str]:
    q = shlex.quote
    r = q(str(root))
    volumes = {v["name"]: v for v in pod["volumes"]}
    lines = ["set -e", f"mount -t tmpfs -o mode=755 gnc-image {r}"]
    for m in container["volumeMounts"]:  # the host root first, before the image's own mounts exist below it
        vol = volumes[m["name"]]
        target = q(f"{root}{m['mountPath']}")
        lines.append(f"mkdir -p {target}")
        if "hostPath" in vol:
            lines.append(f"mount --rbind {q(vol['hostPath']['path'])} {target}")
            if m.get("mountPropagation") == "HostToContainer":
                lines.append(f"mount --make-rslave {target}")
            if m.get("readOnly"):
                lines.append(f"mount -o remount,bind,ro {target}")  # the top mount, as the kubelet does by default
        elif "emptyDir" in vol:
            lines.append(f"mount -t tmpfs -o mode=1777 emptydir {target}")
        else:
            raise AssertionError(f"unsupported volume {vol}")
    for d in IMAGE_DIRS:
        if os.path.islink(f"/{d}"):
            lines.append(f"ln -s {q(os.readlink(f'/{d}'))} {r}/{d}")
        elif os.path.isdir(f"/{d}"):
            lines += [f"mkdir {r}/{d}", f"mount --bind /{d} {r}/{d}", f"mount -o remount,bind,ro {r}/{d}"]
    lines.append(f"mkdir -p {r}/etc {r}/proc {r}/sys {r}/dev {r}/root")
    lines += [f"[ -e /etc/{f} ] && cp -a /etc/{f} {r}/etc/{f} || true" for f in IMAGE_ETC]
    for src in (base_prefix, venv):  # the installed package and the interpreter it runs on
        if not any(str(src).startswith(f"/{d}/") for d in IMAGE_DIRS):
            lines += [f"mkdir -p {q(f'{root}{src}')}", f"mount --bind {q(str(src))} {q(f'{root}{src}')}"]
    lines += [
        f"mount -t proc proc {r}/proc",  # hostPID: the node's processes
        f"mount --rbind /sys {r}/sys",
        f"mount --rbind /dev {r}/dev",
        f"mount -o remount,ro {r}",  # readOnlyRootFilesystem
    ]
    return lines


def run_container(
    pod: dict[str, Any], node: str, node_pid: int, venv: Path, scratch: Path, until: str | None, timeout: float = 300
) -> PodRun:
    """Run the pod's only container on the node whose PID 1 is `node_pid`. The log is complete at the
    container's exit, or once `until` appears in it (a DaemonSet's container then sleeps forever and is
    stopped). `scratch` is an empty folder outside the node's layers (the image's mount point)."""
    (container,) = pod["containers"]
    assert pod.get("hostPID") and pod.get("hostNetwork"), "the lab joins the node's PID and network namespaces"
    sc = container.get("securityContext", {})
    assert sc.get("allowPrivilegeEscalation") is False and sc.get("privileged") is False
    base_prefix = Path(os.path.realpath(venv / "bin" / "python")).parent.parent
    lines = _mount_script(pod, container, scratch, venv, base_prefix)
    env = {"PATH": f"{venv / 'bin'}:{IMAGE_PATH}", "HOME": "/root", **_env(container, node)}
    argv = [*container["command"], *container.get("args", [])]
    uid = sc.get("runAsUser", 0)
    inner = [
        "chroot", str(scratch), "/usr/bin/setpriv", "--no-new-privs", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        f"--bounding-set={_caps(container)}", f"--inh-caps={_caps(container)}",
        "/usr/bin/env", "-i", "--chdir=/tmp", *(f"{k}={v}" for k, v in env.items()), *argv,
    ]  # fmt: skip
    lines.append("exec " + " ".join(shlex.quote(a) for a in inner))
    script = "\n".join(lines) + "\n"
    proc = subprocess.Popen(
        ["nsenter", "-t", str(node_pid), "-p", "-n", "-m", "--", "unshare", "--mount", "--propagation", "private",
         "sh", "-c", script],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd="/",
    )  # fmt: skip
    lines_q = lines_of(proc)
    log: list[str] = []
    try:
        while True:
            line = lines_q.get(timeout=timeout)
            if line is None:
                proc.wait(timeout=timeout)
                return PodRun("".join(log), proc.returncode)
            log.append(line)
            if until is not None and until in line:
                return PodRun("".join(log), None)
    except queue.Empty:
        raise AssertionError(f"the container printed no complete log in {timeout} s; stderr: {_stderr(proc)}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.returncode not in (0, 1, -signal.SIGKILL):
            raise AssertionError(f"the container failed ({proc.returncode}): {_stderr(proc)}")


def _stderr(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.stderr is not None
    return proc.stderr.read()[-3000:]
