"""File rules judge the file a path names, its symlinks followed inside the node's root, with owner names
from the node's own passwd and group files. The kernel decides the expected result: openat2(2) with
RESOLVE_IN_ROOT resolves a path as a process chrooted into the host root would (absolute targets and `..`
stay inside it), and fstat(2) on what it opened gives the mode and owner the rule must see."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_or_skip

SYS_OPENAT2 = 437  # the same number on every architecture (include/uapi/asm-generic/unistd.h)
RESOLVE_IN_ROOT = 0x10  # include/uapi/linux/openat2.h
UID, GID, STRANGER = 4242, 4343, 5555
PATHS = [
    "/etc/gnc/real.conf", "/etc/gnc/abs.conf", "/etc/gnc/rel.conf", "/etc/gnc/chain.conf", "/etc/gnc/escape.conf",
    "/etc/gnc-dir/real.conf", "/etc/gnc-dir/abs.conf", "/etc/gnc/hostname-link", "/etc/gnc/dangling.conf",
    "/etc/gnc/loop1", "/etc/gnc/wide.conf",
]  # fmt: skip


def open_in_root(root: Path, path: str) -> tuple[int, os.stat_result | None, bytes]:
    """(errno, stat, content) of `path` as the kernel resolves it inside `root`."""
    libc = ctypes.CDLL(None, use_errno=True)
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        how = ctypes.create_string_buffer(struct.pack("QQQ", os.O_RDONLY | os.O_CLOEXEC, 0, RESOLVE_IN_ROOT))
        fd = libc.syscall(SYS_OPENAT2, dirfd, path.encode(), how, 24)
        if fd < 0:
            return ctypes.get_errno(), None, b""
        try:
            return 0, os.fstat(fd), os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    finally:
        os.close(dirfd)


@pytest.fixture
def node_root(tmp_path) -> Path:
    require_or_skip(None if os.geteuid() == 0 else "owner names are tested on files chowned to other users: needs root")
    root = tmp_path / "node"
    gnc = root / "etc/gnc"
    gnc.mkdir(parents=True)
    for name, mode, owner in (("real.conf", 0o600, UID), ("wide.conf", 0o644, STRANGER)):
        f = gnc / name
        f.write_text("real=1\n")
        f.chmod(mode)
        os.chown(f, owner, GID)
    (root / "etc/hostname").write_text("real in the node's root\n")
    (root / "etc/hostname").chmod(0o600)
    os.chown(root / "etc/hostname", UID, GID)
    links = {
        "etc/gnc/abs.conf": "/etc/gnc/real.conf",  # absolute: inside the root, not the runner's /etc
        "etc/gnc/rel.conf": "real.conf",
        "etc/gnc/chain.conf": "abs.conf",
        "etc/gnc/escape.conf": "../../../../../../etc/gnc/real.conf",  # `..` stops at the root
        "etc/gnc-dir": "gnc",  # a folder on the way is a link
        "etc/gnc/hostname-link": "/etc/hostname",  # the runner has an /etc/hostname too, owned by root
        "etc/gnc/dangling.conf": "/etc/gnc/not-there",
        "etc/gnc/loop1": "loop2",
        "etc/gnc/loop2": "loop1",
    }
    for link, target in links.items():
        (root / link).symlink_to(target)
    (root / "etc/passwd").write_text(f"root:x:0:0::/root:/bin/sh\nsvc-gpu:x:{UID}:{GID}::/:/bin/false\n")
    (root / "etc/group").write_text(f"root:x:0:\ngpu-admins:x:{GID}:\n")
    return root


def rules(paths: list[str], extra: str = "") -> str:
    out = "checks:\n"
    for i, p in enumerate(paths):
        matcher = f'{{path: {p}, owner: svc-gpu, group: gpu-admins, mode: "0600", contains: real}}'
        out += f"  - {{id: SITE-F{i}, severity: high, title: t, rationale: r, remediation: m, file: {matcher}}}\n"
    return out + extra


def run(root: Path, tmp_path: Path, text: str) -> dict[str, dict]:
    site = tmp_path / "site"
    site.mkdir(parents=True)
    (site / "rules.yaml").write_text(text)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "conformance", "run", "--host-root", str(root), "--checks", str(site),
                        "--output", str(out), "--", "-k", "site"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert (out / "results.json").exists(), p.stdout + p.stderr
    return {r["check"]: r for r in json.loads((out / "results.json").read_text())["results"] if r["check"].startswith("SITE-")}


def kernel_outcome(root: Path, path: str) -> str:
    err, st, content = open_in_root(root, path)
    if err == errno.ELOOP:
        return "error"
    if err == errno.ENOENT:
        return "failed"
    assert err == 0 and st is not None, os.strerror(err)
    ok = stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == UID and st.st_gid == GID and b"real" in content
    return "passed" if ok else "failed"


def test_file_rules_see_what_the_kernel_resolves_inside_the_root(node_root, tmp_path):
    got = run(node_root, tmp_path, rules(PATHS))
    expected = {f"SITE-F{i}": kernel_outcome(node_root, p) for i, p in enumerate(PATHS)}
    assert {c: r["outcome"] for c, r in got.items()} == expected
    # the kernel's answers are the interesting ones: links inside the root pass, the others say why not
    assert list(expected.values()) == ["passed"] * 8 + ["failed", "error", "failed"]
    link = got[f"SITE-F{PATHS.index('/etc/gnc/abs.conf')}"]
    shown = "(a symbolic link to /etc/gnc/real.conf): regular file, mode 0600, owner svc-gpu (4242)"
    assert any(shown in e for e in link["evidence"])
    dangling = got[f"SITE-F{PATHS.index('/etc/gnc/dangling.conf')}"]
    assert dangling["message"] == "/etc/gnc/dangling.conf does not exist (a symbolic link to /etc/gnc/not-there)"
    assert "more than 40 symbolic links" in got[f"SITE-F{PATHS.index('/etc/gnc/loop1')}"]["message"]


def test_owner_names_come_from_the_nodes_own_files(node_root, tmp_path):
    def owner_rule(rid: str, path: str, owner: str) -> str:
        return (
            f"  - {{id: {rid}, severity: high, title: t, rationale: r, remediation: m, file: {{path: {path}, owner: {owner}}}}}\n"
        )

    extra = (
        owner_rule("SITE-BY-NUMBER", "/etc/gnc/wide.conf", "5555")
        + owner_rule("SITE-UNNAMED", "/etc/gnc/wide.conf", "ldap-svc")
        + owner_rule("SITE-OTHER-USER", "/etc/gnc/real.conf", "root")
        + owner_rule("SITE-LOCAL-WANTED", "/etc/gnc/wide.conf", "svc-gpu")
    )
    got = run(node_root, tmp_path, "checks:\n" + extra)
    assert {c: r["outcome"] for c, r in got.items()} == {
        "SITE-BY-NUMBER": "passed",
        "SITE-UNNAMED": "error",  # uid 5555 has no local name and ldap-svc none either: unknown, not a pass
        "SITE-OTHER-USER": "failed",
        "SITE-LOCAL-WANTED": "failed",  # svc-gpu is uid 4242 on the node, the file is 5555's
    }
    assert got["SITE-OTHER-USER"]["message"] == "/etc/gnc/real.conf is owned by owner svc-gpu (4242), expected root"
    assert "write the owner as a number" in got["SITE-UNNAMED"]["message"]
    # without the node's passwd file, a name cannot be checked under a host root
    (node_root / "etc/passwd").unlink()
    got = run(node_root, tmp_path / "again", "checks:\n" + extra)
    assert got["SITE-OTHER-USER"]["outcome"] == "error"
    assert got["SITE-BY-NUMBER"]["outcome"] == "passed"
