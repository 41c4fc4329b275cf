"""The audit's own footprint does not grow with what it audits: the processes one collection creates on a node
(counted by the kernel through strace: every fork, vfork and clone that is not a thread) are the same on a quiet
node and on one with 100 times the processes, 48 times the CPUs and 100 times the IRQs; the pod exec's are the
same beside 5 threads and beside 500. Counts, not times: times go to benchmarks/footprint.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from conformance.cluster.pods import INSIDE
from conformance.collection.collect import collector_script
from tests.conftest import require_or_skip
from tests.footprint_node import build_node, measure

pytestmark = pytest.mark.slow  # strace over a node of 5,000 processes

# the system's own programs only (no version manager's shims in front of python3)
PLAIN = {**os.environ, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


@pytest.fixture(scope="module")
def strace():
    require_or_skip(None if shutil.which("strace") else "strace is not installed (apt-get install strace)")


def test_a_collection_creates_as_many_processes_on_a_large_node_as_on_a_quiet_one(strace, tmp_path):
    script = collector_script()
    quiet = measure(script, [str(build_node(tmp_path / "quiet", 50, 8, 20, 8)), "4194304"], tmp_path / "q.trace", PLAIN)
    large = measure(script, [str(build_node(tmp_path / "large", 5000, 384, 2000, 8)), "4194304"], tmp_path / "l.trace", PLAIN)
    # a list longer than the shell encodes itself goes through base64: a few more records on the large node
    assert large.processes <= quiet.processes + 20, (quiet, large)
    assert large.processes <= 150, large  # 5,248 before (one cat per /proc entry)
    assert large.output_bytes > quiet.output_bytes  # it did read the large node


def test_the_pod_exec_creates_no_process_per_thread(strace, tmp_path):
    def beside(threads: int):
        code = (f"import threading, time\nfor _ in range({threads}): threading.Thread(target=time.sleep, args=(120,), "
                "daemon=True).start()\nprint('up', flush=True)\ntime.sleep(120)")  # fmt: skip
        worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None and worker.stdout.readline() == "up\n"  # the event: every thread started
            deadline = time.monotonic() + 60
            while len(os.listdir(f"/proc/{worker.pid}/task")) < threads + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            return measure(INSIDE.encode(), ["OMP_NUM_THREADS", "MKL_NUM_THREADS"], tmp_path / f"{threads}.trace", PLAIN)
        finally:
            worker.kill()
            worker.wait()

    few, many = beside(5), beside(500)
    assert many.processes == few.processes and many.processes <= 10, (few, many)
    assert many.output_bytes > few.output_bytes  # the threads were read
