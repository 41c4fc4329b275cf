"""Issue 59 items 1 and 2: the collector runs programs only from PATH folders whose new files no user but root could
put there, checked as named and with their links resolved, and looks programs up only through the resolved folders.

A user (uid 65534) plants a `uname` that records that it ran:
- in a world-writable sticky folder on root's PATH (mode 1777, as /tmp): the sticky bit stops a user from replacing
  another's file, not from adding one of their own, which is what a PATH lookup runs;
- behind a root-owned link on root's PATH whose target lies in a folder the user owns (the user can rename the
  target's folder and put another in its place after any check of the link as named).
The collector must drop both, say so (`path-dropped`), and run the system's uname."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conformance.collection.bundle import parse_wire
from conformance.collection.collect import collector_script
from tests.conftest import require_or_skip

NOBODY = 65534
PLANT = '#!/bin/sh\necho "$0 $*" >> {marker}\necho 9.9.9-planted\n'


def plant(folder: Path, marker: Path) -> None:
    uname = folder / "uname"
    uname.write_text(PLANT.format(marker=marker))
    uname.chmod(0o755)
    os.chown(uname, NOBODY, NOBODY)


def test_a_sticky_world_writable_path_folder_and_a_link_into_a_users_tree_are_dropped(tmp_path):
    require_or_skip(None if os.geteuid() == 0 else "the test plants a file owned by another user: it needs root")
    tmp_path.chmod(0o755)
    marker = tmp_path / "ran"
    marker.touch()
    marker.chmod(0o666)
    sticky = tmp_path / "stk"
    sticky.mkdir()
    sticky.chmod(0o1777)  # owned by root, as /tmp
    plant(sticky, marker)
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    os.chown(home, NOBODY, NOBODY)  # the user may rename bin and put any folder in its place
    plant(home / "bin", marker)
    link = tmp_path / "tools"
    link.symlink_to(home / "bin")  # the link itself is root's
    path = f"{sticky}:{link}:/usr/sbin:/usr/bin:/sbin:/bin"
    out = subprocess.run(["sh", "-s", "--", "", "4194304"], input=collector_script(), capture_output=True, timeout=300,
                         env={"PATH": path, "LC_ALL": "C"}, check=False)  # fmt: skip
    b = parse_wire("node", out.stdout, 4194304)
    assert b.complete, out.stderr[-2000:]
    dropped = b.meta("path-dropped").data.decode()
    assert f"{sticky}\n" in dropped, dropped
    assert f"{link} (resolved: {home / 'bin'})" in dropped, dropped
    assert marker.read_text() == "", f"a planted program ran as root: {marker.read_text()}"
    assert "planted" not in b.command("uname").data.decode()
    assert b.command("uname").data.decode().strip() == os.uname().release


def test_root_only_folders_stay_on_path_as_resolved(tmp_path):
    """A link root made to a root-only folder is kept, and programs are looked up in the folder it resolves to."""
    require_or_skip(None if os.geteuid() == 0 else "needs root (the folders must be root's)")
    tmp_path.chmod(0o755)
    link = tmp_path / "usrbin"
    link.symlink_to("/usr/bin")
    out = subprocess.run(["sh", "-s", "--", "", "4194304"], input=collector_script(), capture_output=True, timeout=300,
                         env={"PATH": f"{link}:/bin", "LC_ALL": "C"}, check=False)  # fmt: skip
    b = parse_wire("node", out.stdout, 4194304)
    assert b.complete and b.meta("path-dropped").data == b"", (b.meta("path-dropped"), out.stderr[-1000:])
