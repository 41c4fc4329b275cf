"""The collector's own base64 encoder (b64s in collector.sh), run by the node shells it supports: every text it
prints must be exactly what Python's base64 (RFC 4648, padded, one line) makes of it, whichever shell runs it, and
only short printable texts may stay in the shell; longer ones and any other bytes go to the base64 program
(issue 60: a 1,600-character text cost dash 0.83 s and bash 2.2 s of CPU in the shell's encoder)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_or_skip

COLLECTOR = Path(__file__).resolve().parents[1] / "conformance" / "collection" / "collector.sh"
SHELLS = {"dash": ["dash"], "bash": ["bash"], "busybox sh": ["busybox", "sh"]}
PRINTABLE = "\t\n" + "".join(chr(c) for c in range(32, 127))


def encoder() -> tuple[str, int]:
    """The collector's encoder as it ships (from its B64_SHORT= line to the end of b64s) and the longest B64_SHORT
    it sets for any shell."""
    text = COLLECTOR.read_text()
    start = text.index("\nB64_SHORT=")
    end = text.index("\n}\n", text.index("\nb64s() {")) + 3
    shorts = [int(n) for n in re.findall(r"B64_SHORT=(\d+)$", text, re.M)]
    assert shorts, "collector.sh sets no B64_SHORT"
    return text[start:end], max(shorts)


def texts(short: int) -> list[str]:
    mixed = "".join(PRINTABLE[(i * 7) % len(PRINTABLE)] for i in range(3000))
    return [
        "",
        *PRINTABLE,  # every character the shell encodes, alone (1 byte: two '=' of padding)
        *(mixed[:n] for n in range(1, short + 4)),  # every padding, up to and past the shell's limit
        "0" * short,
        "0" * (short + 1),
        "/etc/cdi/nvidia.yaml\n/var/run/cdi/gpu.json",
        "caf\u00e9",  # not ASCII: the program's
        "a\x01b",  # a control character: the program's
        mixed,  # long: the program's
    ]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shells_encoder_prints_what_base64_prints_and_leaves_long_texts_to_the_program(shell, tmp_path):
    argv = SHELLS[shell]
    require_or_skip(None if shutil.which(argv[0]) else f"{argv[0]} is not installed (apt-get install {argv[0]})")
    block, longest = encoder()
    calls = tmp_path / "calls"
    script = (
        "LC_ALL=C; export LC_ALL; set -f\nNL='\n'\nIFS=$NL\n"
        f"B64=logged B64_ARG=-w0\nlogged() {{ echo x >> '{calls}'; base64 \"$1\"; }}\n"
        f"{block}\n"
        'echo "$B64_SHORT"; for t in "$@"; do b64s "$t"; echo; done\n'
    )
    cases = texts(longest)
    out = subprocess.run([*argv, "-c", script, "encoder", *cases], capture_output=True, timeout=300, check=True)
    first, *lines = out.stdout.decode().split("\n")[:-1]
    short = int(first)  # this shell's limit
    assert len(lines) == len(cases), out.stderr.decode()
    for text, line in zip(cases, lines, strict=True):
        assert line == base64.b64encode(text.encode()).decode(), f"{shell} encoded {text!r} as {line!r}"
    in_shell = [t for t in cases if len(t) <= short and all(c in PRINTABLE for c in t)]
    to_program = len(cases) - len(in_shell)
    assert to_program >= 4
    made = calls.read_text().count("x") if calls.exists() else 0
    assert made == to_program, f"{shell}: {made} texts went to base64, expected {to_program} (longer than {short})"
