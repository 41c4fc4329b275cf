"""What users install: the wheel and the sdist, built from a copy of the source tree and installed into
fresh virtual environments (not editable), then run from a folder outside the repository with nothing
of the source tree on the import path."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_TREES = ("conformance", "suites")  # what the distributions must carry, file for file


def source_files() -> list[str]:
    """The files git would commit (tracked, and new ones it does not ignore), relative to the root."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=True,
        ).stdout  # fmt: skip
        return sorted({f for f in out.decode().split("\0") if f and (ROOT / f).is_file()})
    skip = {".git", ".venv", "__pycache__", "build", "reports", ".hypothesis", ".ruff_cache"}
    return sorted(
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*")
        if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts) and not p.name.endswith((".pyc", ".egg-info"))
    )


def package_files() -> list[str]:
    """Every module and data file below the package trees: each must be in the wheel and the sdist."""
    return [f for f in source_files() if f.split("/", 1)[0] in PACKAGE_TREES]


def build_distributions(work: Path) -> tuple[Path, Path]:
    """`python -m build` on a copy of the source tree (the tree itself gets no build/ or egg-info):
    the sdist, and the wheel built from that sdist, as a release would. Returns (wheel, sdist)."""
    src = work / "src"
    for rel in source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    dist = work / "dist"
    p = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(src)], capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, f"python -m build failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return wheel, sdist


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


def sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as t:
        return {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile() and "/" in m.name}


@dataclass
class Installed:
    """A virtual environment holding one installed distribution."""

    venv: Path
    artifact: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """This machine's environment with the venv first on PATH and nothing that could import the
        source tree (no PYTHONPATH, no PYTHONSAFEPATH games: the working directory is elsewhere)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST_"))}
        env["PATH"] = f"{self.bin}:{env.get('PATH', '/usr/bin:/bin')}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(extra)
        return env

    def conformance(self, *args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / "conformance"), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
            env=self.env(**env),
        )  # fmt: skip

    def package_dir(self) -> Path:
        """Where `import conformance` resolves in this venv (must be its site-packages)."""
        p = subprocess.run(
            [str(self.bin / "python"), "-c", "import conformance, suites; print(conformance.__file__); print(suites.__file__)"],
            capture_output=True, text=True, check=True, cwd="/", env=self.env(),
        )  # fmt: skip
        first = Path(p.stdout.splitlines()[0]).parent
        return first


def install(artifact: Path, venv: Path) -> Installed:
    """A fresh venv with `artifact` installed as users install it (pip, not editable)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    p = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(artifact)],
        capture_output=True, text=True, timeout=900, cwd=venv,
    )  # fmt: skip
    assert p.returncode == 0, f"pip install {artifact.name} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    for earlier in _INSTALLED:
        _share_dependencies(venv, earlier)
    _INSTALLED.append(venv)
    return Installed(venv, artifact)


_INSTALLED: list[Path] = []  # the venvs this session installed
OWN = ("conformance", "suites")  # this project's packages: never shared, each venv keeps what its artifact installed


def _share_dependencies(venv: Path, earlier: Path) -> None:
    """The dependencies pip installed into `venv` that are byte for byte those of `earlier` (another venv of this
    session) become hard links to them: the same files, stored once. Each venv is still a whole, fresh install (pip
    wrote every file first); the wheel's and the sdist's venvs held 236 MB each under /tmp, 200 MB of it the same
    kubernetes, cryptography and pip (issue 60)."""
    for site in venv.glob("lib/python*/site-packages"):
        other = earlier / site.relative_to(venv)
        for folder, dirs, files in os.walk(site):
            rel = Path(folder).relative_to(site)
            if rel == Path("."):
                dirs[:] = [d for d in dirs if d not in OWN and not d.startswith(tuple(f"{o}-" for o in OWN))]
            for name in files:
                mine, theirs = Path(folder) / name, other / rel / name
                try:
                    if mine.is_symlink() or not theirs.is_file() or mine.stat().st_size != theirs.stat().st_size:
                        continue
                    if filecmp.cmp(mine, theirs, shallow=False):
                        tmp = mine.with_name(f".{name}.gnc-link")
                        os.link(theirs, tmp)
                        os.replace(tmp, mine)
                except OSError:
                    continue  # a file kept as pip wrote it
