"""The lab: simulated GPU nodes on this machine, each a real OpenSSH sshd in its own network,
mount and PID namespaces, reached over real SSH with real host keys.

Per node:
- network namespace `gnc<id>n<i>` joined to the host by a veth pair, addresses in 198.18.0.0/15
  (RFC 2544 benchmarking range, only inside namespaces this lab created); the namespaced sysctls
  are set for real in it;
- a private mount namespace in which /etc, /var/lib and /opt are overlays (the node's files are
  its upper layer: kubelet config, checkpoints, containerd or CRI-O config), and fake sysfs trees
  are bind-mounted over /sys/devices/system/node, /sys/devices/system/cpu, /sys/block and
  /sys/bus/pci/devices (a GPU node's PCI functions; none for the others);
  /sys/fs/cgroup is a real cgroup2 (a child of the host's, holding kubepods.slice or kubepods) or
  a tmpfs (cgroup v1);
- a private PID namespace with /proc remounted: a real process named `kubelet` runs with the
  node's flags, and sshd is its sibling.
Nothing outside the lab's temporary folder is written except the cgroup child directories, which
are removed when the lab stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

OVERLAID = ("etc", "var", "opt", "tmp", "root", "home", "run")
# A stand-in daemon (the kubelet, k3s, nv-fabricmanager...): it waits forever, as the daemon would. Asked
# `--version` (also through /proc/PID/exe, from another mount namespace, as the collector asks in a pod), it
# prints what follows the last "GNC-VERSION:" appended to its own file (a copy per node, made by the lab),
# and never answers when nothing was appended or that says "hang". The marker is built at run time so that
# the program's own bytes never hold it.
KUBELET_C = r"""#include <stdio.h>
#include <string.h>
#include <unistd.h>
static char buf[1 << 21];
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    const char enc[] = "FOB,WDSRHNO;";
    char mark[sizeof enc];
    for (size_t i = 0; i < sizeof enc; i++) mark[i] = enc[i] ? enc[i] ^ 1 : 0;
    FILE *f = fopen("/proc/self/exe", "rb");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0, m = strlen(mark);
    for (size_t i = n >= m ? n - m + 1 : 0; i-- > 0;) {
      if (memcmp(buf + i, mark, m) == 0) {
        if (strncmp(buf + i + m, "hang", 4) == 0) break;
        fwrite(buf + i + m, 1, n - i - m, stdout);
        return 0;
      }
    }
  }
  for (;;) pause();
}
"""


# A decoy (issue 50): a program any local user can write, named like a daemon. Started with `serve` it waits
# forever, as the daemon would; run any other way (as an audit that executes what the process table names
# would run it) it appends its arguments to /tmp/gnc-decoy-ran and prints a release, so a test sees both.
DECOY_C = r"""#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "serve") == 0)
    for (;;) pause();
  FILE *f = fopen("/tmp/gnc-decoy-ran", "a");
  if (f) {
    for (int i = 0; i < argc; i++) fprintf(f, "%s ", argv[i]);
    fputc('\n', f);
    fclose(f);
  }
  puts("Kubernetes v1.99.0");
  return 0;
}
"""


def package_of(program: str, version_text: str) -> tuple[str, str] | None:
    """The package (name, Debian version) that installs a stand-in, from what its real program prints for
    `--version`: the audit reads the release from the node's package database, never from the program (issue
    50). kubelet v1.31.0 comes as pkgs.k8s.io's `kubelet 1.31.0-1.1`, containerd as Docker's `containerd.io`
    (Debian's own `containerd` is installed on this machine, whose dpkg database the nodes' databases extend);
    a program that never answers ("hang") is installed by hand: no package owns it."""
    m = re.search(r"v?(\d+\.\d+\.\d+[0-9A-Za-z.~+]*)", version_text)
    if version_text == "hang" or m is None:
        return None
    release = m.group(1)
    if program == "kubelet":
        return "kubelet", f"{release}-1.1"
    if program == "containerd":
        return "containerd.io", release if "-" in release else f"{release}-1"
    return program, release


def install_packages(upper: Path, packages: list[tuple[str, str, str]], replaced: dict[str, bytes] | None = None) -> None:
    """Add packages (name, version, the file each owns) to the node's dpkg database: its /var is an overlay of
    this machine's, so the node's status file is its own (or this machine's) with their stanzas appended, and
    each package's file list and md5sums (as dpkg writes them after unpacking: src/main/unpack.c) lie beside this
    machine's. dpkg-query on the node then answers for them. `replaced`: files a release tarball was copied over
    after the package installed them (path -> the package's own content): the package records that content's
    digest, and its file list is older than the file that is there now."""
    if not packages:
        return
    replaced = replaced or {}
    admin = upper / "var" / "lib" / "dpkg"
    (admin / "info").mkdir(parents=True, exist_ok=True)
    arch = _run("dpkg", "--print-architecture").stdout.strip()
    own = admin / "status"  # the node's own database where its files give one, else this machine's
    status = (own if own.exists() else Path("/var/lib/dpkg/status")).read_text().rstrip("\n") + "\n"
    for name, version, path in packages:
        status += (
            f"\nPackage: {name}\nStatus: install ok installed\nPriority: optional\nSection: admin\n"
            f"Installed-Size: 1\nMaintainer: gnc lab <lab@invalid>\nArchitecture: {arch}\nVersion: {version}\n"
            f"Description: gpu-node-conformance lab stand-in\n"
        )
        (admin / "info" / f"{name}.list").write_text(f"/.\n/opt\n/opt/gnc-lab\n{path}\n")
        content = replaced.get(path, (upper / path.lstrip("/")).read_bytes())
        (admin / "info" / f"{name}.md5sums").write_text(f"{hashlib.md5(content).hexdigest()}  {path.lstrip('/')}\n")
        if path in replaced:  # installed an hour before the tarball was copied over its file
            then = time.time() - 3600
            for suffix in ("list", "md5sums"):
                os.utime(admin / "info" / f"{name}.{suffix}", (then, then))
    own.write_text(status)


@dataclass(frozen=True)
class Decoy:
    """A process named like a daemon that a local user could start: its program `name` lies in a folder of
    /tmp owned by `owner` (uid), and it runs as `uid` with `args` after `serve`."""

    name: str
    args: tuple[str, ...] = ()
    uid: int = 65534  # nobody
    owner: int = 65534


@dataclass(frozen=True)
class Userland:
    """The node's own shell, awk and small tools, as the distribution ships them. Made the node's own in its
    mount namespace: `sh` is bound over what /bin/sh resolves to, `awk` is chosen by the node's own
    /etc/alternatives/awk (Debian's update-alternatives link), and BusyBox tools are bound over the
    coreutils and util-linux programs. Nothing tells the collector which it got."""

    sh: str = "dash"  # dash | bash-sh (bash started as sh: POSIX mode, as RHEL's /bin/sh) | bash | busybox
    awk: str = "mawk"  # mawk | gawk | gawk-posix | busybox
    tools: str = "gnu"  # gnu (coreutils, util-linux) | busybox
    missing: tuple[str, ...] = ()  # programs of /usr/bin the node lacks (whiteouts in an overlay on its /usr/bin)

    @property
    def name(self) -> str:
        tools = "" if self.tools == "gnu" else f"+{self.tools}-tools"
        return f"{self.sh}+{self.awk}{tools}" + "".join(f"-no-{m}" for m in self.missing)


DEBIAN = Userland()  # Debian and Ubuntu: dash and mawk
# The combinations the lab can make from Debian's packages (dash, bash, busybox, gawk, mawk): each shell and
# each awk at least once, the realistic pairs, and each of BusyBox's two halves beside a GNU other half.
USERLANDS = (
    DEBIAN,
    Userland("bash-sh", "gawk"),  # RHEL, Rocky, Amazon Linux 2023, Flatcar
    Userland("bash", "gawk-posix"),
    Userland("busybox", "busybox", "busybox"),  # BusyBox-based and minimal in-cluster images
    Userland("dash", "busybox"),
    Userland("busybox", "mawk"),
)
# The programs the collector runs that BusyBox also provides.
BUSYBOX_TOOLS = ("base64", "head", "tail", "cat", "tr", "cut", "stat", "readlink", "dirname", "uname", "timeout", "dmesg")


def userland_available(userland: Userland) -> str | None:
    """None when this machine has the programs `userland` needs, else what to install."""
    need = {"dash": "dash", "bash-sh": "bash", "bash": "bash", "busybox": "busybox"}[userland.sh]
    wanted = {need, {"mawk": "mawk", "gawk": "gawk", "gawk-posix": "gawk", "busybox": "busybox"}[userland.awk]}
    if userland.tools == "busybox":
        wanted.add("busybox")
    lacking = sorted(w for w in wanted if not Path("/usr/bin", w).exists())
    return f"the shell lab needs /usr/bin/{', '.join(lacking)} (Debian packages {' '.join(lacking)})" if lacking else None


# What the real programs print for `--version` (kubelet v1.31.0; k3s v1.31.2+k3s1, its first two lines)
VERSIONS = {"kubelet": "Kubernetes v1.31.0", "k3s": "k3s version v1.31.2+k3s1 (6da20424)\ngo version go1.22.8"}


@dataclass
class NodeSpec:
    """What a simulated node looks like. Paths in `files` are absolute paths on the node and
    must lie below one of OVERLAID (their writable upper layers are the node's whole writable state,
    which is how the read-only test sees any write)."""

    name: str
    kubelet_args: list[str] = field(default_factory=list)
    files: dict[str, str | bytes] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    numa: dict[int, str] = field(default_factory=lambda: {0: "0-3,8-11", 1: "4-7,12-15"})
    siblings: dict[int, str] | None = None  # default: cpu i and i+8 are siblings of 16 CPUs
    online: str = "0-15"
    nvme: dict[str, str | bytes] = field(default_factory=dict)  # device -> scheduler file content
    cgroup: str = "v2"  # "v2" or "v1"
    kubepods: str | None = "kubepods.slice"  # directory to create in the cgroup root, or None
    up: bool = True  # False: the namespace exists but no sshd listens (an unreachable node)
    modes: dict[str, int] = field(default_factory=dict)  # file -> permission bits
    users: list[str] = field(default_factory=list)  # extra unprivileged accounts (home /tmp)
    pci: dict[str, dict[str, str]] = field(default_factory=dict)  # bus id -> sysfs attribute files (vendor, class...)
    # run a containerd stand-in whose --version prints this ("hang": never answers; None: no containerd runs).
    # Real nodes run their runtime: by default a containerd 2.0 answers, as on a node its version 3 files suit.
    containerd: str | None = "containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a01713109a8a197d197ff6542"
    containerd_cwd: str = "/"  # the daemon's working directory (where containerd 1.x before 1.6.29 matches relative globs)
    fifos: list[str] = field(default_factory=list)  # named pipes planted on the node: a reader would block forever
    sshd_config: str = ""  # sshd_config lines for this node's sshd, ahead of (and so winning over) the lab's own
    daemons: list[str] = field(default_factory=list)  # do-nothing processes run under these program names (their comm)
    links: dict[str, str] = field(default_factory=dict)  # symlink on the node -> its target
    irqs: dict[int, tuple[str, list[str]]] = field(default_factory=dict)  # /proc/irq: IRQ -> (affinity, handler names)
    effective_irqs: dict[int, str] = field(default_factory=dict)  # IRQ -> its effective_affinity_list
    # the IRQs debugfs marks kernel-managed (/sys/kernel/debug/irq/irqs/N); None: no debugfs on the node
    managed_irqs: list[int] | None = None
    # what `PROGRAM --version` prints on the node, per stand-in program (the kubelet, k3s); "hang": never answers
    versions: dict[str, str] = field(default_factory=lambda: dict(VERSIONS))
    # the real CPUs the node's PID 1 runs on (taskset), inherited by all its processes, as systemd's CPUAffinity=
    # makes them; None: PID 1 keeps every CPU this machine lets the lab use (a node without CPUAffinity=)
    pid1_cpus: str | None = "0"
    userland: Userland = DEBIAN  # the node's sh, awk and small tools
    decoys: list[Decoy] = field(default_factory=list)  # started before every daemon of the node (issue 50)
    # issue 58: how the platforms install and run their daemons
    unpackaged: list[str] = field(default_factory=list)  # programs installed from release tarballs: no package owns them
    tarball_over: dict[str, str] = field(default_factory=dict)  # program -> the package version its file was copied over
    owners: dict[str, int] = field(default_factory=dict)  # file -> its owner's uid (a user-owned version file)
    after_daemons: list[str] = field(default_factory=list)  # files written (mtime now) after the daemons were installed
    journal: bool = False  # a real journald runs; daemons with a start line log it to the journal
    start_lines: dict[str, str] = field(default_factory=dict)  # program -> what it logs first, on stderr
    journal_lines: list[tuple[int, str, str]] = field(default_factory=list)  # (uid, SYSLOG_IDENTIFIER, text) users log
    contained: list[str] = field(default_factory=list)  # daemons run in PID and mount namespaces of their own
    daemon_uids: dict[str, int] = field(default_factory=dict)  # daemon -> the uid it runs as (persistenced --user)
    stack_kib: int | None = None  # the stack limit its processes start with (a larger one admits a larger argv)


@dataclass
class LabNode:
    spec: NodeSpec
    index: int
    netns: str
    address: str
    dir: Path
    proc: subprocess.Popen | None = None


def lab_available() -> str | None:
    """None when a lab can be built here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, mounts)"
    for tool in ("ip", "unshare", "ssh-keygen", "cc", "mount", "taskset"):
        if shutil.which(tool) is None:
            return f"the lab needs the '{tool}' command"
    if not Path("/usr/sbin/sshd").exists():
        return "the lab needs OpenSSH's sshd (/usr/sbin/sshd; Debian package openssh-server)"
    if _cgroup2_root() is None:
        return "the lab needs a cgroup2 hierarchy"
    if not {0, 1} <= os.sched_getaffinity(0):
        return "the lab runs node processes on CPUs 0 and 1 (PID 1's real affinity), and this process may use fewer"
    return userland_available(DEBIAN)  # every node's sh and awk are pinned, dash and mawk unless it says


def _cgroup2_root() -> Path | None:
    with open("/proc/self/mounts", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return Path(parts[1])
    return None


def _drop_stale_links(net: str) -> None:
    """A lab killed before its cleanup (SIGKILL) can leave its host-side veth holding NET.0/24, and the route
    to a new lab's node on that range then goes nowhere: such a link of ours (named gh...) goes first. Labs
    that run at the same time use distinct ranges, so no live lab's link is touched."""
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show", "to", f"{net}.0/24"], capture_output=True, text=True)
    for line in shown.stdout.splitlines():
        name = line.split()[1].split("@")[0]
        if name.startswith("gh"):
            _run("ip", "link", "del", name, check=False)


# Each lab holds the /24s of its nodes while it runs: an exclusive lock on one file per range, held by the process
# that built it (the kernel lets go of a killed one's). Two labs that would share a range (two pytest-xdist workers,
# two modules whose first_subnet ranges meet) take turns instead of deleting each other's links: _drop_stale_links
# only ever meets a range no live lab holds. Ranges are taken in ascending order; a wait longer than CLAIM_WAIT_S is
# a lab that holds its range while it waits for another's, and fails naming both.
CLAIMS = Path("/run/gnc-lab-subnets")
CLAIM_WAIT_S = 1200
Claim = tuple[int, Path]  # the lock file's descriptor and path


def _claim(nets: list[int], holder: str) -> list[Claim]:
    claims: list[Claim] = []
    try:
        for net in sorted(set(nets)):
            claims.append(_claim_one(CLAIMS / f"198.18.{net}", holder))
    except BaseException:
        _release(claims)
        raise
    return claims


def _claim_one(path: Path, holder: str) -> Claim:
    deadline = time.monotonic() + CLAIM_WAIT_S
    while True:
        CLAIMS.mkdir(mode=0o700, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the folder went with the last lab's release: again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            os.close(fd)
            if time.monotonic() > deadline:
                why = f"{path.name}.0/24 is still held by another lab ({other}) after {CLAIM_WAIT_S} s"
                raise RuntimeError(f"{why}: give {holder} a first_subnet no other lab uses") from None
            time.sleep(0.5)
            continue
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it as we locked it: the lock is on a file nobody else will see
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder}, pid {os.getpid()}".encode(), 0)
        return fd, path


def _release(claims: list[Claim]) -> None:
    """Each lock file removed while still locked (a lab that opens it later finds it gone or replaced, and opens
    again), then let go; the folder too once empty."""
    for fd, path in claims:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
    with contextlib.suppress(OSError):
        CLAIMS.rmdir()


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


class Lab:
    def __init__(self, root: Path, first_subnet: int = 1, host_ca: bool = False) -> None:
        """Nodes get 198.18.<first_subnet + i>.2; labs that run at the same time use distinct ranges.
        With host_ca, every node's host key is certified by a lab CA and known_hosts trusts only the CA
        (`@cert-authority`), as sites with SSH host certificates do."""
        self.root = root
        self.first_subnet = first_subnet
        self.host_ca = root / "host_ca" if host_ca else None
        self.id = uuid.uuid4().hex[:6]
        self.nodes: list[LabNode] = []
        self._claims: list[Claim] = []  # the lock files of the ranges this lab holds while it runs
        self.cg_root = _cgroup2_root()
        assert self.cg_root is not None
        self.cg_dir = self.cg_root / f"gnc-lab-{self.id}"
        root.mkdir(parents=True, exist_ok=True)
        self.client_key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        (root / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        bindir = root / "bin"
        bindir.mkdir()
        (root / "kubelet.c").write_text(KUBELET_C)
        _run("cc", "-O1", "-o", str(bindir / "kubelet"), str(root / "kubelet.c"))
        shutil.copy(bindir / "kubelet", bindir / "pause")  # the same do-nothing program, named as a pod sandbox's
        (root / "decoy.c").write_text(DECOY_C)
        _run("cc", "-O1", "-o", str(bindir / "decoy"), str(root / "decoy.c"))
        self.known_hosts.write_text("")
        if self.host_ca is not None:
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_ca))
            ca_pub = Path(f"{self.host_ca}.pub").read_text().strip()
            self.known_hosts.write_text(f"@cert-authority 198.18.* {ca_pub}\n")

    # -- building ------------------------------------------------------------------------------
    def add(self, spec: NodeSpec) -> LabNode:
        i = len(self.nodes) + 1
        net = self.first_subnet + i - 1
        assert net < 256, "a lab's nodes must fit in 198.18.0.0/16"
        node = LabNode(spec, i, f"gnc{self.id}n{i}", f"198.18.{net}.2", self.root / spec.name)
        self.nodes.append(node)
        return node

    def _write_tree(self, node: LabNode) -> None:
        d = node.dir
        for top in OVERLAID:
            (d / "upper" / top).mkdir(parents=True, exist_ok=True)
            (d / "work" / top).mkdir(parents=True, exist_ok=True)
        for path, content in node.spec.files.items():
            assert path.split("/")[1] in OVERLAID, f"lab file {path} must be below one of {OVERLAID}"
            target = d / "upper" / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            elif content.startswith("<sparse "):  # "<sparse N>": a sparse file of N bytes
                with target.open("wb") as f:
                    f.truncate(int(content[8:-1]))
            else:
                target.write_text(content)
        for path in node.spec.fifos:
            assert path.split("/")[1] in OVERLAID, f"lab FIFO {path} must be below one of {OVERLAID}"
            target = d / "upper" / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(target)
        for path, mode in node.spec.modes.items():
            (d / "upper" / path.lstrip("/")).chmod(mode)
        for path, uid in node.spec.owners.items():
            os.chown(d / "upper" / path.lstrip("/"), uid, uid)
        for path, target in node.spec.links.items():
            assert path.split("/")[1] in OVERLAID, f"lab link {path} must be below one of {OVERLAID}"
            link = d / "upper" / path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
        # A plain root shell: no rc file of this machine (such as a pyenv init) runs on the nodes.
        (d / "upper" / "root" / ".bashrc").write_text("")
        (d / "upper" / "root" / ".profile").write_text("")
        # Accounts and the client's key inside the node (its /etc is an overlay).
        etc = d / "upper" / "etc"
        (etc / "ssh").mkdir(exist_ok=True)
        (etc / "ssh" / "gnc_authorized_keys").write_text((self.root / "authorized_keys").read_text())
        (etc / "ssh" / "gnc_authorized_keys").chmod(0o644)
        if node.spec.users or node.spec.userland.sh == "busybox":
            passwd = Path("/etc/passwd").read_text()
            shadow = Path("/etc/shadow").read_text()
            if node.spec.userland.sh == "busybox":  # a BusyBox node has no bash: root logs in to /bin/sh
                passwd = "".join(
                    (":".join(line.split(":")[:6]) + ":/bin/sh\n") if line.startswith("root:") else line + "\n"
                    for line in passwd.splitlines()
                )
            for i, user in enumerate(node.spec.users):
                passwd += f"{user}:x:{1500 + i}:{1500 + i}::/tmp:/bin/sh\n"
                shadow += f"{user}:*:19000:0:99999:7:::\n"
            (etc / "passwd").write_text(passwd)
            (etc / "shadow").write_text(shadow)
            (etc / "shadow").chmod(0o640)
        self._write_userland(node)
        s = node.spec
        sysdir = d / "sys"
        nd = sysdir / "node"
        nd.mkdir(parents=True)
        (nd / "online").write_text(",".join(str(n) for n in sorted(s.numa)) + "\n")
        for n, cpus in s.numa.items():
            (nd / f"node{n}").mkdir()
            (nd / f"node{n}" / "cpulist").write_text(cpus + "\n")
        cd = sysdir / "cpu"
        cd.mkdir()
        (cd / "online").write_text(s.online + "\n")
        siblings = s.siblings or {c: f"{c % 8},{c % 8 + 8}" for c in range(16)}
        for cpu, sib in siblings.items():
            t = cd / f"cpu{cpu}" / "topology"
            t.mkdir(parents=True)
            (t / "thread_siblings_list").write_text(sib + "\n")
        bd = sysdir / "block"
        bd.mkdir()
        for dev, sched in s.nvme.items():
            (bd / dev / "queue").mkdir(parents=True)
            data = sched if isinstance(sched, bytes) else (sched + "\n").encode()
            (bd / dev / "queue" / "scheduler").write_bytes(data)
        pd = sysdir / "pci"
        pd.mkdir()
        for bus_id, attrs in s.pci.items():
            (pd / bus_id).mkdir()
            for attr, value in attrs.items():
                (pd / bus_id / attr).write_text(value + "\n")
        irq = d / "irq"  # bound over /proc/irq: the machine's own interrupts are not the node's
        irq.mkdir()
        for n, (affinity, handlers) in s.irqs.items():
            (irq / str(n)).mkdir()
            (irq / str(n) / "smp_affinity_list").write_text(affinity + "\n")
            if n in s.effective_irqs:
                (irq / str(n) / "effective_affinity_list").write_text(s.effective_irqs[n] + "\n")
            for h in handlers:
                (irq / str(n) / h).mkdir()
        if s.managed_irqs is not None:  # debugfs's IRQ files, as kernel/irq/debugfs.c prints a managed one's dstate
            irqs = d / "debugfs" / "irq" / "irqs"
            irqs.mkdir(parents=True)
            for n in s.irqs:
                flags = "            IRQD_AFFINITY_MANAGED\n" if n in s.managed_irqs else ""
                (irqs / str(n)).write_text(f"handler:  handle_edge_irq\ndstate:   0x0\n{flags}")
        (d / "cgmnt").mkdir()
        (d / "sshd_config").write_text(  # the node's own lines first: for sshd the first value of a keyword wins
            node.spec.sshd_config + f"ListenAddress {node.address}:22\nHostKey {d / 'host_ed25519'}\nPidFile none\nUsePAM no\n"
            f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "AuthorizedKeysFile /etc/ssh/gnc_authorized_keys\nStrictModes no\nLogLevel ERROR\n"
            "MaxStartups 200\nMaxSessions 50\nUseDNS no\n"
        )
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_ed25519"))
        if self.host_ca is not None:
            _run("ssh-keygen", "-q", "-s", str(self.host_ca), "-I", node.spec.name, "-h", "-n", node.address,
                 str(d / "host_ed25519.pub"))  # fmt: skip
            with (d / "sshd_config").open("a") as f:
                f.write(f"HostCertificate {d / 'host_ed25519-cert.pub'}\n")

    def _write_userland(self, node: LabNode) -> None:
        """The node's awk, chosen as Debian chooses it: its own /etc/alternatives/awk link. gawk in POSIX
        mode is a small program in the node's /opt that starts gawk --posix."""
        u = node.spec.userland
        upper = node.dir / "upper"
        alt = upper / "etc" / "alternatives"
        alt.mkdir(parents=True, exist_ok=True)
        target = {"mawk": "/usr/bin/mawk", "gawk": "/usr/bin/gawk", "busybox": "/usr/bin/busybox"}.get(u.awk)
        if u.awk == "gawk-posix":
            wrapper = upper / "opt" / "gnc-userland" / "awk"
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            wrapper.write_text('#!/usr/bin/bash\nexec /usr/bin/gawk --posix "$@"\n')
            wrapper.chmod(0o755)
            target = "/opt/gnc-userland/awk"
        assert target is not None, f"unknown awk {u.awk!r}"
        (alt / "awk").symlink_to(target)
        if u.sh == "bash":  # plain bash: started under its own name, so not in POSIX mode
            wrapper = upper / "opt" / "gnc-userland" / "sh"
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            wrapper.write_text('#!/usr/bin/bash\nexec /usr/bin/bash "$@"\n')
            wrapper.chmod(0o755)
        if u.missing:  # an overlay's whiteout (a 0/0 character device) hides the lower layer's file
            for top in ("usr-bin-upper", "usr-bin-work"):
                (node.dir / top).mkdir()
            for tool in u.missing:
                os.mknod(node.dir / "usr-bin-upper" / tool, 0o600 | stat.S_IFCHR, os.makedev(0, 0))

    def _userland_mounts(self, node: LabNode) -> list[str]:
        """Bind mounts (in the node's own mount namespace) that make its sh and tools the userland's. /bin/sh
        resolves to the machine's sh (dash on Debian); binding over that file changes /bin/sh, /usr/bin/sh and
        every other name for it, for the node alone."""
        u, q = node.spec.userland, shlex.quote
        lines = []
        sh = os.path.realpath("/bin/sh")
        source = {"dash": "/usr/bin/dash", "bash-sh": "/usr/bin/bash", "busybox": "/usr/bin/busybox"}.get(u.sh)
        if u.sh == "bash":
            source = str(node.dir / "upper" / "opt" / "gnc-userland" / "sh")
        assert source is not None, f"unknown sh {u.sh!r}"
        if source != sh:
            lines.append(f"mount --bind {q(source)} {q(sh)}")
        if u.tools == "busybox":
            for tool in (t for t in BUSYBOX_TOOLS if t not in u.missing):
                path = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
                assert path, f"the lab binds BusyBox over {tool}, which this machine lacks"
                lines.append(f"mount --bind /usr/bin/busybox {q(os.path.realpath(path))}")
        return lines

    def _startup_script(self, node: LabNode) -> str:
        d, s = node.dir, node.spec
        q = shlex.quote

        def overlay(top: str) -> str:
            return (
                f"mount -t overlay overlay -o lowerdir=/{top},upperdir={q(str(d / 'upper' / top))},"
                f"workdir={q(str(d / 'work' / top))} /{top}"
            )

        lines = ["set -e", "mount --make-rprivate /"]
        if s.pid1_cpus is not None:  # PID 1 (this shell, then sshd) and everything it starts inherit the mask
            lines.append(f"taskset -pc {q(s.pid1_cpus)} $$ >/dev/null")
        # /tmp last: the lab's own folder lives below it, and an overlay's upper layer cannot be an overlay
        lines += [overlay(top) for top in OVERLAID if top != "tmp"]
        lines += [
            f"mount --bind {q(str(d / 'sys' / 'node'))} /sys/devices/system/node",
            f"mount --bind {q(str(d / 'sys' / 'cpu'))} /sys/devices/system/cpu",
            f"mount --bind {q(str(d / 'sys' / 'block'))} /sys/block",
            f"mount --bind {q(str(d / 'sys' / 'pci'))} /sys/bus/pci/devices",
            f"mount --bind {q(str(d / 'irq'))} /proc/irq",
        ]
        if s.managed_irqs is not None:
            lines.append(f"mount --bind {q(str(d / 'debugfs'))} /sys/kernel/debug")
        if s.cgroup == "v2":
            lines += [
                f"mount -t cgroup2 none {q(str(d / 'cgmnt'))}",
                f"mount --bind {q(str(d / 'cgmnt' / self.cg_dir.name / s.name))} /sys/fs/cgroup",
            ]
        else:
            lines.append("mount -t tmpfs -o size=1m cgroup /sys/fs/cgroup")
            if s.kubepods:
                lines.append(f"mkdir -p /sys/fs/cgroup/cpu/{q(s.kubepods)}")
        if s.userland.missing:  # before /tmp's overlay (its upper layer is below /tmp), and before the binds
            lines.append(
                f"mount -t overlay overlay -o lowerdir=/usr/bin,upperdir={q(str(d / 'usr-bin-upper'))},"
                f"workdir={q(str(d / 'usr-bin-work'))} /usr/bin"
            )
        lines.append(overlay("tmp"))
        lines.append("mkdir -p /run/sshd")
        # The node's daemons live in its own /opt/gnc-lab (its upper layer), so their command lines are the
        # same on every node whatever the lab's folder is called.
        own = d / "upper" / "opt" / "gnc-lab"
        own.mkdir(parents=True, exist_ok=True)

        packages: list[tuple[str, str, str]] = []
        replaced: dict[str, bytes] = {}

        def stand_in(name: str, version: str | None = None) -> str:  # a copy per node, its --version answer appended
            data = (self.root / "bin" / "pause").read_bytes()
            version = version if version is not None else s.versions.get(name)
            if version is not None:
                data += b"GNC-VERSION:" + version.encode() + b"\n"
                if name in s.tarball_over:  # the package's file, then a release tarball's copied over it
                    pkg_version = s.tarball_over[name]
                    owner = package_of(name, pkg_version)
                    assert owner is not None
                    packages.append((*owner, f"/opt/gnc-lab/{name}"))
                    replaced[f"/opt/gnc-lab/{name}"] = data.replace(version.encode(), pkg_version.encode())
                elif name not in s.unpackaged and (owner := package_of(name, version)) is not None:
                    packages.append((*owner, f"/opt/gnc-lab/{name}"))
            (own / name).write_bytes(data)
            (own / name).chmod(0o755)
            return f"/opt/gnc-lab/{name}"

        def launch(name: str, argv: list[str]) -> str:
            """The daemon's command line as the node starts it: in namespaces of its own (a container's), as
            another uid, and with its start line logged to the journal through a stream of journald's."""
            run = [*argv]
            if name in s.daemon_uids:
                uid = s.daemon_uids[name]
                run = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *run]
            if name in s.start_lines:
                line = s.start_lines[name]
                run = ["sh", "-c", 'printf "%s\\n" "$0" >&2; exec "$@"', line, *run]
                if s.journal:  # the stream's peer is this very process, which execs the daemon: journald's _PID
                    run = ["systemd-cat", "-t", name, *run]
            if name in s.contained:
                run = ["unshare", "--pid", "--mount", "--fork", "--mount-proc", *run]
            return " ".join(q(a) for a in run) + " &"

        if s.stack_kib is not None:  # ARG_MAX is a quarter of the stack limit (execve(2))
            lines.append(f"ulimit -s {s.stack_kib}")
        for i, decoy in enumerate(s.decoys):  # first: their PIDs come before the daemons' in every listing
            folder = d / "upper" / "tmp" / "gnc-decoy" / str(i)
            folder.mkdir(parents=True)
            shutil.copy(self.root / "bin" / "decoy", folder / decoy.name)
            for p in (folder, folder / decoy.name):
                os.chown(p, decoy.owner, decoy.owner)
            run = [f"/tmp/gnc-decoy/{i}/{decoy.name}", "serve", *decoy.args]
            if decoy.uid != 0:
                run = ["setpriv", f"--reuid={decoy.uid}", f"--regid={decoy.uid}", "--clear-groups", *run]
            lines.append(" ".join(q(a) for a in run) + " &")
        if s.journal:  # a real journald in the node's own /run and /var, persistent, before any daemon logs
            lines += [
                "mkdir -p /var/log/journal",
                "/lib/systemd/systemd-journald &",
                "for i in $(seq 1 200); do [ -S /run/systemd/journal/stdout ] && break; sleep 0.05; done",
                "journalctl --flush >/dev/null 2>&1 || true",
            ]
            for uid, ident, text in s.journal_lines:  # what the node's users log before the daemons start
                lines.append(" ".join(q(a) for a in ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                                       "systemd-cat", "-t", ident, "echo", text]))  # fmt: skip
        if s.containerd is not None:  # the stand-in, its --version answer appended; its file name makes its comm
            stand_in("containerd", s.containerd)
            run = launch("containerd", ["/opt/gnc-lab/containerd", "--config", "/etc/containerd/config.toml"])
            lines.append(f"(cd {q(s.containerd_cwd)} && exec {run[:-2]}) &")
        for name in s.daemons:  # e.g. nv-fabricmanager: the kernel keeps its first 15 characters as comm
            lines.append(launch(name, [stand_in(name)]))
        if s.kubelet_args:
            lines.append(launch("kubelet", [stand_in("kubelet"), *s.kubelet_args]))
        install_packages(d / "upper", packages, replaced)
        for path in s.after_daemons:  # written after the daemons were installed (EKS: its install script's records)
            now = time.time() + 1
            os.utime(d / "upper" / path.lstrip("/"), (now, now))
        # sshd answers only once every daemon runs as itself: started in the background, one still in its launcher
        # (sh, setpriv, systemd-cat) when the audit comes would be no daemon at all, a verdict that turns with the
        # machine's load (a containerd lab's release read as unknown under the suite's four workers, issue 60)
        started = Counter(d.name[:15] for d in s.decoys)
        for name in ([*(["containerd"] if s.containerd is not None else []), *s.daemons,
                      *(["kubelet"] if s.kubelet_args else [])]):  # fmt: skip
            started[name[:15]] += 1
        for comm, count in started.items():
            lines.append(f"i=0; while [ \"$(cat /proc/[0-9]*/comm 2>/dev/null | grep -cx {q(comm)})\" -lt {count} ] && "
                         "[ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done")  # fmt: skip
        # Last, so that the processes above have the same PIDs on every userland.
        lines += self._userland_mounts(node)
        lines.append(f"exec /usr/sbin/sshd -D -e -f {q(str(d / 'sshd_config'))}")
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        self._claims = _claim([int(n.address.split(".")[2]) for n in self.nodes], str(self.root))
        self.cg_dir.mkdir()
        for node in self.nodes:
            self._write_tree(node)
            if node.spec.cgroup == "v2":
                (self.cg_dir / node.spec.name).mkdir()
                if node.spec.kubepods:
                    (self.cg_dir / node.spec.name / node.spec.kubepods).mkdir()
            host_if, node_if = f"gh{self.id}{node.index}", f"gn{self.id}{node.index}"
            _drop_stale_links(node.address.rsplit(".", 1)[0])
            _run("ip", "netns", "add", node.netns)
            _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if)
            _run("ip", "link", "set", node_if, "netns", node.netns)
            _run("ip", "addr", "add", f"{node.address.rsplit('.', 1)[0]}.1/24", "dev", host_if)
            _run("ip", "link", "set", host_if, "up")
            ns = ["ip", "netns", "exec", node.netns]
            _run(*ns, "ip", "addr", "add", f"{node.address}/24", "dev", node_if)
            _run(*ns, "ip", "link", "set", node_if, "up")
            _run(*ns, "ip", "link", "set", "lo", "up")
            for key, value in node.spec.sysctls.items():
                _run(*ns, "sysctl", "-q", "-w", f"{key}={value}")
            if self.host_ca is None:
                pub = (node.dir / "host_ed25519.pub").read_text().split()
                with self.known_hosts.open("a") as f:
                    f.write(f"{node.address} {pub[0]} {pub[1]}\n")
            if not node.spec.up:
                continue
            (node.dir / "start.sh").write_text(self._startup_script(node))
            log = open(node.dir / "node.log", "wb")  # noqa: SIM115 - kept open for the process
            node.proc = subprocess.Popen(
                [*ns, "unshare", "--mount", "--pid", "--fork", "--mount-proc", "sh", str(node.dir / "start.sh")],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for node in self.nodes:
            if node.spec.up:
                self._wait_listening(node)

    def _wait_listening(self, node: LabNode, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.proc and node.proc.poll() is not None:
                raise RuntimeError(f"lab node {node.spec.name} exited: {(node.dir / 'node.log').read_text()[-2000:]}")
            try:
                with socket.create_connection((node.address, 22), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"lab node {node.spec.name}: sshd did not answer on {node.address}:22 in {timeout} s")

    @contextlib.contextmanager
    def running(self) -> Iterator[Lab]:
        """Start the lab's nodes, and stop them (and remove what was made) however the block ends."""
        try:
            self.start()
            yield self
        finally:
            self.stop()

    # -- using ---------------------------------------------------------------------------------
    def inventory(self, extra_nodes: str = "") -> str:
        lines = [
            "defaults:",
            "  ssh:",
            "    user: root",
            "    port: 22",
            f"    identity_file: {self.client_key}",
            f"    known_hosts: {self.known_hosts}",
            "nodes:",
        ]
        for n in self.nodes:
            lines += [f"  - name: {n.spec.name}", f"    address: {n.address}"]
        return "\n".join(lines) + "\n" + extra_nodes

    def node_pid(self, name: str) -> int:
        """The PID (in this machine's namespace) of the named node's PID 1, its sshd."""
        node = next(n for n in self.nodes if n.spec.name == name)
        assert node.proc is not None
        # node.proc is `unshare` (ip netns exec replaced itself with it); its child is the node's PID 1
        return int(_run("pgrep", "-P", str(node.proc.pid), check=False).stdout.split()[0])

    def node_processes(self, node: LabNode) -> list[str]:
        """Command lines of the processes in the node's PID namespace, through its sshd's pid."""
        assert node.proc is not None
        out = _run("pgrep", "-P", str(node.proc.pid), check=False).stdout.split()
        res = []
        for pid in out:
            res += _run("ps", "-o", "args=", "--ppid", pid, "--pid", pid, check=False).stdout.splitlines()
        return res

    def stop(self) -> None:
        try:
            self._stop_nodes()
        finally:
            _release(self._claims)
            self._claims = []

    def _stop_nodes(self) -> None:
        for node in self.nodes:
            if node.proc and node.proc.poll() is None:
                os.killpg(node.proc.pid, 9)
                node.proc.wait(timeout=10)
        for node in self.nodes:
            _run("ip", "netns", "del", node.netns, check=False)
        deadline = time.monotonic() + 5
        for node in self.nodes:
            cg = self.cg_dir / node.spec.name
            if node.spec.kubepods and (cg / node.spec.kubepods).exists():
                self._rmdir(cg / node.spec.kubepods, deadline)
            if cg.exists():
                self._rmdir(cg, deadline)
        pods = self.cg_dir / "pods"
        if pods.exists():
            for d in [x for x in pods.glob("*/*") if x.is_dir()] + [x for x in pods.glob("*") if x.is_dir()] + [pods]:
                self._rmdir(d, deadline)
        if self.cg_dir.exists():
            self._rmdir(self.cg_dir, deadline)

    @staticmethod
    def _rmdir(path: Path, deadline: float) -> None:
        while True:
            try:
                path.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
