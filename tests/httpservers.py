"""Loopback HTTP(S) servers: the pieces every fake server here shares (a quiet handler, a reply), and
servers with known latency behaviour for the latency tests."""

from __future__ import annotations

import datetime
import itertools
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def quiet_handler(serve: Callable[[BaseHTTPRequestHandler, str], None], methods: tuple[str, ...] = ("GET",)
                  ) -> type[BaseHTTPRequestHandler]:  # fmt: skip
    """An HTTP/1.1 request handler without an access log (the test output stays readable) whose
    do_METHOD, for each of `methods`, calls serve(handler, METHOD)."""
    body: dict[str, object] = {"protocol_version": "HTTP/1.1", "log_message": lambda self, *args: None}
    for method in methods:
        body[f"do_{method}"] = lambda self, method=method: serve(self, method)
    return type("QuietHandler", (BaseHTTPRequestHandler,), body)


def reply(h: BaseHTTPRequestHandler, code: int, data: bytes, kind: str) -> None:
    """One whole response: status, Content-Type, Content-Length and the body."""
    h.send_response(code)
    h.send_header("Content-Type", kind)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def dcgm_metrics(full: bool) -> bytes:
    """What dcgm-exporter serves for two GPUs; without the PROF field when not `full` (the default CSV)."""
    names = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"] + (["DCGM_FI_PROF_PCIE_TX_BYTES"] if full else [])
    lines = []
    for name in names:
        lines += [f"# HELP {name} stand-in", f"# TYPE {name} gauge"]
        for gpu in (0, 1):
            lines.append(f'{name}{{gpu="{gpu}",UUID="GPU-{gpu}",Hostname="gpu-node"}} {gpu * 3}')
    return ("\n".join(lines) + "\n").encode()


def make_handler(behaviour: str, seen_headers: list[dict[str, str]]) -> type[BaseHTTPRequestHandler]:
    counter = itertools.count()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            """Keep the test output quiet: no access log."""

        def _serve(self) -> None:
            with lock:
                n = next(counter)
            seen_headers.append(dict(self.headers))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            status = 200
            if behaviour == "steady":
                time.sleep(0.020)
            elif behaviour == "heavy-tail":
                time.sleep(0.200 if n % 8 == 7 else 0.020)
            elif behaviour == "errors":
                time.sleep(0.005)
                status = 503 if n % 4 == 3 else 200
            elif behaviour == "hang":
                time.sleep(60)
            elif behaviour == "failing-then-hang":  # ten quick 503s, then no answer at all
                if n >= 10:
                    time.sleep(60)
                status = 503
            body, kind = b'{"choices":[{"text":"ok"}]}', "application/json"
            if behaviour.startswith("dcgm-"):  # a dcgm-exporter's /metrics (text exposition format)
                body, kind = dcgm_metrics(full=behaviour == "dcgm-full"), "text/plain; version=0.0.4"
            reply(self, status, body, kind)

        do_GET = _serve
        do_POST = _serve

    return Handler


@contextmanager
def serve(behaviour: str, tls: tuple[Path, Path] | None = None) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Yield (base URL, list of request headers seen)."""
    seen: list[dict[str, str]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(behaviour, seen))
    server.daemon_threads = True
    scheme = "http"
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cryptography comes with paramiko)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
