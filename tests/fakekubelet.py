"""A fake kubelet HTTPS endpoint (port 10250) that authorises as the real one does, for configz read
straight from the kubelet.

Authentication: a bearer token is looked up in the fake API server's tokens (the real kubelet asks the
API server with a TokenReview); none or an unknown one is 401 "Unauthorized". Authorisation follows
pkg/kubelet/server/auth.go (GetRequestAttributes): `/configz` maps to `get nodes/configz` and then
`get nodes/proxy` when the feature gate KubeletFineGrainedAuthz is on, to `get nodes/proxy` alone when
it is off; any allowed attribute admits the request, and RBAC decides each one (the real kubelet asks
with a SubjectAccessReview). A refusal is 403 with a text body naming user, verb and subresources.
Every other path is `nodes/proxy`, as there. The serving certificate is signed by a test CA with the
node's IP as subject alternative name, as a kubelet with serverTLSBootstrap gets one.

Where the node's address lives in a lab network namespace, the listening socket is created by a thread
that first joins that namespace (setns(2), CLONE_NEWNET), so the suite reaches the kubelet at the
node's InternalIP exactly as it would on a cluster."""

from __future__ import annotations

import ctypes
import datetime
import ipaddress
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakeapi import FakeApiServer
from tests.httpservers import quiet_handler, reply

CLONE_NEWNET = 0x40000000


@dataclass
class Pki:
    ca: Path  # the CA that signs kubelet serving certificates (kubernetes.kubelet_ca)
    cert: Path
    key: Path


def kubelet_pki(folder: Path, addresses: list[str], self_signed: bool = False) -> Pki:
    """A CA and one serving certificate for all `addresses` (IP SANs); `self_signed`: the certificate
    signs itself, as a kubelet without serverTLSBootstrap makes one, and the CA file holds another CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: x509.Name | None, issuer_key: ec.EllipticCurvePrivateKey | None, ca: bool):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        b = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            sans = [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(issuer_key or key, hashes.SHA256()), key

    ca_cert, ca_key = build("kubernetes-ca", None, None, True)
    if self_signed:
        cert, key = build("kubelet-self-signed", None, None, False)
    else:
        cert, key = build("system:node:lab", ca_cert.subject, ca_key, False)
    pem = serialization.Encoding.PEM
    pki = Pki(folder / "kubelet-ca.pem", folder / "kubelet.pem", folder / "kubelet-key.pem")
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    pki.cert.write_bytes(cert.public_bytes(pem))
    pki.key.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return pki


class FakeKubelet:
    def __init__(self, api: FakeApiServer, node: str, fine_grained: bool = True) -> None:
        self.api = api
        self.node = node
        self.fine_grained = fine_grained
        self.requests: list[tuple[str, str]] = []  # (user, path)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return quiet_handler(lambda h, _method: self.serve(h))

    def _text(self, h: BaseHTTPRequestHandler, code: int, text: str, kind: str = "text/plain; charset=utf-8") -> None:
        reply(h, code, text.encode(), kind)

    def serve(self, h: BaseHTTPRequestHandler) -> None:
        auth = h.headers.get("Authorization", "")
        who = self.api.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if who is None:
            self._text(h, 401, "Unauthorized")
            return
        path = h.path.split("?", 1)[0]
        self.requests.append((who.user, path))
        configz = path == "/configz" or path.startswith("/configz/")
        subresources = (["configz"] if configz and self.fine_grained else []) + ["proxy"]
        if not any(self.api.rbac.allowed(who, "get", f"nodes/{sub}", None) for sub in subresources):
            self._text(h, 403, f"Forbidden (user={who.user}, verb=get, resource=nodes, subresource(s)={subresources})\n")
            return
        if not configz:
            self._text(h, 404, "404 page not found")
            return
        conf = self.api.configz.get(self.node)
        if not isinstance(conf, dict):
            self._text(h, 500, "kubelet configuration not available")
            return
        self._text(h, 200, json.dumps({"kubeletconfig": conf}), "application/json")


def _listen(address: str, port: int, netns: str | None) -> socket.socket:
    """A listening TCP socket on address:port, created inside the named network namespace when given."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            if netns:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into network namespace {netns}")
                finally:
                    os.close(fd)
            s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((address, port))
            s.listen(64)
            made.append(s)
        except BaseException as e:  # handed to the caller's thread
            made.append(e)

    t = threading.Thread(target=make)  # this thread alone joins the namespace, and then ends
    t.start()
    t.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


@contextmanager
def serve_kubelet(kubelet: FakeKubelet, pki: Pki, address: str = "127.0.0.1", port: int = 0, netns: str | None = None
                  ) -> Iterator[int]:  # fmt: skip
    """Serve the fake kubelet over TLS on address:port (in `netns` when given); yields the port."""
    sock = _listen(address, port, netns)
    server = ThreadingHTTPServer((address, 0), kubelet.handler(), bind_and_activate=False)
    server.socket.close()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.cert), str(pki.key))
    server.socket = ctx.wrap_socket(sock, server_side=True)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield server.socket.getsockname()[1]
    finally:
        server.shutdown()
        server.server_close()
