"""A fake driver root for the GPU probes: the stand-in libraries under the GPU Operator's layout
(/run/nvidia/driver/usr/lib/<arch>-linux-gnu) and their configuration file."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

from tests.standins.build import build

LIB_DIR = f"/run/nvidia/driver/usr/lib/{platform.machine()}-linux-gnu"
CONFIG = "/run/nvidia/driver/fake-gpus.conf"


def standins_available() -> str | None:
    if shutil.which("cc") is None:
        return "building the driver stand-ins needs a C compiler (Debian packages gcc, libc6-dev)"
    return None


def gpu_line(**fields: object) -> str:
    return "gpu\t" + "\t".join(f"{k}={v}" for k, v in fields.items())


KERN_LOG = "/var/log/kern.log"
# A kernel log with no Xid of this boot: every GPU lab node has one, so GPU-XID-EVENTS reads a file of the
# node's own and never the machine's journal or ring buffer.
QUIET_KERN_LOG = (
    "Dec  3 09:00:00 gpu kernel: Linux version 6.1.0-lab (lab@lab) #1 SMP\n"
    "Dec  3 09:00:01 gpu kernel: nvidia: loading out-of-tree module taints kernel.\n"
)


def driver_files(
    built: dict[str, Path],
    config: str,
    *,
    nvml: str | None = "libnvidia-ml.so.1",
    cuda: bool = True,
    kern_log: str = QUIET_KERN_LOG,
) -> dict:
    """Files (absolute node paths -> bytes/str) that make a lab node or a host root look like a GPU node."""
    files: dict[str, str | bytes] = {CONFIG: config, KERN_LOG: kern_log}
    if nvml:
        files[f"{LIB_DIR}/libnvidia-ml.so.1"] = built[nvml].read_bytes()
    if cuda:
        files[f"{LIB_DIR}/libcuda.so.1"] = built["libcuda.so.1"].read_bytes()
    return files


def write_root(root: Path, files: dict) -> None:
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


def build_standins(out: Path) -> dict[str, Path]:
    try:
        return build(out)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"building the driver stand-ins failed: {e.stderr}") from None
