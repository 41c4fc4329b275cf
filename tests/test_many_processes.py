"""Issue 53.16: the collector finds the daemons however many processes a node runs. Every /proc/N/comm on one
head command line exceeds the kernel's argument limit (ARG_MAX, a quarter of the stack limit) on a node with
very many processes, and head then does not start: no daemon is found. The test lowers the stack limit so that
5,000 processes of a host root are past it, as 200,000 are at the default 8 MiB stack."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conformance.collection.bundle import parse_wire
from conformance.collection.collect import collector_script
from tests.fakeroot import make_host_root

PROCESSES = 5000


def test_the_kubelet_is_found_beyond_the_argument_limit(tmp_path: Path):
    host = make_host_root(tmp_path / "h" / ("deep-" * 8) / "root", ["--config=/etc/k.yaml"], {"/etc/k.yaml": "{}\n"}, pid=99999)
    for pid in range(2, PROCESSES + 2):  # the kubelet comes last in every listing
        d = host / "proc" / str(pid)
        d.mkdir()
        (d / "comm").write_text("bash\n")
    # every absolute /proc/N/comm of this root together is past the limit a 512 KiB stack gives (128 KiB)
    paths = sum(len(f"{host}/proc/{p}/comm") + 9 for p in range(2, PROCESSES + 2))
    assert paths > 128 * 1024
    script = 'ulimit -s 512 && exec sh -s -- "$0" 4194304'
    out = subprocess.run(["sh", "-c", script, str(host)], input=collector_script(), capture_output=True, timeout=300,
                         env={**os.environ, "LC_ALL": "C"})  # fmt: skip
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-1500:]
    b = parse_wire("many", out.stdout, 4194304)
    assert b.processes("kubelet") == [99999]
    assert [d.trusted for d in b.daemons("kubelet")] == [True]
