"""The OpenSSH transport: the `ssh` binary, for sites whose trust lives in OpenSSH itself (host
certificates via `@cert-authority` in known_hosts, which paramiko cannot verify; ssh-agent, PKCS#11,
ControlMaster, Match blocks in ssh_config). Host keys are verified: StrictHostKeyChecking=yes, BatchMode."""

from __future__ import annotations

import shlex
import shutil

from conformance.collection.transports.base import ExecResult
from conformance.collection.transports.child import Child
from conformance.collection.transports.target import SshTarget
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
        self._child = Child(
            self.description,
            lambda t: (
                f"{self.description}: did not finish within {t:g} s (--timeout: connection, authentication and "
                "the collector together); ssh was stopped"
            ),
        )

    def run(self, argv: list[str], stdin: bytes, timeout: float) -> ExecResult:
        command = " ".join(shlex.quote(a) for a in argv)
        try:
            status, out, err = self._child.run([*self.argv, command], stdin, timeout)
        except OSError as e:
            raise TransportError(f"cannot run {self.argv[0]}: {e}", kind="error") from e
        if status == 255:  # ssh's own failure, not the remote command's
            failed = _classify(err.decode("utf-8", "replace"), self.description)
            failed.executed = bool(out)  # output came: the collector had started before the connection failed
            raise failed
        return ExecResult(status, out, err)

    def abort(self) -> None:
        """Stop ssh at once (the run was interrupted): the connection goes with it."""
        self._child.abort()

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
