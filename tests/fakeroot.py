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
    # What makes it the node's daemon rather than a process any user could name so (issue 50): it runs as root,
    # in PID 1's namespaces, from an executable only root (here: this test's own user) could write.
    (proc / "status").write_text(f"Name:\t{comm}\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
    # proc(5): the command name in parentheses, then the state; field 22 is the start time in clock ticks after boot
    (proc / "stat").write_text(
        f"{pid} ({comm[:15]}) S 1 {pid} {pid} 0 -1 4194560 1000 0 0 0 50 20 0 0 20 0 12 0 1234 "
        "2000000000 25000 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
    )
    # A namespace is the device and inode its /proc/PID/ns link leads to (namespaces(7): two processes share one
    # when those are equal); here one file per namespace, which each process's link names (relative: inside the root)
    (root / "proc" / "nsfs").mkdir(parents=True, exist_ok=True)
    for p in (proc, root / "proc" / "1"):
        (p / "ns").mkdir(parents=True, exist_ok=True)
        for ns, inode in (("pid", 4026531836), ("mnt", 4026531841)):
            (root / "proc" / "nsfs" / f"{ns}:[{inode}]").touch()
            if not (p / "ns" / ns).is_symlink():
                os.symlink(f"../../nsfs/{ns}:[{inode}]", p / "ns" / ns)
    os.symlink(exe, proc / "exe")
    program = root / exe.lstrip("/")
    program.parent.mkdir(parents=True, exist_ok=True)
    if not program.exists():
        program.write_bytes(b"\x7fELF stand-in\n")
    program.chmod(0o755)
    for folder in (root, *program.parents):  # no folder a user other than this one may write
        if folder == root.parent:
            break
        folder.chmod(folder.stat().st_mode & ~0o022)
    (root / "kubelet-cwd").mkdir()
    os.symlink("/kubelet-cwd", proc / "cwd")
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (root / "sys" / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)
    return root
