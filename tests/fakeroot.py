"""A host filesystem laid out in a temporary folder, for the local transport's `host_root`.

It lets the real collector run (as `sh -s -- ROOT`) without root or namespaces."""

from __future__ import annotations

import os
from pathlib import Path


def make_host_root(
    root: Path,
    kubelet_argv: list[str],
    files: dict[str, str],
    pid: int = 4242,
    comm: str = "kubelet",
    exe: str = "/usr/bin/kubelet",
) -> Path:
    """`comm`/`exe`: the process that holds the kubelet (k3s runs it inside `k3s-server`)."""
    proc = root / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "comm").write_text(comm + "\n")
    (proc / "cmdline").write_bytes(b"\0".join(a.encode() for a in [exe, *kubelet_argv]) + b"\0")
    (root / "kubelet-cwd").mkdir()
    os.symlink("/kubelet-cwd", proc / "cwd")
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (root / "sys" / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)
    return root
