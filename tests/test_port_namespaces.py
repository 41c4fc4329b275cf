"""Why POD-SYSCTL-PORT-RANGE asks for the NodePort reservation only on the node's network: the real kernel
draws ephemeral ports, and applies ip_local_reserved_ports, per network namespace. In namespaces made
here (unshare --net), a client whose only ephemeral port is 30080 gets it in a pod-like namespace even
though the node-like namespace reserves 30080, and cannot get it where its own namespace reserves it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from tests.conftest import require_or_skip

CLIENT = """
import socket, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 9000)); srv.listen()
c = socket.socket()
try:
    c.connect(("127.0.0.1", 9000))
    print(c.getsockname()[1])
except OSError as e:
    print("error", e.errno)
"""


def in_new_netns(sysctls: dict[str, str]) -> str:
    """What CLIENT prints, run in a fresh network namespace with loopback up and these sysctls."""
    sets = "".join(f" && sysctl -q -w {shlex.quote(f'{k}={v}')}" for k, v in sysctls.items())
    script = f'ip link set lo up{sets} && exec "$0" -c "$1"'
    args = ["unshare", "--net", "sh", "-c", script, sys.executable, CLIENT]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_ephemeral_ports_and_their_reservation_belong_to_each_network_namespace():
    require_or_skip(None if os.geteuid() == 0 and shutil.which("unshare") else "network namespaces need root and unshare")
    only_30080 = {"net.ipv4.ip_local_port_range": "30080 30080"}
    # the node's namespace reserves its NodePorts: there the client cannot draw 30080 (EADDRNOTAVAIL, 99)
    assert in_new_netns({**only_30080, "net.ipv4.ip_local_reserved_ports": "30000-32767"}) == "error 99"
    # a pod's own namespace starts with no reservation of its own, whatever the node's says: it draws 30080
    assert in_new_netns(only_30080) == "30080"
