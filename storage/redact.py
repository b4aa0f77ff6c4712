"""Credentials inside URLs (``scheme://user:password@host/...``) never reach a record.

Every URL that goes into a manifest, a version's hash, the registry, an artifact or a log
passes through :func:`redact`. It is the identity on text without userinfo, so the versions of
runs whose URLs carry no credentials are unchanged.
"""
from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
# userinfo: from "scheme://" to the last "@" before the first "/", "?" or "#" (a password may hold "@")
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")


def redact(value: Any) -> Any:
    """``value`` with the userinfo of every URL in it replaced by ``***``: strings, and the strings
    inside dicts, lists and tuples (rebuilt, never changed in place); anything else as it is."""
    if isinstance(value, str):
        return _USERINFO.sub(rf"\1{REDACTED}@", value) if "@" in value else value
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value
