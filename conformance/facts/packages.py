"""Installed packages as the node's package managers record them: dpkg's status file (dpkg(1): `Package:`,
`Status: install ok installed`, `Version:` stanzas, one per architecture of a Multi-Arch package) and the
collector's `rpm -qa --queryformat` lines; each selected by name as dpkg-query and rpm -q select, and
compared with its own manager's version order."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from conformance.errors import ParseError, clipped
from conformance.facts.debversion import satisfies as deb_satisfies
from conformance.facts.rpmversion import satisfies as rpm_satisfies


@dataclass(frozen=True)
class Package:
    """One installed (or, for dpkg, known) instance of a package, in the database that holds it."""

    manager: str  # "dpkg" or "rpm"
    name: str
    arch: str  # "" when the database names none
    status: str  # dpkg's Status field (want, error flag, state); "installed" for rpm's
    version: str  # dpkg's Version; rpm's [epoch:]version-release

    @property
    def installed(self) -> bool:
        return self.status.split()[-1:] == ["installed"]  # dpkg-query's ${db:Status-Status}; rpm lists installed only

    def satisfies(self, constraint: str) -> bool:
        """The manager's own comparison: dpkg's deb-version(7) order, or rpm's rpmvercmp."""
        return (rpm_satisfies if self.manager == "rpm" else deb_satisfies)(self.version, constraint)

    def __str__(self) -> str:
        return f"{self.name}:{self.arch}" if self.arch else self.name


@functools.lru_cache(maxsize=4)
def dpkg_packages(text: str) -> tuple[Package, ...]:
    """Every package instance in dpkg's status file (stanzas separated by blank lines). A Multi-Arch
    package has one stanza per architecture (libfoo:amd64 and libfoo:i386), so the name alone is no key."""
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.M))
        if "Package" in fields:
            out.append(
                Package(
                    "dpkg",
                    fields["Package"].strip(),
                    fields.get("Architecture", "").strip(),
                    fields.get("Status", "").strip(),
                    fields.get("Version", "").strip(),
                )
            )
    return tuple(out)


@functools.lru_cache(maxsize=4)
def rpm_packages(text: str) -> tuple[Package, ...]:
    """The collector's `rpm -qa --queryformat '%{NAME} %{ARCH} EPOCH|- %{VERSION} %{RELEASE}'` lines. rpm
    lists one header per installed instance: two architectures, or install-only packages such as kernel-core
    with several versions at once, are several lines of one name."""
    out = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) != 5:
            raise ParseError(f"rpm -qa: unexpected line {clipped(line)!r} (expected NAME ARCH EPOCH VERSION RELEASE)")
        name, arch, epoch, version, release = parts
        evr = (f"{epoch}:" if epoch != "-" else "") + f"{version}-{release}"
        out.append(Package("rpm", name, "" if arch == "(none)" else arch, "installed", evr))
    return tuple(out)


def dpkg_lookup(packages: tuple[Package, ...], spec: str) -> list[Package]:
    """The instances a package name selects as dpkg-query does (dpkg-query(1), "package-name-pattern";
    dpkg(1) pkg-spec): `name` is every architecture's instance, `name:arch` that architecture's only
    (`name:all` for an architecture-independent package)."""
    name, _, arch = spec.partition(":")
    return [p for p in packages if p.name == name and (not arch or p.arch == arch)]


def rpm_lookup(packages: tuple[Package, ...], spec: str) -> list[Package]:
    """The instances `rpm -q SPEC` selects by name: `name` is every instance, `name.arch` an architecture's
    (rpm tries the whole label as a name first: python3.11 is a name; lib/rpmdb.c rpmdbIndexIterator over
    NAME, then the name.arch split in rpmdbInitIterator's label handling). `name:arch`, the spelling that
    package rules share with dpkg, selects the same as `name.arch`."""
    if ":" in spec:
        return dpkg_lookup(packages, spec)
    exact = [p for p in packages if p.name == spec]
    if exact or "." not in spec:
        return exact
    name, _, arch = spec.rpartition(".")
    return [p for p in packages if p.name == name and p.arch == arch]
