"""URLs as they may be shown: credentials and query values removed (pure text, no I/O)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """Drop credentials from a URL for display: user:password@ and query values."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if "@" in parts.netloc:
        netloc = "<redacted>@" + netloc
    query = "&".join(f"{q.split('=', 1)[0]}=<redacted>" if "=" in q else q for q in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_text(text: str) -> str:
    """Remove query strings and URL credentials from free text such as an exception message."""
    text = re.sub(r"\?[^\s)'\"]*", "?<redacted>", text)
    return re.sub(r"//[^/\s@]+@", "//<redacted>@", text)
