from pathlib import Path

import pytest

from conformance.errors import ParseError
from conformance.facts import kernel
from conformance.facts.runtime import containerd_config, crio_runtime, load_toml, parse_containerd_version, path_glob_match
from conformance.facts.topology import Topology

SAMPLES = Path(__file__).parent / "samples"


def load(name):
    return (SAMPLES / name).read_text()


def containerd_of(files: dict[str, str], release: str | None = None, main: str = "/etc/containerd/config.toml"):
    """The effective containerd runtime config of `files`, merged as `release` would (None: unknown)."""

    def expand(importer, pattern):
        return sorted(p for p in files if path_glob_match(pattern, p))

    rel = parse_containerd_version(f"containerd github.com/containerd/containerd v{release} abc") if release else None
    return containerd_config(main, files.get, expand, rel)


@pytest.mark.parametrize(
    ("name", "release", "systemd"),
    [
        # containerd's own 1.x snippet sets only runc's options. containerd 1.x decodes the handler table into
        # a new entry, so runc has no runtime_type and no pod starts: the real 1.6.20's `config dump` shows
        # runtime_type = "" (tests/test_containerd_real.py); Flatcar hit it (flatcar-archive/coreos-overlay
        # PR 1214), as did containerd issue 6964.
        ("containerd.config.v2.systemdcgroup.containerd-docs.toml", "1.7.27", "broken"),
        # containerd 2.x decodes into a copy of the default runc entry, which keeps io.containerd.runc.v2
        ("containerd.config.v2.systemdcgroup.containerd-docs.toml", "2.0.0", True),
        ("containerd.config.v3.systemdcgroup.containerd-docs.toml", "2.0.0", True),
        # containerd 1.6 starts with a version 3 file but has no io.containerd.cri.v1.runtime plugin: its
        # CRI defaults apply (checked against the real 1.6.20 in tests/test_containerd_real.py)
        ("containerd.config.v3.systemdcgroup.containerd-docs.toml", "1.6.20", False),
    ],
)
def test_containerd_samples(name, release, systemd):
    rc = containerd_of({"/etc/containerd/config.toml": load(name)}, release)
    runc = rc.handlers["runc"]
    assert rc.default_handler == "runc"
    assert (runc.systemd_cgroup if runc.broken is None else "broken") == systemd, runc


def test_a_version_3_file_stops_containerd_1_7_17_and_later():
    rc = containerd_of({"/etc/containerd/config.toml": load("containerd.config.v3.systemdcgroup.containerd-docs.toml")}, "1.7.27")
    assert "config version 3: containerd 1.6.32 and later 1.6, 1.7.17 and later 1.7 supports versions up to 2" in rc.refused


def test_an_unknown_release_is_judged_under_every_release():
    rc = containerd_of({"/etc/containerd/config.toml": load("containerd.config.v3.systemdcgroup.containerd-docs.toml")})
    got = {
        label: (alt.handlers["runc"].systemd_cgroup if not isinstance(alt, ParseError) else "refused")
        for label, alt in rc.alternatives.items()
    }
    assert got == {
        "containerd 1.x before 1.6.29, 1.7.0-1.7.15": False,
        "containerd 1.6.29-1.6.31, 1.7.16": False,
        "containerd 1.6.32 and later 1.6, 1.7.17 and later 1.7": "refused",
        "containerd 2.0-2.2": True,
        "containerd 2.3 and later": True,
    }


def test_containerd_without_option_defaults_to_cgroupfs():
    rc = containerd_of({"/etc/containerd/config.toml": "version = 2\n"})
    assert rc.handlers["runc"].systemd_cgroup is False


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", "1.7.27"),
        ("containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a01713109a8a197d197ff6542", "2.0.0"),
        ("containerd github.com/containerd/containerd v1.6.21-k3s1 abc", "1.6.21"),
        # Debian 12's package (the real binary: tests/test_containerd_real.py)
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", "1.6.20"),
        # Ubuntu's packages (kata-containers/kata-containers issue 2075, kata-containers/tests issue 3267)
        ("containerd github.com/containerd/containerd 1.4.4-0ubuntu1~20.04.2 ", "1.4.4"),
        ("containerd github.com/containerd/containerd 1.3.3-0ubuntu1~18.04.4 ", "1.3.3"),
        # k3s and RKE2 (k3s-io/k3s issue 8605: /var/lib/rancher/k3s/data/current/bin/containerd -v)
        ("containerd github.com/k3s-io/containerd v1.7.7-k3s1.27", "1.7.7"),
        # Amazon Linux package release in the version (awslabs/amazon-eks-ami PR 1937 lists 1.7.11-1.amzn2023.0.1)
        ("containerd github.com/containerd/containerd 1.7.11-1.amzn2023.0.1 64b8a811b07ba6288238eefc14d898ee0b5b99ba", "1.7.11"),
        ("containerd github.com/containerd/containerd/v2 v2.1.0-rc.1 abc", "2.1.0"),
        ("no version here", None),
    ],
)
def test_containerd_version_output(text, release):
    got = parse_containerd_version(text)
    assert (str(got) if got else None) == release


# containerd v2.0.0 cmd/containerd/server/config/config_test.go, TestMergingPluginsWithTwoCriRuntimeDropInConfigs:
# the main file configures runc, the NVIDIA toolkit's drop-in adds only its own handler.
UPSTREAM_RUNC = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""
UPSTREAM_NVIDIA = """
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""


def _upstream_pair(version_line: str = "") -> dict[str, str]:
    return {
        "/etc/containerd/config.toml": version_line + 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + UPSTREAM_RUNC,
        "/etc/containerd/conf.d/99-nvidia.toml": version_line + UPSTREAM_NVIDIA,
    }


def test_containerd_2_deep_merges_a_drop_in_that_adds_a_handler():
    rc = containerd_of(_upstream_pair("version = 2\n"), "2.0.0")
    assert rc.default_handler == "nvidia"
    assert rc.handlers["runc"].systemd_cgroup is True and rc.handlers["nvidia"].systemd_cgroup is True
    assert "containerd 2.0.0: 2.0-2.2 merge rules" in (rc.rules or "")


def test_containerd_1_replaces_the_whole_plugin_section():
    rc = containerd_of(_upstream_pair("version = 2\n"), "1.7.27")
    assert rc.handlers["nvidia"].systemd_cgroup is True
    assert "runc" not in rc.handlers  # the drop-in's CRI section replaced the main file's: runc's options are gone


def test_containerd_2_3_migrates_each_file_then_merges():
    files = {
        "/etc/containerd/config.toml": 'version = 3\nimports = ["conf.d/*.toml"]\n'
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n",
        # a version 2 drop-in (the NVIDIA toolkit's older format) is migrated on its own, then merged
        "/etc/containerd/conf.d/99-nvidia.toml": "version = 2\n" + UPSTREAM_NVIDIA,
    }
    rc = containerd_of(files, "2.3.0")
    assert rc.handlers["runc"].systemd_cgroup is True and rc.handlers["nvidia"].systemd_cgroup is True
    # 2.0-2.2 merge first and migrate the merged document by the LAST file's version: the old CRI section
    # then replaces the runtime section, and runc's options are gone (runc is the built-in default again)
    rc = containerd_of(files, "2.1.4")
    assert rc.handlers["nvidia"].systemd_cgroup is True and rc.handlers["runc"].systemd_cgroup is False


def test_containerd_2_3_refuses_a_drop_in_with_a_higher_version():
    files = {
        "/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n' + UPSTREAM_RUNC,
        "/etc/containerd/conf.d/99-v3.toml": "version = 3\n",
    }
    assert "drop-in config version 3 higher than root config version 2" in containerd_of(files, "2.3.0").refused
    assert (
        containerd_of(files, "2.2.0").handlers["runc"].systemd_cgroup is False
    )  # 2.2: merged; version 3 wins, old section ignored


def test_config_version_4_keeps_the_cri_runtime_path_and_unknown_versions_are_named():
    v4 = "version = 4\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
    assert containerd_of({"/etc/containerd/config.toml": v4}, "2.3.0").handlers["runc"].systemd_cgroup is True
    assert (
        "config version 4: containerd 2.0-2.2 supports versions up to 3"
        in containerd_of({"/etc/containerd/config.toml": v4}, "2.1.0").refused
    )
    five = containerd_of({"/etc/containerd/config.toml": "version = 5\n"}, "2.3.0")
    assert "config version 5: containerd 2.3 and later supports versions up to 4" in five.refused
    with pytest.raises(ParseError, match="config version 'three' is not a version number"):
        containerd_of({"/etc/containerd/config.toml": 'version = "three"\n'}, "2.3.0")


def test_a_missing_literal_import_stops_containerd():
    files = {"/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/extra.toml"]\n'}
    assert "extra.toml: imported by the containerd config but missing" in containerd_of(files, "1.7.0").refused


def test_crio_dropin_sample_and_default():
    name = "crio.conf.d.02-cgroup-manager.cgroupfs.k8s-docs.toml"
    rc = crio_runtime([(name, load(name))])
    assert rc.cgroup_manager == "cgroupfs" and not any(h.systemd_cgroup for h in rc.handlers.values())
    assert crio_runtime([]).cgroup_manager == "systemd"
    later = crio_runtime([(name, load(name)), ("99.conf", '[crio.runtime]\ncgroup_manager = "systemd"\n')])
    assert later.cgroup_manager == "systemd"


def test_bad_toml():
    with pytest.raises(ParseError):
        load_toml("version = = 2", "/etc/containerd/config.toml")


def test_cgroup_samples():
    assert kernel.cgroup_version(load("stat-fc-T.sys-fs-cgroup.cgroup-v2.k8s-docs.txt")) == 2
    assert kernel.cgroup_version(load("stat-fc-T.sys-fs-cgroup.cgroup-v1.k8s-docs.txt")) == 1
    with pytest.raises(ParseError):
        kernel.cgroup_version("ext2/ext3\n")


def test_cgroup_version_from_the_filesystem_magic():
    """`stat -fc %t`: the statfs f_type in hex, as GNU and BusyBox stat print it (the real programs are run
    on real mounts in tests/test_lab_shells.py); snapshots from before it hold the name (samples above)."""
    assert kernel.cgroup_version("63677270\n") == 2
    assert kernel.cgroup_version("1021994\n") == 1
    assert kernel.cgroup_version("27e0eb\n") == 1  # a v1 hierarchy mounted at /sys/fs/cgroup itself
    with pytest.raises(ParseError, match=r"neither cgroup2fs nor tmpfs.*0xef53"):
        kernel.cgroup_version("ef53\n")
    with pytest.raises(ParseError):
        kernel.cgroup_version("UNKNOWN\n")  # BusyBox's name for cgroup2fs: never a guess
    assert kernel.cgroup_fs_name("63677270") == "cgroup2fs (magic 0x63677270)"


def test_kubepods_layout():
    assert kernel.kubepods_driver({"/sys/fs/cgroup/kubepods.slice": True, "/sys/fs/cgroup/kubepods": False})[0] == "systemd"
    assert kernel.kubepods_driver({"/sys/fs/cgroup/cpu/kubepods": True})[0] == "cgroupfs"
    assert kernel.kubepods_driver({"/sys/fs/cgroup/kubepods": False})[0] is None


def test_sysctl_values():
    assert kernel.parse_port_range("32768\t60999\n") == (32768, 60999)
    assert kernel.parse_port_set("30000-32767\n") == set(range(30000, 32768))
    assert kernel.parse_port_set("\n") == set()
    for bad in ("1 2 3", "x y", "70000 80000"):
        with pytest.raises(ParseError):
            kernel.parse_port_range(bad)
    assert kernel.parse_scheduler("[none] mq-deadline kyber\n", "nvme0n1") == "none"
    assert kernel.parse_scheduler("none [mq-deadline]\n", "nvme0n1") == "mq-deadline"


def topo(nodes, siblings, online):
    return Topology(
        frozenset(online), {k: frozenset(v) for k, v in nodes.items()}, {k: frozenset(v) for k, v in siblings.items()}
    )


def test_topology_consistency():
    sib = {c: {c % 2, c % 2 + 2} for c in range(4)}
    ok = topo({0: {0, 2}, 1: {1, 3}}, sib, range(4))
    assert ok.problems() == [] and ok.threads_per_core == 2
    assert ok.whole_cores(frozenset({0, 2, 1})) == [frozenset({0, 2})]
    twice = topo({0: {0, 1, 2}, 1: {1, 3}}, sib, range(4))
    assert any("cpu1 is in node0 and in node1" in p for p in twice.problems())
    asym = topo({0: {0, 1, 2, 3}}, {0: {0, 1}, 1: {1}, 2: {2}, 3: {3}}, range(4))
    assert any("cpu0 lists cpu1" in p for p in asym.problems())
    missing = topo({0: {0, 1}}, sib, range(4))
    assert any("listed by no NUMA node" in p for p in missing.problems())


def test_systemd_cgroup_must_be_a_boolean():
    text = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = "false"\n'
    )
    with pytest.raises(ParseError, match="not true or false"):
        containerd_of({"/etc/containerd/config.toml": text})


def test_memory_only_numa_nodes_are_not_cpu_nodes():
    """A CXL memory expander or a Grace Hopper GPU's memory shows as a NUMA node with an empty cpulist."""
    t = Topology(
        online=frozenset(range(4)), nodes={0: frozenset(range(4)), 1: frozenset()}, siblings={c: frozenset({c}) for c in range(4)}
    )
    assert t.cpu_nodes == [0] and t.cpuless_nodes == [1] and t.problems() == []


# -- CRI-O as CRI-O reads itself (internal/criocli/criocli.go, pkg/config/config.go UpdateFromPath; the same from
# v1.28.0 to v1.36.0): the command line and CONTAINER_* environment over every file, drop-ins walked recursively
def _crio_facts(
    files: dict[str, str], argv: list[str] | None = None, env: str | None = None, walked: list[str] | None = None,
    missing: tuple[str, ...] = (),
):  # fmt: skip
    from conformance.collection.bundle import Bundle, Record
    from conformance.facts.node_facts import NodeFacts

    records = [Record("M", "start", "ok"), Record("C", "uname", "0", b"6.1.0")]
    if argv is not None:
        records += [Record("P", "crio", "77"), Record("F", "/proc/77/cmdline", "ok", "\0".join(argv).encode() + b"\0")]
        records += [Record("L", "/proc/77/exe", "ok", b"/usr/bin/crio"), Record("M", "daemon:77", "ok", b"")]
        records.append(Record("C", "crio-environ", "0", (env or "").encode()))
    records.append(Record("F", "/etc/crio/crio.conf", "missing") if "/etc/crio/crio.conf" not in files else
                   Record("F", "/etc/crio/crio.conf", "ok", files["/etc/crio/crio.conf"].encode()))  # fmt: skip
    for folder in {"/etc/crio/crio.conf.d", *(p.rsplit("/", 1)[0] for p in walked or [])}:
        found = [p for p in (walked if walked is not None else files) if p.startswith(folder + "/")]
        records.append(Record("G", f"walk-all:{folder}", "ok", "\n".join(found).encode()))
    records += [Record("F", p, "ok", t.encode()) for p, t in files.items() if p != "/etc/crio/crio.conf"]
    records += [Record("F", p, "missing") for p in missing]
    records.append(Record("M", "end", "ok"))
    return NodeFacts(Bundle("crio-node", records))


def test_crio_hidden_and_nested_drop_ins_count_in_walk_order():
    """CRI-O applies every file below crio.conf.d, dotfiles and subfolders too, in filepath.Walk's lexical order:
    a hidden `.99-cgroupfs.conf` switches the main file's cgroup manager (it passed before: the shell glob skipped
    it), and a subfolder's file is read, not an error. '.' sorts before digits: the hidden file comes first."""
    d = "/etc/crio/crio.conf.d"
    files = {
        "/etc/crio/crio.conf": '[crio.runtime]\ncgroup_manager = "systemd"\n',
        f"{d}/10-crun.conf": '[crio.runtime]\ndefault_runtime = "crun"\n',
        f"{d}/.99-cgroupfs.conf": '[crio.runtime]\ncgroup_manager = "cgroupfs"\n',
        f"{d}/50-extra/01-nvidia.conf": '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n',
    }
    rc = _crio_facts(files, walked=sorted(p for p in files if p.startswith(d))).runtime_config
    assert rc.cgroup_manager == "cgroupfs" and "nvidia" in rc.handlers
    assert rc.files == ["/etc/crio/crio.conf", f"{d}/.99-cgroupfs.conf", f"{d}/10-crun.conf", f"{d}/50-extra/01-nvidia.conf"]
    later = {**files, f"{d}/20-systemd.conf": '[crio.runtime]\ncgroup_manager = "systemd"\n'}
    assert _crio_facts(later, walked=sorted(p for p in later if p.startswith(d))).runtime_config.cgroup_manager == "systemd"
    assert rc.handlers["crun"].systemd_cgroup is False


def test_crio_command_line_and_environment_override_the_files():
    files = {"/etc/crio/crio.conf.d/10-systemd.conf": '[crio.runtime]\ncgroup_manager = "systemd"\n'}
    flag = _crio_facts(files, ["/usr/bin/crio", "--cgroup-manager=cgroupfs"]).runtime_config
    assert flag.cgroup_manager == "cgroupfs" and flag.handlers["crun"].source == "crio --cgroup-manager"
    env = _crio_facts(files, ["/usr/bin/crio"], "CONTAINER_CGROUP_MANAGER=cgroupfs").runtime_config
    assert env.cgroup_manager == "cgroupfs" and "CONTAINER_CGROUP_MANAGER" in env.handlers["crun"].source
    both = _crio_facts(files, ["/usr/bin/crio", "--cgroup-manager", "systemd"], "CONTAINER_CGROUP_MANAGER=cgroupfs")
    assert both.runtime_config.cgroup_manager == "systemd"  # a flag given wins over its environment variable
    other = {"/srv/crio/d/01.conf": '[crio.runtime]\ncgroup_manager = "cgroupfs"\n', **files}
    moved = _crio_facts(other, ["/usr/bin/crio", "-d", "/srv/crio/d"], walked=["/srv/crio/d/01.conf"]).runtime_config
    assert moved.cgroup_manager == "cgroupfs" and moved.files == ["/srv/crio/d/01.conf"]
    named = _crio_facts(files, ["/usr/bin/crio", "--config", "/srv/nope.conf"], missing=("/srv/nope.conf",)).runtime_config
    assert named.refused and "/srv/nope.conf" in named.refused
    from conformance.facts.runtime import crio_command_line

    assert crio_command_line(["crio", "-c=/a", "--runtimes", "kata:/usr/bin/kata:/run/kata:oci"], {})["runtimes"][0] == [
        "kata:/usr/bin/kata:/run/kata:oci"
    ]


def test_a_containerd_import_the_collector_did_not_return_is_unknown_not_missing():
    """An import the collector did not follow (deeper than its bound) has no record at all: its content is unknown
    (an error), not a missing file, which would read as "containerd refuses to start"; a file the node reported
    missing still does."""
    import pytest as _pytest

    from conformance.collection.bundle import Bundle, Record
    from conformance.errors import FactUnavailable
    from conformance.facts.node_facts import NodeFacts

    main = 'version = 2\nimports = ["/etc/containerd/deep.toml"]\n'

    def facts(*extra: Record) -> NodeFacts:
        package = b"dpkg containerd.io 2.0.0-1"
        records = [
            Record("M", "start", "ok"), Record("P", "containerd", "9"), Record("F", "/proc/9/cmdline", "ok", b"containerd\0"),
            Record("L", "/proc/9/cwd", "ok", b"/"), Record("L", "/proc/9/exe", "ok", b"/usr/bin/containerd"),
            Record("M", "daemon:9", "ok", b""), Record("C", "containerd-package", "0", package),
            Record("F", "/etc/containerd/config.toml", "ok", main.encode()), *extra, Record("M", "end", "ok"),
        ]  # fmt: skip
        return NodeFacts(Bundle("n", records))

    with _pytest.raises(FactUnavailable, match=r"deep\.toml was not collected"):
        facts().runtime_config  # noqa: B018
    refused = facts(Record("F", "/etc/containerd/deep.toml", "missing")).runtime_config
    assert refused.refused and "containerd refuses to start" in refused.refused


def test_crio_default_handler_follows_its_release():
    """Issue 53.20: CRI-O's built-in default handler is runc through 1.30 and crun from 1.31 (pkg/config/
    config_linux.go at the cri-o tags); a file that names one decides whatever the release."""
    from conformance.facts.runtime import crio_runtime

    conf = [("/etc/crio/crio.conf", '[crio.runtime]\ncgroup_manager = "systemd"\n')]
    assert crio_runtime(conf, None, "1.29.11").default_handler == "runc"
    assert crio_runtime(conf, None, "1.30.4").default_handler == "runc"
    assert crio_runtime(conf, None, "1.31.0").default_handler == "crun"
    named = [*conf, ("/etc/crio/crio.conf.d/10-crio.conf", '[crio.runtime]\ndefault_runtime = "crun"\n')]
    assert crio_runtime(named, None, "1.29.11").default_handler == "crun"


def test_containerd_without_a_config_file_runs_on_its_built_in_defaults():
    """Issue 53.18: containerd(8) started without --config and with no /etc/containerd/config.toml runs on its
    built-in defaults (cmd/containerd/command/main.go loads the file only when it exists or --config was given):
    a known configuration, judged (runc without SystemdCgroup); a --config naming a missing file does not start."""
    from conformance.collection.bundle import Bundle, Record
    from conformance.facts.node_facts import NodeFacts

    def facts(argv: bytes) -> NodeFacts:
        records = [
            Record("M", "start", "ok"), Record("P", "containerd", "9"), Record("F", "/proc/9/cmdline", "ok", argv),
            Record("L", "/proc/9/cwd", "ok", b"/"), Record("L", "/proc/9/exe", "ok", b"/usr/bin/containerd"),
            Record("M", "daemon:9", "ok", b""), Record("C", "containerd-package", "0", b"dpkg containerd.io 1.7.27-1"),
            Record("F", "/etc/containerd/config.toml", "missing"), Record("M", "end", "ok"),
        ]  # fmt: skip
        return NodeFacts(Bundle("n", records))

    rc = facts(b"/usr/bin/containerd\0").runtime_config
    assert rc.refused is None and rc.default_handler == "runc"
    assert rc.handlers["runc"].systemd_cgroup is False and "built-in default" in rc.handlers["runc"].source
    given = facts(b"/usr/bin/containerd\0--config\0/etc/containerd/config.toml\0")
    with pytest.raises(Exception, match="containerd config not found"):
        given.runtime_config  # noqa: B018


@pytest.mark.parametrize(
    ("daemon_json", "magic", "driver"),
    [
        ('{"exec-opts": ["native.cgroupdriver=systemd"]}', "1021994", "systemd"),
        ('{"log-driver": "json-file"}', "1021994", "cgroupfs"),  # moby's default on cgroup v1
        (None, "63677270", "systemd"),  # no daemon.json: moby's default on cgroup v2
    ],
    ids=["exec-opt-systemd", "v1-default-cgroupfs", "v2-default-systemd"],
)
def test_a_kubelet_on_cri_dockerd_is_judged_by_dockers_driver(daemon_json, magic, driver):
    """Issue 53.17: a kubelet whose runtime endpoint is cri-dockerd runs its pods in Docker, whose cgroup driver is
    daemon.json's exec-opts native.cgroupdriver, else Docker's default for the cgroup version; the containerd
    that backs Docker (and its CRI section) is not what this kubelet uses."""
    from conformance.collection.bundle import Bundle, Record
    from conformance.facts.node_facts import NodeFacts

    kubelet = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
    kubelet += b"containerRuntimeEndpoint: unix:///var/run/cri-dockerd.sock\n"
    records = [
        Record("M", "start", "ok"), Record("C", "stat-cgroup", "0", magic.encode()),
        Record("P", "kubelet", "5"), Record("F", "/proc/5/cmdline", "ok", b"kubelet\0--config=/var/lib/kubelet/config.yaml\0"),
        Record("L", "/proc/5/exe", "ok", b"/usr/bin/kubelet"), Record("M", "daemon:5", "ok", b""),
        Record("F", "/var/lib/kubelet/config.yaml", "ok", kubelet),
        Record("P", "containerd", "9"), Record("F", "/proc/9/cmdline", "ok", b"containerd\0"),
        Record("L", "/proc/9/exe", "ok", b"/usr/bin/containerd"), Record("M", "daemon:9", "ok", b""),
        Record("P", "dockerd", "11"), Record("F", "/proc/11/cmdline", "ok", b"/usr/bin/dockerd\0"),
        Record("L", "/proc/11/exe", "ok", b"/usr/bin/dockerd"), Record("M", "daemon:11", "ok", b""),
        Record("F", "/etc/containerd/config.toml", "ok", b'disabled_plugins = ["cri"]\n'),
        Record("F", "/etc/docker/daemon.json", *(("ok", daemon_json.encode()) if daemon_json else ("missing",))),
        Record("M", "end", "ok"),
    ]  # fmt: skip
    facts = NodeFacts(Bundle("n", records))
    assert facts.runtime_name[0] == "docker"
    rc = facts.runtime_config
    assert rc.runtime == "docker" and rc.cgroup_manager == driver
    assert rc.handlers["runc"].systemd_cgroup is (driver == "systemd")


def test_a_runtime_the_kubelet_names_that_does_not_run_is_not_judged_by_its_defaults():
    """Issue 59 item 11: a kubelet whose endpoint names cri-dockerd (a borrowed configuration, a half-finished
    migration) on a node where no dockerd runs and CRI-O does: which runtime serves the kubelet is unknown, an error
    naming the endpoint and what runs, never a pass on Docker's default for cgroup v2."""
    from conformance.collection.bundle import Bundle, Record
    from conformance.errors import FactUnavailable
    from conformance.facts.node_facts import NodeFacts

    kubelet = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
    kubelet += b"containerRuntimeEndpoint: unix:///var/run/cri-dockerd.sock\n"
    records = [
        Record("M", "start", "ok"), Record("C", "stat-cgroup", "0", b"63677270"),
        Record("P", "kubelet", "5"), Record("F", "/proc/5/cmdline", "ok", b"kubelet\0--config=/var/lib/kubelet/config.yaml\0"),
        Record("L", "/proc/5/exe", "ok", b"/usr/bin/kubelet"), Record("M", "daemon:5", "ok", b""),
        Record("F", "/var/lib/kubelet/config.yaml", "ok", kubelet),
        Record("P", "crio", "12"), Record("F", "/proc/12/cmdline", "ok", b"/usr/bin/crio\0"),
        Record("L", "/proc/12/exe", "ok", b"/usr/bin/crio"), Record("M", "daemon:12", "ok", b""),
        Record("F", "/etc/docker/daemon.json", "missing"),
        Record("M", "end", "ok"),
    ]  # fmt: skip
    facts = NodeFacts(Bundle("n", records))
    with pytest.raises(FactUnavailable) as e:
        _ = facts.runtime_name
    assert "names cri-dockerd (Docker), and no dockerd runs on the node; what runs: CRI-O (pid 12)" in str(e.value)
    assert "containerRuntimeEndpoint" in str(e.value)


def test_a_runtime_too_old_for_the_kubelets_runtime_config_call_is_named_with_both_releases():
    """Issue 51 item 8: KEP-4033's RuntimeConfig call is answered by containerd 2.0+ and CRI-O 1.28+; a kubelet 1.37
    still falls back to its cgroupDriver where the runtime is older (kubelet_cri_losing_support) and 1.38 will not."""
    from conformance.checks.runtime_rules import runtime_config_support

    problem, _, _ = runtime_config_support((1, 37, 0), "containerd", (1, 7, 27))
    assert problem and "containerd 1.7.27" in problem and "kubelet 1.37.0" in problem and "1.38" in problem
    problem, _, _ = runtime_config_support((1, 38, 1), "containerd", (1, 7, 27))
    assert problem and "does not start" in problem
    assert runtime_config_support((1, 37, 0), "containerd", (2, 0, 0))[:2] == (None, None)
    assert runtime_config_support((1, 36, 4), "containerd", (1, 7, 27))[:2] == (None, None)
    assert runtime_config_support((1, 37, 0), "cri-o", (1, 27, 9))[0]
    assert runtime_config_support(None, "containerd", None)[1]
