"""Builds the driver-library stand-ins with the system C compiler (tests and benchmarks use them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).parent


def build(out_dir: Path) -> dict[str, Path]:
    """Compile libnvidia-ml.so.1, its old-driver variant and libcuda.so.1 into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, src, extra in (
        ("libnvidia-ml.so.1", "libnvidia-ml.c", []),
        ("libnvidia-ml-old.so.1", "libnvidia-ml.c", ["-DOLD_DRIVER"]),
        ("libcuda.so.1", "libcuda.c", []),
    ):
        target = out_dir / name
        subprocess.run(
            ["cc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", *extra, "-o", str(target), str(HERE / src)],
            check=True,
            capture_output=True,
            text=True,
        )
        built[name] = target
    return built
