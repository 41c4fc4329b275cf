"""Prepended to every probe (see payload.py): where the NVIDIA driver's libraries are, on a host or
below a host root, and below the GPU Operator's driver root. Kept compatible with python3.6+."""

import ctypes
import os

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib")


def find_library(soname, root=""):
    """(path, CDLL) of the first loadable candidate: the loader's own search (only without a host
    root), then the host root's library folders, then the GPU Operator's (`/run/nvidia/driver`)."""
    roots = [root, root + "/run/nvidia/driver"] if root else ["", "/run/nvidia/driver"]
    paths = [] if root else [soname]
    paths += [r + d + "/" + soname for r in roots for d in LIB_DIRS]
    errors = []
    for path in paths:
        if "/" in path and not os.path.exists(path):
            continue
        try:
            return path, ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise RuntimeError("%s not found or not loadable (%s)" % (soname, "; ".join(errors[-3:]) or "no candidate exists"))
