"""`conformance profiles`: the bundled profiles."""

from __future__ import annotations

import argparse

from conformance.commands.common import EXIT_OK, Command, opt

PROFILES = Command(
    "profiles",
    help="list bundled profiles, or show a profile's effective values",
    epilog="examples:\n  conformance profiles list\n  conformance profiles show a100-training\n"
    "  conformance profiles show ./my-profile.yaml",
    action_dest="profiles_command",
    actions=(
        Command("list", help="bundled profile names and descriptions"),
        Command("show", help="effective values (after extends) as YAML", options=(opt("profile", metavar="NAME|FILE"),)),
    ),
)


def cmd_profiles(args: argparse.Namespace) -> int:
    import yaml

    from conformance.config.profile import bundled_names, load_profile

    if args.profiles_command == "list":
        for name in bundled_names():
            print(f"{name:<24} {load_profile(name).values.get('description', '')}")
        return EXIT_OK
    p = load_profile(args.profile)
    print(f"# profile {p.name} ({p.source}), with everything it extends applied")
    print(yaml.safe_dump(p.values, sort_keys=False, default_flow_style=False).rstrip())
    return EXIT_OK
