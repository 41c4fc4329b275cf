"""The OpenSSH transport: the `ssh` binary, for sites whose trust lives in OpenSSH itself (host
certificates via `@cert-authority` in known_hosts, which paramiko cannot verify; ssh-agent, PKCS#11,
ControlMaster, Match blocks in ssh_config). Host keys are verified: StrictHostKeyChecking=yes, BatchMode."""

from __future__ import annotations

import shlex
import shutil
import subprocess

from conformance.collection.transports.base import ExecResult
from conformance.collection.transports.ssh import SshTarget
from conformance.errors import TransportError


class OpenSshTransport:
    def __init__(self, target: SshTarget) -> None:
        self.t = target
        self.description = f"ssh {target.user}@{target.host}:{target.port} (OpenSSH)"
        binary = shutil.which("ssh")
        if binary is None:
            raise TransportError("transport openssh needs the ssh command (Debian package openssh-client)", kind="error")
        self.argv = [binary, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(target.connect_timeout))}"]
        if target.ssh_config:
            self.argv += ["-F", target.ssh_config]
        if target.insecure_accept_unknown_host_keys:
            self.argv += ["-o", "StrictHostKeyChecking=accept-new"]  # never accepts a changed key
        else:
            self.argv += ["-o", "StrictHostKeyChecking=yes"]
        if target.known_hosts:
            self.argv += ["-o", f"UserKnownHostsFile={target.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        if target.identity_file:
            self.argv += ["-i", target.identity_file, "-o", "IdentitiesOnly=yes"]
        if target.proxy_jump:
            self.argv += ["-J", target.proxy_jump]
        self.argv += ["-p", str(target.port), "-l", target.user, "--", target.host]

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> ExecResult:
        command = " ".join(shlex.quote(a) for a in argv)
        try:
            p = subprocess.run([*self.argv, command], input=stdin, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            err = TransportError(
                f"{self.description}: did not finish within {timeout:g} s (--timeout: connection, authentication and "
                "the collector together); ssh was stopped",
                kind="timeout",
            )
            err.partial = e.stdout or b""
            raise err from None
        if p.returncode == 255:  # ssh's own failure, not the remote command's
            err = _classify(p.stderr.decode("utf-8", "replace"), self.description)
            err.executed = bool(p.stdout)  # output came: the collector had started before the connection failed
            raise err
        return ExecResult(p.returncode, p.stdout, p.stderr)

    def close(self) -> None:
        """Each run is its own ssh process: nothing stays open."""


def _classify(stderr: str, where: str) -> TransportError:
    text = " ".join(stderr.split())[-400:]
    low = text.lower()
    if "host key verification failed" in low or "remote host identification has changed" in low:
        return TransportError(f"{where}: host key not verified by OpenSSH: {text}", kind="host-key")
    if "permission denied" in low:
        return TransportError(f"{where}: authentication failed: {text}", kind="auth")
    if any(
        s in low for s in ("connection refused", "timed out", "no route", "connection reset", "closed by", "could not resolve")
    ):
        return TransportError(f"{where}: unreachable: {text}", kind="unreachable")
    return TransportError(f"{where}: ssh failed: {text}", kind="error")
