"""Where and how to reach a node over SSH, as the inventory says: shared by the paramiko transport and the OpenSSH
one, and light to import (paramiko is imported only when a node is reached over SSH: it and what it imports cost a
tenth of a second of every command's start, a snapshot replay's included, issue 60)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SshTarget:
    host: str
    port: int = 22
    user: str = "root"
    identity_file: str | None = None
    known_hosts: str | None = None
    proxy_jump: str | None = None
    ssh_config: str | None = None
    insecure_accept_unknown_host_keys: bool = False
    connect_timeout: float = 10.0
