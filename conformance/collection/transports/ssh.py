"""The SSH transport (paramiko): host keys verified against known_hosts, ProxyJump, ssh_config."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import shlex
import socket
import threading
import time

import paramiko

from conformance.collection.cancel import INTERRUPTED
from conformance.collection.transports.base import OUTPUT_CAP, ExecResult, over_cap
from conformance.collection.transports.target import SshTarget
from conformance.errors import TransportError

# paramiko logs failures of its transport thread itself; this module reports them as TransportError.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


class _AcceptUnknownNoSave(paramiko.MissingHostKeyPolicy):
    """The explicit opt-in: accept a key for a host that has none on record, and record that it did.

    A *changed* key is still refused: paramiko raises BadHostKeyException before asking a policy."""

    def __init__(self) -> None:
        self.accepted: list[str] = []

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.accepted.append(f"{hostname} {key.get_name()} {key.fingerprint}")


def _parse_jump(spec: str, default_user: str) -> tuple[str, str, int]:
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, 22
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif hostport.count(":") == 1:
        host, p = hostport.split(":")
        port = int(p)
    return user or default_user, host, port


def _cause(transport: paramiko.Transport) -> str:
    e = transport.get_exception()
    if e is None:
        return "the channel closed without an exit status"
    return f"{type(e).__name__}: {e}" if str(e) else f"the connection was closed ({type(e).__name__})"


def with_ssh_config(t: SshTarget) -> SshTarget:
    """The target with what ssh_config (its `ssh_config` file) says for the host filled in."""
    if not t.ssh_config:
        return t
    path = os.path.expanduser(t.ssh_config)
    try:
        cfg = paramiko.SSHConfig.from_path(path).lookup(t.host)
    except OSError as e:
        raise TransportError(f"ssh_config {path}: {e.strerror}", kind="error") from e
    # Values from ssh_config fill what the inventory leaves at its defaults.
    if "hostname" in cfg:
        t.host = cfg["hostname"]
    if "port" in cfg and t.port == 22:
        t.port = int(cfg["port"])
    if "user" in cfg and t.user == "root":
        t.user = cfg["user"]
    if "identityfile" in cfg and not t.identity_file:
        t.identity_file = cfg["identityfile"][0]
    if "userknownhostsfile" in cfg and not t.known_hosts:
        t.known_hosts = cfg["userknownhostsfile"].split()[0]
    if "proxyjump" in cfg and not t.proxy_jump and cfg["proxyjump"].lower() != "none":
        t.proxy_jump = cfg["proxyjump"].split(",")[0]
    return t


def connect_error(e: Exception, host: str, port: int, user: str, known: str, ca_lines: int) -> TransportError:
    """What a failed connection means, and what to do about it."""
    if isinstance(e, paramiko.BadHostKeyException):
        return TransportError(
            f"host key of {host}:{port} CHANGED: known_hosts {known} has {e.expected_key.get_name()} "
            f"{e.expected_key.fingerprint}, the node offered {e.key.get_name()} {e.key.fingerprint}. "
            "Refused (possible man-in-the-middle); if the node was reinstalled, replace its known_hosts line",
            kind="host-key",
        )
    if isinstance(e, paramiko.SSHException) and "not found in known_hosts" in str(e):
        hint = (
            f"; {known} trusts host certificates (@cert-authority), which this transport cannot verify: use transport: openssh"
            if ca_lines
            else ""
        )
        return TransportError(
            f"host key of {host}:{port} is unknown (not in {known}); verify it and add it with "
            f"'ssh-keyscan -p {port} {host} >> {known}', or set "
            f"ssh.insecure_accept_unknown_host_keys: true in the inventory to accept unknown keys{hint}",
            kind="host-key",
            executed=False,
        )
    if isinstance(e, paramiko.AuthenticationException):
        return TransportError(f"authentication as {user}@{host}:{port} failed: {e}", kind="auth")
    if isinstance(e, paramiko.SSHException):
        return TransportError(f"ssh to {host}:{port}: {e}", kind="unreachable")
    if isinstance(e, TimeoutError):
        return TransportError(f"ssh to {host}:{port}: connection timed out", kind="unreachable")
    if isinstance(e, OSError):
        return TransportError(f"ssh to {host}:{port}: {e.strerror or e}", kind="unreachable")
    return TransportError(f"ssh to {host}:{port}: {type(e).__name__}: {e}", kind="unreachable")


class SshTransport:
    def __init__(self, target: SshTarget) -> None:
        self.t = with_ssh_config(target)
        self.description = f"ssh {self.t.user}@{self.t.host}:{self.t.port}" + (
            f" via {self.t.proxy_jump}" if self.t.proxy_jump else ""
        )
        self.accepted_unknown_keys: list[str] = []
        self._clients: list[paramiko.SSHClient] = []
        self._socks: list[socket.socket] = []
        self._ca_lines = 0  # @cert-authority lines in known_hosts (this transport cannot use them)
        self._timeout: float | None = None
        self._deadline: float | None = None
        self._timer: threading.Timer | None = None
        self._expired = threading.Event()
        # (how far the connection got when it was cut, whether abort() cut it: the run was interrupted)
        self._cut: tuple[str, bool] = ("", False)

    # -- the deadline: --timeout bounds connection, authentication and the remote command together --
    def set_deadline(self, timeout: float) -> None:
        """From now on, everything this transport does ends within `timeout` seconds: a watchdog closes
        the connection at the deadline, which wakes whatever waits on it (TCP connect, SSH handshake,
        authentication, the remote command's output), and the failure is reported as a timeout naming
        the stage it cut."""
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def next_command(self) -> None:
        """Before a further command on this open connection (a site check's `host.run`): it gets a deadline
        of its own, from its run() timeout."""
        if self._timer is not None:
            self._timer.cancel()
        self._deadline = None

    def abort(self) -> None:
        """Cut the connection now, at whatever stage (the run was interrupted): what waits on it fails
        at once with the error kind "interrupted"."""
        self._cut = (self._cut[0], True)
        self._expire()

    def _remaining(self) -> float:
        return float("inf") if self._deadline is None else max(0.01, self._deadline - time.monotonic())

    def _expire(self) -> None:
        self._cut = (self._stage(), self._cut[1])  # before closing, which forgets how far the connection got
        self._expired.set()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()

    def _stage(self) -> str:
        """How far the connection got, read from the SSH transport's own state."""
        client = self._clients[-1] if self._clients else None
        t = client.get_transport() if client is not None else None
        if t is None or not self._socks:
            return "connecting"
        if t.session_id is None:
            return "in the SSH handshake"
        if not t.is_authenticated():
            return "authenticating"
        return "running the collector"

    def _timed_out(self) -> TransportError:
        if self._cut[1]:
            message = f"{self.description}: stopped while {self._cut[0]}: the run was interrupted"
            return TransportError(message, kind=INTERRUPTED)
        return TransportError(
            f"{self.description}: did not finish within {self._timeout:g} s (--timeout): cut while {self._cut[0]}",
            kind="timeout",
        )

    def _client(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        known = os.path.expanduser(self.t.known_hosts or "~/.ssh/known_hosts")
        try:
            self._ca_lines = _load_known_hosts(client.get_host_keys(), known)
        except FileNotFoundError:
            if not self.t.insecure_accept_unknown_host_keys:
                raise TransportError(
                    f"known_hosts file {known} does not exist: add the node's host key "
                    f"(ssh-keyscan -p {self.t.port} {self.t.host} >> {known}, after checking its fingerprint)",
                    kind="host-key",
                ) from None
        except OSError as e:
            raise TransportError(f"known_hosts file {known}: {e}", kind="host-key") from e
        if self.t.insecure_accept_unknown_host_keys:
            policy = _AcceptUnknownNoSave()
            client.set_missing_host_key_policy(policy)
            self._policy = policy
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        self._known = known
        return client

    def _connect(self, client: paramiko.SSHClient, host: str, port: int, user: str, sock: object = None) -> None:
        key = os.path.expanduser(self.t.identity_file) if self.t.identity_file else None
        wait = min(self.t.connect_timeout, self._remaining())
        try:
            if sock is None:  # our own socket, so that the deadline's watchdog can close it at any stage
                sock = self._tcp(host, port, wait)
            if self._expired.is_set():
                raise self._timed_out()
            client.connect(
                host,
                port=port,
                username=user,
                key_filename=key,
                timeout=wait,
                banner_timeout=wait,
                auth_timeout=wait,
                allow_agent=key is None,
                look_for_keys=key is None,
                sock=sock,  # type: ignore[arg-type]
            )
        except TransportError:
            raise
        except Exception as e:
            if self._expired.is_set():
                raise self._timed_out() from None
            raise connect_error(e, host, port, user, self._known, self._ca_lines) from None

    def _tcp(self, host: str, port: int, wait: float) -> socket.socket:
        """A TCP connection to the first address of `host` that answers within `wait` seconds. The
        connect itself watches for the deadline and abort(): a node that drops SYNs is cut like any other
        stage (a blocking connect would hold the run until `wait` passed)."""
        end = time.monotonic() + wait
        failure: OSError = TimeoutError(f"no address for {host}")
        for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            tcp = socket.socket(family, kind, proto)
            self._socks.append(tcp)
            tcp.setblocking(False)
            code = tcp.connect_ex(address)
            while code in (errno.EINPROGRESS, errno.EAGAIN) and not self._expired.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    code = errno.ETIMEDOUT
                    break
                if select.select([], [tcp], [], min(0.2, left))[1]:
                    code = tcp.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if self._expired.is_set():
                raise self._timed_out()
            if code == 0:
                tcp.setblocking(True)
                return tcp
            failure = TimeoutError(code, "timed out") if code == errno.ETIMEDOUT else OSError(code, os.strerror(code))
        raise failure

    def open(self) -> paramiko.SSHClient:
        try:
            return self._open()
        except TransportError:
            if self._expired.is_set():
                raise self._timed_out() from None
            raise
        except paramiko.ChannelException:
            if self._expired.is_set():
                raise self._timed_out() from None
            raise

    def _open(self) -> paramiko.SSHClient:
        sock = None
        if self.t.proxy_jump:
            juser, jhost, jport = _parse_jump(self.t.proxy_jump, self.t.user)
            jump = self._client()
            self._clients.append(jump)
            self._connect(jump, jhost, jport, juser)
            jt = jump.get_transport()
            assert jt is not None
            try:
                sock = jt.open_channel("direct-tcpip", (self.t.host, self.t.port), ("127.0.0.1", 0))
            except paramiko.ChannelException as e:
                raise TransportError(
                    f"jump host {jhost} could not open a connection to {self.t.host}:{self.t.port}: {e}",
                    kind="unreachable",
                ) from None
        client = self._client()
        self._clients.append(client)
        self._connect(client, self.t.host, self.t.port, self.t.user, sock)
        if self.t.insecure_accept_unknown_host_keys:
            self.accepted_unknown_keys = list(self._policy.accepted)
        return client

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> ExecResult:
        """Run `argv` with `stdin`. Without set_deadline() (called by the collection), `timeout` starts
        here and covers the connection too, if none is open yet."""
        if self._deadline is None:
            self.set_deadline(timeout)
        try:
            return self._run(argv, stdin)
        except TransportError as e:
            if self._expired.is_set() and e.kind not in ("timeout", INTERRUPTED):
                err = self._timed_out()
                err.partial = e.partial
                raise err from None
            raise
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def _run(self, argv: list[str], stdin: bytes) -> ExecResult:
        client = self._clients[-1] if self._clients else self.open()
        command = " ".join(shlex.quote(a) for a in argv)
        timeout = self._remaining()
        deadline = time.monotonic() + timeout
        try:
            transport = client.get_transport()
            assert transport is not None
            chan = transport.open_session(timeout=timeout)
            chan.settimeout(max(1.0, timeout))
            chan.exec_command(command)
            chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:
                if time.monotonic() > deadline or self._expired.is_set():
                    chan.close()
                    err = self._timed_out()
                    err.partial = bytes(out)
                    raise err
                if chan.recv_ready():
                    out += chan.recv(65536)
                    if len(out) > OUTPUT_CAP:
                        chan.close()
                        raise TransportError(over_cap(f"{self.t.host}:{self.t.port}", len(out)), kind="error")
                elif chan.recv_stderr_ready():
                    chunk = chan.recv_stderr(65536)
                    if len(err) < 65536:
                        err += chunk
                elif (
                    chan.exit_status_ready()
                    and (chan.eof_received or chan.closed)  # the exit status may come before the last output
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                ):
                    break
                elif chan.closed or not transport.is_active():
                    cause = _cause(transport)
                    raise TransportError(
                        f"connection to {self.t.host}:{self.t.port} broke during collection after {len(out)} bytes: {cause}",
                        kind="unreachable",
                    )
                else:
                    select.select([chan], [], [], 0.1)
            status = chan.recv_exit_status()
            if status == -1:  # paramiko's value when the channel closed without an exit status
                cause = _cause(transport)
                raise TransportError(
                    f"connection to {self.t.host}:{self.t.port} broke during collection after {len(out)} bytes: {cause}",
                    kind="unreachable",
                )
        except TransportError:
            raise
        except (paramiko.SSHException, OSError, EOFError) as e:
            if self._expired.is_set():
                raise self._timed_out() from None
            raise TransportError(
                f"connection to {self.t.host}:{self.t.port} broke during collection: {e}", kind="unreachable"
            ) from None
        return ExecResult(status, bytes(out), bytes(err))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for c in reversed(self._clients):
            c.close()
        for sock in self._socks:
            sock.close()
        self._clients.clear()
        self._socks.clear()


def _load_known_hosts(keys: paramiko.HostKeys, path: str) -> int:
    """Load plain known_hosts entries as OpenSSH reads them (malformed lines are ignored, as OpenSSH
    does). Marker lines are not plain keys: `@cert-authority` lines are counted (the caller points to
    the openssh transport), and `@revoked` lines, which must not be ignored, refuse the whole file."""
    ca_lines = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("@cert-authority"):
                ca_lines += 1
                continue
            if line.startswith("@"):
                raise TransportError(
                    f"known_hosts {path} line {n}: marker {line.split()[0]} cannot be honoured by this transport; "
                    "use transport: openssh",
                    kind="host-key",
                    executed=False,
                )
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, n)
            except (paramiko.hostkeys.InvalidHostKey, ValueError):
                continue
            if entry is None:
                continue
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    return ca_lines
