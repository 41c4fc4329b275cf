"""scripts/gpu-check, as far as this machine allows: the bundle it makes runs with the standard library
alone (python -I -S, from a folder outside the repository), fails clearly without a GPU, measures the
driver stand-ins end to end, reads nvbandwidth's real output (text and JSON), and never presents a
missing independent figure as agreement."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu_standins import CONFIG, build_standins, driver_files, gpu_line, standins_available, write_root

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-check"
SAMPLE = ROOT / "tests" / "samples" / "nvbandwidth.host_to_device_memcpy_ce.v0.8-readme.txt"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # the interpreter without this venv's packages


def load_script():
    """The script as a module, for its parsers."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_script_keeps_to_python_3_9():
    ast.parse(SCRIPT.read_text(), feature_version=(3, 9))


def test_nvbandwidth_text_output_from_its_readme():
    figures = load_script().nvbandwidth_text(SAMPLE.read_text())
    assert figures == [26.03, 25.94, 25.97, 26.00, 26.19, 25.95, 26.00, 25.97]


def test_nvbandwidth_json_output():
    # the layout json_output.cpp writes (v0.7+): values as strings, "N/A" where there is none
    doc = {"nvbandwidth": {"testcases": [
        {"name": "device_to_host_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["1.0"]]},
        {"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["55.1", "N/A"]], "sum": 55.1},
    ]}}  # fmt: skip
    assert load_script().nvbandwidth_json(json.dumps(doc)) == [55.1, None]


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "gnc-gpu-check"
    p = subprocess.run([sys.executable, str(SCRIPT), "--bundle", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in out.iterdir()) == ["gpu-check", "h2d_bandwidth.py", "nvml_facts.py"]
    return out


def run_bundle(bundle: Path, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """As on a fresh GPU machine: the base interpreter, isolated, without site-packages (-I -S)."""
    return subprocess.run(
        [BASE_PYTHON, "-I", "-S", str(bundle / "gpu-check"), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
        env=env or {"PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_without_a_gpu_it_says_so_and_exits_3(bundled, tmp_path):
    p = run_bundle(bundled, tmp_path)
    assert p.returncode == 3 and "no NVIDIA GPU usable here" in p.stderr and "libnvidia-ml.so.1" in p.stderr


@pytest.fixture
def standin_root(tmp_path):
    why = standins_available()
    if why:
        pytest.skip(why)
    built = build_standins(tmp_path / "standins")
    root = tmp_path / "host"
    config = "\n".join([
        gpu_line(uuid="GPU-11111111-2222-3333-4444-555555555555", name="Stand-in H100", bus="00000000:18:00.0", minor=0),
        gpu_line(uuid="GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", name="Stand-in H100", bus="00000000:9A:00.0", minor=1),
        "bw\t0\t0\t2.0", "bw\t1\t0\t2.0", "cpu\t0\t0", "cpu\t1\t0",
    ])  # fmt: skip
    write_root(root, driver_files(built, config + "\n"))
    return root


def test_with_the_driver_stand_ins_and_no_independent_tool_nothing_is_called_agreement(bundled, standin_root, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GNC_FAKE_GPU_CONFIG": str(standin_root / CONFIG.lstrip("/"))}
    p = run_bundle(bundled, tmp_path, "--root", str(standin_root), "--buffer-mib", "2", "--budget-s", "2", env=env)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "no independent figure" in p.stderr and p.stdout.count("independent none: NOT compared") == 2
    assert "GPU0 GPU-11111111-2222-3333-4444-555555555555 00000000:18:00.0: probe node0: " in p.stdout
    # the health fields the GPU health checks judge, from the probe (no nvidia-smi here to set beside them)
    want = "GPU1 health: probe ECC on; uncorrected vol/agg 0/0; remap pending 0 failure 0; NVLink none; fabric 0; persistence 1; "
    assert want + "clock reasons 0x1; nvidia-smi nvidia-smi not available" in p.stdout


def test_with_nvbandwidth_its_figure_stands_beside_the_probes(bundled, standin_root, tmp_path):
    """An nvbandwidth that predates -j (v0.6) prints its README's table: the text is read instead."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvbandwidth"
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" -j "*) echo "unrecognised option \'-j\'" >&2; exit 1;; esac\ncat {SAMPLE}\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "GNC_FAKE_GPU_CONFIG": str(standin_root / CONFIG.lstrip("/"))}
    p = run_bundle(bundled, tmp_path, "--root", str(standin_root), "--buffer-mib", "2", "--budget-s", "2", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "independent 26.03" in p.stdout and "independent 25.94" in p.stdout
    assert json.loads(p.stdout[: p.stdout.index("}") + 1])["independent"] == "nvbandwidth host_to_device_memcpy_ce"


def test_a_dcgm_metric_renamed_by_the_exporters_release_is_served():
    """Issue 51 item 7: dcgm-exporter 4.10 serves DCGM_FI_PROF_PCIE_TX_BYTES as ..._PER_SECOND."""
    from conformance.checks.gpu_rules import served_as
    from conformance.cluster.dcgm import metric_series

    text = (
        "# HELP DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND The rate of data transmitted over the PCIe bus.\n"
        "# TYPE DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND gauge\n"
        'DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND{gpu="0",UUID="GPU-1",Hostname="n"} 1.2e+09\n'
    )
    series = metric_series(text)
    assert served_as("DCGM_FI_PROF_PCIE_TX_BYTES", series) == ("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", 1)
    assert served_as("DCGM_FI_DEV_GPU_UTIL", series) == ("DCGM_FI_DEV_GPU_UTIL", 0)
