"""Credentials inside URLs (``scheme://user:password@host/...``) never reach a record or a message.

Every URL that goes into a manifest, a version's hash, the registry, an artifact, a log line or an
error message passes through :func:`redact`. It is the identity on text without userinfo, so the
versions of runs whose URLs carry no credentials are unchanged.

The floor below both the library (``pearl_model``) and ``storage``, which may not import each
other: both name URLs in their errors. It imports nothing of the project.
"""
from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
# userinfo: from "scheme://" to the last "@" before the first "/", "?" or "#" (a password may hold "@")
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")


def redact(value: Any, *urls: str) -> Any:
    """``value`` with the userinfo of every URL in it replaced by ``***``: strings, and the strings
    inside dicts, lists and tuples (rebuilt, never changed in place); anything else as it is.

    ``urls``: the URLs a message is about. Their userinfo is replaced wherever it appears, also
    without its scheme, as a filesystem's own error may repeat it (fsspec's memory filesystem keeps
    ``user:password@host`` in its paths; a store may quote it decoded)."""
    if isinstance(value, str):
        text = _USERINFO.sub(rf"\1{REDACTED}@", value) if "@" in value else value
        for secret in {s for url in urls for s in _userinfo(url)}:
            text = text.replace(secret, REDACTED)
        return text
    if isinstance(value, dict):
        return {k: redact(v, *urls) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, *urls) for v in value)
    return value


def _userinfo(url: str) -> set[str]:
    """The userinfo of ``url`` as written and percent-decoded (empty without any)."""
    from urllib.parse import unquote

    m = _USERINFO.match(url) if isinstance(url, str) else None
    info = m.group(0)[len(m.group(1)):-1] if m else ""
    return {i for i in (info, unquote(info)) if i}
