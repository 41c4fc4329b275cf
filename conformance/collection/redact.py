"""Secrets never leave the collector's bundle: credential values in collected files are replaced
before the bundle is parsed, saved as a snapshot or shown in any report.

By key name: TOML `key = "value"` (containerd registry `auth`, `password`, `identitytoken`; CRI-O),
YAML `key: value` lines and flow mappings, JSON `"key": "value"` pairs, and `--token=...` flags on
command lines. Names are matched whole (`auth`, not `authentication`) or by a credential suffix
(`_password`, `_token`, `_secret`, `-token`...). By shape, wherever they stand: PEM private keys,
JWTs, AWS key ids, GitHub/GitLab/Slack tokens and `sk-` keys.
"""

from __future__ import annotations

import re

from conformance.collection.bundle import Bundle

MARK = "<redacted>"
_NAMES = (
    "password|passwd|pass|auth|identitytoken|identity_token|token|secret|apikey|api_key|api-key|"
    "access_key|secret_key|private_key|client_secret|bearer_token|registrytoken|credentials"
)
_KEY = rf"(?:{_NAMES}|[A-Za-z0-9_.-]*(?:_password|_passwd|_token|_secret|_apikey|_api_key|-password|-token|-secret))"
# TOML / INI:  key = "value"  or  key = 'value'  or  key = bare
_TOML = re.compile(rf"""(?im)^(\s*["']?{_KEY}["']?\s*=\s*)("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s#\n]+)""")
# YAML:  key: value   (a value on the same line; a nested mapping has none and is left alone)
_YAML = re.compile(rf"""(?im)^(\s*-?\s*["']?{_KEY}["']?\s*:[ \t]+)(?![|>]\s*$)([^\s#\n][^#\n]*)""")
# YAML flow mappings:  {key: value, ...}
_FLOW = re.compile(rf"""(?i)([{{,]\s*["']?{_KEY}["']?\s*:\s*)(?!\s*[{{\[])([^,}}\n]+)""")
# JSON:  "key": "value"
_JSON = re.compile(rf"""(?i)("{_KEY}"\s*:\s*)"(?:[^"\\]|\\.)*\"""")


# Values redacted by their shape, whatever key holds them.
_SHAPES = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"  # PEM private keys
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs (service-account tokens)
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}\b"  # GitHub tokens
    r"|\bglpat-[A-Za-z0-9_-]{20,}\b"  # GitLab tokens
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}\b"  # Slack tokens
    r"|\bsk-[A-Za-z0-9_-]{20,}\b"  # API secret keys of the sk- family
)


def redact_text(text: str) -> tuple[str, int]:
    """Replace credential values in config text. Returns (text, how many values were replaced)."""
    count = 0

    def keep_key(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f'{m.group(1)}"{MARK}"'

    text = _TOML.sub(keep_key, text)
    text = _JSON.sub(keep_key, text)
    text = _YAML.sub(keep_key, text)
    text = _FLOW.sub(keep_key, text)
    text, shaped = _SHAPES.subn(MARK, text)
    return text, count + shaped


def redact_bundle(bundle: Bundle) -> int:
    """Redact every text file record of a bundle in place. Returns the number of values replaced."""
    total = 0
    for rec in bundle.records:
        if rec.kind != "F" or not rec.data or rec.name.startswith(("/sys/", "/proc/sys/")):
            continue
        if rec.name.startswith("/proc/") and rec.name.endswith("/cmdline"):
            rec.data, n = _redact_cmdline(rec.data)
            total += n
            continue
        try:
            text = rec.data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        new, n = redact_text(text)
        if n:
            rec.data = new.encode("utf-8")
            total += n
    return total


_FLAG = re.compile(rf"(?i)^(--?{_KEY})(=.*)?$")


def _redact_cmdline(raw: bytes) -> tuple[bytes, int]:
    """`--token=abc` or `--token abc` on a command line."""
    args = raw.split(b"\0")
    count = 0
    out: list[bytes] = []
    hide_next = False
    for a in args:
        if hide_next and a and not a.startswith(b"-"):
            out.append(MARK.encode())
            count += 1
            hide_next = False
            continue
        hide_next = False
        m = _FLAG.match(a.decode("utf-8", "replace"))
        if m and m.group(2):
            out.append(f"{m.group(1)}={MARK}".encode())
            count += 1
        else:
            out.append(a)
            hide_next = bool(m)
    return b"\0".join(out), count


_SECRET_NAME = re.compile(rf"(?i)^{_KEY}$")


def env_value(name: str, value: str) -> str:
    """An environment value as evidence may show it: redacted when the name or the value looks secret."""
    if _SECRET_NAME.match(name):
        return MARK
    return _SHAPES.sub(MARK, value)
