"""Credentials inside URLs (``scheme://user:password@host/...``) never reach a record or a message.

Two lines of defence, one rule. The first: :func:`refuse_userinfo`, the door every command-line
argument and flow parameter passes before any work (and :func:`no_userinfo_schema`, the same rule
as the JSON schema a Prefect server enforces on a deployment run's parameters, before it stores the
run): a URL with userinfo is refused in one line that does not repeat it. The second: every URL
that goes into a manifest, a version's hash, the registry, an artifact, a log line or an error
message passes through :func:`redact`. It is the identity on text without userinfo, so the versions
of runs whose URLs carry no credentials are unchanged.

The rule (:data:`USERINFO`), for a URL ``scheme://REST``. RFC 3986 ends the authority at the
first ``/``, ``?`` or ``#``, but a password may hold any of them (about half of AWS secret keys
hold a ``/``), as well as ``@``, whitespace and percent escapes; the authority is then ambiguous,
and the rule resolves every ambiguity towards "this is userinfo":

1. an ``@`` before the first ``/``, ``?``, ``#`` or whitespace: the userinfo runs to the last such
   ``@`` (``ftp://alice:p@ss@host/x``);
2. else (no ``@`` there), a first segment ``user:rest`` whose ``rest`` is not a port (one digit
   or more), with an ``@`` after it on the same line: a host holds no ``:`` but its port's, so this
   is ``user:password`` with a password that the ``/``, ``?``, ``#`` or space cut; the userinfo runs
   to the last ``@`` of the line (``s3://KEY:SECRET/with/slashes@bucket/x.csv``,
   ``ftp://alice:pa ss@host/x``), whatever else that hides of a message.

Anything else has no userinfo: ``s3://bucket/k@v/x.csv`` (an ``@`` in the path),
``http://host:9000/k@v`` (a port), ``http://[::1]:9000/k@v`` (an IPv6 host), a local path. What the
rule cannot tell apart, and reads as a port: a password whose part before its first ``/`` is all
digits (``s3://KEY:123/rest@bucket``): the door accepts it, and a redacted message shows it. What
it reads as rule 1: a password with an ``@`` before its first ``/``, ``?``, ``#`` or space
(``ftp://u:a@b/c@host``, as ``memory://u:p@host/x: /u:p@host/x`` must be); the door refuses it, and a
redacted message shows what follows that ``@`` (``b/c``). Neither occurs in the base64 secret keys of
S3, GCS and Azure (``A-Za-z0-9+/=``). A user name alone (no ``:``) that holds whitespace is read as
ending there.

The floor below both the library (``pearl_model``) and ``storage``, which may not import each
other: both name URLs in their errors. It imports nothing of the project.
"""
from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
# rule 2 first (it runs further); Python's and ECMAScript's regex syntax alike: a JSON schema carries it.
# `prefect deployment run` prints the server's refusal, schema included, as rich markup: no "[" may follow
# a backslash or come before a lowercase letter, "/", "#" or "@" (a tag; "[/..." fails), so "[" and "]"
# inside a class are written \x5b and \x5d.
USERINFO = re.compile(
    r"\b([A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?:[^/?#\s:@\x5b\x5d]*:(?![0-9]+(?:[?/#\s]|$))[^/?#\s@]*[?/#\s][^\n]*"  # 2: user:rest, rest no port, cut; to the line's last @
    r"|[^/?#\s]*)@")  # 1: to the last @ before the first / ? # or whitespace

def no_userinfo_schema(depth: int = 0) -> dict:
    """The rule as a JSON schema (what a Prefect server checks a deployment run's parameters
    against): no string has userinfo; with ``depth``, neither has any string inside lists and dicts
    down to that depth. ``items`` applies to arrays only and ``additionalProperties`` to objects only,
    so the schema fits a string, a list and a free dict alike."""
    schema = {"not": {"type": "string", "pattern": USERINFO.pattern}}
    for _ in range(depth):
        schema = {"not": schema["not"], "items": schema, "additionalProperties": schema}
    return schema


class CredentialsInURL(ValueError):
    """A URL with userinfo where a location was expected: refused before any work."""


def has_userinfo(text: str) -> bool:
    """Whether ``text`` holds a URL with userinfo (the module's rule)."""
    return isinstance(text, str) and "@" in text and USERINFO.search(text) is not None


def refuse_userinfo(value: Any, what: str) -> None:
    """Raise :class:`CredentialsInURL` when ``value`` (a string, or the strings inside dicts, lists and
    tuples, at any depth) holds a URL with userinfo; ``what`` names where it came from (a parameter,
    an argument). The one line names ``what``, never the value."""
    if _holds_userinfo(value):
        raise CredentialsInURL(
            f"{what}: a URL with credentials (scheme://user:password@...) is refused, as they would be "
            "stored and logged with it; give them through the environment, the filesystem's "
            "configuration or a Prefect Secret block (docs/operating.md, credentials)")


def _holds_userinfo(value: Any) -> bool:
    if isinstance(value, str):
        return has_userinfo(value)
    if isinstance(value, dict):
        return any(_holds_userinfo(k) or _holds_userinfo(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_userinfo(v) for v in value)
    return False


def redact(value: Any, *urls: str) -> Any:
    """``value`` with the userinfo of every URL in it replaced by ``***``: strings, and the strings
    inside dicts, lists and tuples (rebuilt, never changed in place); anything else as it is.

    ``urls``: the URLs a message is about. Their userinfo is replaced wherever it appears, also
    without its scheme, as a filesystem's own error may repeat it (fsspec's memory filesystem keeps
    ``user:password@host`` in its paths; a store may quote it decoded)."""
    if isinstance(value, str):
        text = USERINFO.sub(rf"\1{REDACTED}@", value) if "@" in value else value
        # longest first: a shorter candidate is a prefix of a longer one
        for secret in sorted({s for url in urls for s in _userinfo(url)}, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text
    if isinstance(value, dict):
        return {k: redact(v, *urls) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, *urls) for v in value)
    return value


def _userinfo(url: str) -> set[str]:
    """Every reading of ``url``'s userinfo, as written and percent-decoded (empty without any): under
    rule 2 the password may end at any ``@`` of the URL, so each prefix up to one is a candidate (a
    store may quote the userinfo with or without what follows it)."""
    from urllib.parse import unquote

    m = USERINFO.match(url) if isinstance(url, str) else None
    if not m:
        return set()
    start, end = len(m.group(1)), m.end() - 1
    infos = {url[start:at] for at in range(start, end + 1) if url[at] == "@"} if ":" in url[start:end] else set()
    infos.add(url[start:end])
    return {i for info in infos for i in (info, unquote(info)) if i}
