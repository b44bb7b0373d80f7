"""Secrets, recognised and written as ``***``: the one masking mechanism behind
every file llmb writes an environment or a request into (``provenance.json``,
``--dump-env``'s file, a dry run's requests) and every message made from what
a server said.

A secret is recognised two ways (the words and names are ``data/secrets.yaml``):

- by a variable's **name**: ``HF_TOKEN``, ``SSHPASS``, ``GITHUB_PAT``,
  ``REGISTRY_AUTH``, ``SESSION_COOKIE``, or a name the caller declares
  (``--secret NAME``); the whole value is the secret;
- inside any **value**: the password of a URL (``https://user:pw@host`` keeps
  the user, ``https://token@host`` keeps nothing of the user part), a
  credential-bearing query parameter (an Azure SAS ``sig=``, an S3 presigned
  ``X-Amz-Signature=``, ``?token=``, ``?api_key=``), an ``Authorization`` or
  ``Cookie`` header, a ``Bearer``/``Basic`` credential, and any declared
  secret's value where it reappears.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

MASK = "***"

_SCHEME_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/?#'\"<>]*)")
# ``user:password@host[:port]`` without a scheme, as curl and pip accept a proxy.
_BARE_USERINFO = re.compile(
    r"(?<![\w/:@.%+\-])([\w.%+\-]+):([^\s@/,;'\"]+)@(?=[\w.\-]+(?::\d+)?(?:[/\s,;'\"]|$))"
)
_HEADERS = re.compile(
    r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*|(?:set-)?cookie\s*[:=]\s*)[^\r\n]+"
)
_SCHEMES = re.compile(r"(?i)\b((?:bearer|basic)\s+)[^\s\"',;]+")


@lru_cache(maxsize=1)
def _table() -> dict:
    from llmb.paths import packaged_data
    from llmb.yamlio import load_yaml_file

    table = load_yaml_file(packaged_data("secrets.yaml"))
    names = "|".join(
        re.escape(name) for name in sorted(table["query_parameters"], key=len, reverse=True)
    )
    return {
        "parts": frozenset(table["parts"]),
        "not": frozenset(table["not_secrets"]),
        "endings": tuple(table["part_endings"]),
        "query": re.compile(rf"(?i)(?<![\w.\-])((?:{names})=)[^&#\s'\",;]+"),
    }


def is_secret_name(name: str, declared: Iterable[str] = ()) -> bool:
    """Whether the variable ``name`` holds a secret (see the module's docstring)."""
    if name in set(declared):
        return True
    table = _table()
    upper = name.upper()
    if upper in table["not"]:
        return False
    return any(
        part in table["parts"] or part.endswith(table["endings"])
        for part in upper.split("_")
        if part
    )


def _userinfo(match: re.Match) -> str:
    scheme, netloc = match[1], match[2]
    if "@" not in netloc:
        return match[0]
    userinfo, host = netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
    return f"{scheme}{user + ':' if user else ''}{MASK}@{host}"


def mask(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with every secret in it written as ``***``: the values in ``known``
    (the declared secrets' values), and the credentials any value can carry (see the module's
    docstring). Mask before cutting a text short: half a secret is not recognised."""
    for secret in sorted({s for s in known if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    if "://" in text:
        text = _SCHEME_URL.sub(_userinfo, text)
    if "@" in text:
        text = _BARE_USERINFO.sub(lambda m: f"{m[1]}:{MASK}@", text)
    if "=" in text:
        text = _table()["query"].sub(lambda m: m[1] + MASK, text)
    text = _HEADERS.sub(lambda m: m[1] + MASK, text)
    return _SCHEMES.sub(lambda m: m[1] + MASK, text)


def credential_in(value: str) -> str | None:
    """What credential ``value`` carries in the clear (a URL's password, a secret query
    parameter, a header), for refusing it where a secret must not be written; or None."""
    masked = mask(value)
    if masked == value:
        return None
    if (
        "://" in value
        and _SCHEME_URL.sub(_userinfo, value) != value
        or _BARE_USERINFO.search(value)
    ):
        return "a password (or token) inside a URL"
    if _table()["query"].search(value):
        return "a credential in a query parameter"
    return "a credential"
