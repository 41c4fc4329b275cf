"""Prepended to every probe (see payload.py): where the NVIDIA driver's libraries are, on a host or
below a host root, and below the GPU Operator's driver root. Kept compatible with python3.6+."""

import ctypes
import os

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib")


def root_only(path, root=""):
    """None when no user but root (or this process's own user) could have written `path`: the file and every
    folder above it up to `root`, as named and once its links are resolved, are theirs and writable by no one
    else (a sticky folder such as /tmp aside: there only an entry's owner may replace it); else why not. A library is code:
    one a node's user could replace is never loaded by the audit (issue 50)."""
    me = os.geteuid()
    top = os.path.realpath(root) if root else "/"
    for named in (path, os.path.realpath(path)):
        p = named
        while True:
            try:
                st = os.stat(p)
            except OSError as e:
                return "%s: %s" % (p, e.strerror)
            sticky = st.st_mode & 0o1000 and os.path.isdir(p)  # /tmp: only an entry's owner may replace it
            if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not sticky):
                return "%s can be written by a user other than root (owner uid %d, mode %o)" % (p, st.st_uid, st.st_mode & 0o7777)
            if p in ("/", top) or not p.startswith(top):
                break
            p = os.path.dirname(p)
    return None


def find_library(soname, root=""):
    """(path, CDLL) of the first loadable candidate: the loader's own search (only without a host
    root; the loader's cache and folders are root's), then the host root's library folders, then the GPU
    Operator's (`/run/nvidia/driver`); a file that a user other than root could have written is skipped."""
    roots = [root, root + "/run/nvidia/driver"] if root else ["", "/run/nvidia/driver"]
    paths = [] if root else [soname]
    paths += [r + d + "/" + soname for r in roots for d in LIB_DIRS]
    errors = []
    for path in paths:
        if "/" in path and not os.path.exists(path):
            continue
        why = root_only(path, root) if "/" in path else None
        if why:
            errors.append("%s: not loaded, %s" % (path, why))
            continue
        try:
            return path, ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise RuntimeError("%s not found or not loadable (%s)" % (soname, "; ".join(errors[-3:]) or "no candidate exists"))
