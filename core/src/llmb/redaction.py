"""Secrets, recognised and written as ``***``: the one masking mechanism behind
every file llmb writes (``llmb.runs.experiment.write_json`` and ``write_text``
pass everything through ``scrub``/``mask``: ``run.json``, ``recipe.json``,
``provenance.json``, ``--dump-env``'s file, the job records), ``llmb archive``'s
members, a dry run's requests, and every message made from what a server said.

A secret is recognised three ways (the words, names, commands and token formats are
``data/secrets.yaml``):

- by a variable's **name**: ``HF_TOKEN``, ``SSHPASS``, ``GITHUB_PAT``,
  ``REGISTRY_AUTH``, ``SESSION_COOKIE``, ``CI_JOB_JWT``, ``SLACK_WEBHOOK_URL``,
  ``DB_CREDS``, ``HFTOKENB64`` (an encoding's name after the word), ``OTP_SEED``
  (SEED only beside OTP, MFA, WALLET...: not ``RANDOM_SEED``), or a name the caller
  declares (``--secret NAME``, a backend's credentials: ``declare``); the whole value is
  the secret;
- inside any **value**: a credential in its vendor's own format, whatever names it
  (``hf_...``, ``ghp_...``, ``github_pat_...``, ``AKIA...``, ``xoxb-...``, ``sk-...``,
  ``glpat-...``, ``nvapi-...``: a prefix, an alphabet and a length each); a setting named as
  a secret by its last word (``--password=X``, ``--token X``, ``--api-key=X``,
  ``password: X``, ``password<TAB>X``, ``api-key X``, ``{"password": "X"}``,
  ``logger.comet_api_key=X``; not a name that ends a URL's or a file's path, ``POST /token: the
  TLS certificate...``, nor a word of a sentence, ``invalid api-key provided``), the password of a URL
  (``https://user:pw@host`` keeps the user, also when the password holds ``/``
  or ``#``; ``https://token@host`` keeps nothing of the user part), a
  credential-bearing query parameter (an Azure SAS ``sig=``, an S3 presigned
  ``X-Amz-Signature=``, ``?token=``), an ``Authorization`` or ``Cookie``
  header, a ``Bearer``/``Basic`` credential, a JSON Web Token, ``mysql -pX``,
  ``sshpass -p X``, ``docker login -p X`` and ``curl -u user:X``;
- by its **value** where it reappears under any name: the values of the secret
  variables of this process's environment (``environment_secrets``: HF_TOKEN's
  value given as ``--env FOO=...`` is masked in FOO too) and the credentials
  found inside its other variables (a proxy's password).

Every pattern costs time linear in the text's length (no unbounded repetition is
tried again from many starting points), and the case-insensitive ones run on a
lower-cased copy: a log of hundreds of megabytes is masked at tens of MB/s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

MASK = "***"
# shorter secret values are not searched for in other text: they would mask innocent text
MIN_SECRET = 6
_QUOTED_MAX = 1024  # characters: a quoted secret longer than this is masked up to the line's end
_NAME_MAX = 256  # characters of a setting's name looked at before its credential word

_declared: set[str] = set()

# ``user:password@host[:port]`` without a scheme, as curl and pip accept a proxy.
_BARE_USERINFO = re.compile(
    r"(?<![\w/:@.%+\-])[\w.%+\-]+:([^\s@/,;'\"]{1,256})@(?=[\w.\-]{1,253}(?::\d{1,5})?(?:[/\s,;'\"]|$))"
)
# on the lower-cased text
_HEADERS = re.compile(r"\b(?:(?:proxy-)?authorization|(?:set-)?cookie)[ \t]*[:=][ \t]*([^\r\n]+)")
_SCHEMES = re.compile(r"\b(?:bearer|basic)[ \t]+([^\s\"',;]+)")
_JWT = re.compile(r"(?<![\w\-])eyJ[\w\-]+\.eyJ[\w\-]+\.[\w\-]*")
_UNQUOTED = re.compile(r"[^\s'\"&,;}\]\\]+")
_FLAG_VALUE = re.compile(r"[^\s'\"]+")
_AFTER_NAME = re.compile(r"(\\?[\"']?)([ \t]*)([:=]?)[ \t]*")
_NOT_A_VALUE = re.compile(r"(?i)(?:\*\*\*|\$.*|null|none|true|false)$")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_PORT = re.compile(r"\d+[/?#]")
_A_WORD = re.compile(r"[a-z]{1,12}")  # a word of a sentence, not a credential
_SENTENCE_GOES_ON = re.compile(r"[ \t]+[A-Za-z(]")
_END_OF_WORD = re.compile(r"[\s'\"<>]")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_COUNTS = frozenset({"TOKENS", "KEYS"})  # plurals count things: max_tokens=4096, num_keys=8
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@lru_cache(maxsize=1)
def _table() -> dict:
    from llmb.paths import packaged_data
    from llmb.yamlio import load_yaml_file

    table = load_yaml_file(packaged_data("secrets.yaml"))

    def either(words) -> str:
        return "|".join(re.escape(w.lower()) for w in sorted(words, key=len, reverse=True))

    qualified = {word: tuple(q) for word, q in table["qualified_parts"].items()}
    encodings = table["encodings"]
    words = {*table["parts"], *table["part_endings"], *qualified, *encodings}
    return {
        "parts": frozenset(table["parts"]),
        "not": frozenset(table["not_secrets"]),
        "endings": tuple(table["part_endings"]),
        "qualified": qualified,
        # HFTOKENB64, token_b64, apiKeyBase64: the name without its encoding
        "encoding": re.compile(rf"(?i)[_\-.]?(?:{either(encodings)})$"),
        # all on the lower-cased text
        "query": re.compile(rf"(?:{either(table['query_parameters'])})=([^&#\s'\",;]+)"),
        "command_flags": tuple(_command_rule(rule) for rule in table["command_flags"]),
        # a credential word ending a setting's name: NAME= NAME: "NAME": --NAME VALUE, NAME<TAB>VALUE
        "setting": re.compile(rf"(?:{either(words)})(?=\\?[\"']?[ \t]*[:=]|[ \t])"),
        "formats": (formats := _token_formats(table)),
        "token_patterns": _token_patterns(formats),
    }


@dataclass(frozen=True)
class _CommandRule:
    words: tuple[str, ...]  # each command's first word, lower-cased: looked for before the pattern
    flags: tuple[str, ...]  # looked for before the pattern
    command: re.Pattern  # on the lower-cased text
    flag: re.Pattern  # on the text; group 1 is the password


_VALUE = r"['\"]?([^\s'\"]+)"  # the password: group 1, after an opening quote
_USER_PASSWORD = r"['\"]?[^\s'\":]*:([^\s'\"]+)"  # user:password, the password group 1


def _flag_pattern(form: str, flags: list[str]) -> str:
    """The flags of ``form`` and the password each carries (group 1)."""
    flags = sorted(flags, key=len, reverse=True)
    either = "|".join(re.escape(f) for f in flags)
    long = "|".join(re.escape(f) for f in flags if f.startswith("--"))
    short = "|".join(re.escape(f) for f in flags if not f.startswith("--"))
    if form == "attached":  # -pVALUE
        return rf"(?:{either}){_VALUE}"
    if form == "attached_or_next":  # -pVALUE, -p VALUE
        return rf"(?:{either})(?:[ \t]+)?{_VALUE}"
    if form == "user_password":  # -u user:pw, -uuser:pw, --user user:pw, --user=user:pw
        leads = [f"(?:{long})(?:[ \t]+|=)"] if long else []
        leads += [f"(?:{short})[ \t]*"] if short else []
        return rf"(?:{'|'.join(leads)}){_USER_PASSWORD}"
    raise ValueError(f"secrets.yaml: command_flags: unknown form {form!r}")


def _command_rule(rule: dict) -> _CommandRule:
    commands = sorted(rule["commands"], key=len, reverse=True)
    blanks = r"[ \t]+"
    spelled = "|".join(blanks.join(map(re.escape, c.lower().split())) for c in commands)
    return _CommandRule(
        words=tuple(sorted({c.split()[0].lower() for c in commands})),
        flags=tuple(rule["flags"]),
        command=re.compile(rf"(?<![\w.\-])(?:{spelled})(?![\w.\-])"),
        flag=re.compile(rf"(?<![\w\-]){_flag_pattern(rule['form'], rule['flags'])}"),
    )


@dataclass(frozen=True)
class TokenFormat:
    """A credential recognised by its vendor's format (``data/secrets.yaml``: ``token_formats``)."""

    name: str  # what a refusal calls it: "a GitHub token"
    document: str  # the vendor's public document that gives the format
    prefixes: tuple[str, ...]
    alphabet: str  # a character class's inside: A-Za-z0-9_
    least: int  # the body's length (after the prefix)
    most: int | None


def _token_formats(table: dict) -> tuple[TokenFormat, ...]:
    return tuple(
        TokenFormat(
            name=entry["name"],
            document=entry["document"],
            prefixes=tuple(entry["prefixes"]),
            alphabet=table["alphabets"][entry["alphabet"]],
            least=entry["length"][0],
            most=entry["length"][1],
        )
        for entry in table["token_formats"]
    )


def _token_patterns(formats: tuple[TokenFormat, ...]) -> tuple[tuple[re.Pattern, dict], ...]:
    """The formats as few patterns, one for the prefixes that begin with one character (a pattern
    that begins with a literal is searched for fast: one pass over a text per pattern), each with
    the format of each named group. A prefix is not taken right after a letter, a digit or _."""
    leads: dict[str, list[str]] = {}
    names: dict[str, dict[str, str]] = {}
    for number, form in enumerate(formats):
        body = (
            f"[{form.alphabet}]{{{form.least},{'' if form.most is None else form.most}}}"
            f"(?![{form.alphabet}])"
        )
        for lead in sorted({p[0] for p in form.prefixes}):
            rests = "|".join(
                rf"{re.escape(p[1:])}(?<![A-Za-z0-9_]{re.escape(p)})"
                for p in sorted(form.prefixes, key=len, reverse=True)
                if p[0] == lead
            )
            leads.setdefault(lead, []).append(f"(?P<f{number}>(?:{rests}){body})")
            names.setdefault(lead, {})[f"f{number}"] = form.name
    return tuple(
        (re.compile(rf"{re.escape(lead)}(?:{'|'.join(alternatives)})"), names[lead])
        for lead, alternatives in leads.items()
    )


def token_formats() -> tuple[TokenFormat, ...]:
    """The vendors' token formats recognised inside any value."""
    return _table()["formats"]


def declare(names: Iterable[str]) -> None:
    """Make ``names`` secrets for this process (``--secret NAME``, a backend's credentials): every
    later ``is_secret_name``, ``environment_secrets`` and file written treats them as such."""
    _declared.update(n for n in names if n)


def _is_secret_part(part: str, table: dict, name: str) -> bool:
    """Whether ``part`` (upper case) of the name ``name`` (upper case) is a credential word: one of
    the parts, ending with one of the endings, read without an encoding it ends with (HFTOKENB64);
    or ending with a qualified word (SEED) that a qualifier stands beside anywhere in the name."""
    bare = table["encoding"].sub("", part)
    if not bare:
        return False
    if bare in table["parts"] or bare.endswith(table["endings"]):
        return True
    return any(
        bare.endswith(word) and any(q in name for q in qualifiers)
        for word, qualifiers in table["qualified"].items()
    )


def is_secret_name(name: str, declared: Iterable[str] = ()) -> bool:
    """Whether the variable ``name`` holds a secret (see the module's docstring)."""
    if name in _declared or name in set(declared):
        return True
    table = _table()
    upper = name.upper()
    if upper in table["not"]:
        return False
    return any(_is_secret_part(part, table, upper) for part in upper.split("_") if part)


def is_secret_key(key: str) -> bool:
    """Whether a setting named ``key`` inside a value (``--api-key``, ``password``,
    ``logger.comet_api_key``, ``apiKey``) holds a secret: its last word is a credential word.
    Stricter than a variable's name: ``--key-file`` and ``linear_key_head_dim`` are not."""
    key = key.lstrip("-\\\"'")
    return bool(key) and (key in _declared or _is_secret_key(key))


@lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    table = _table()
    last = re.split(r"[.:/]", key)[-1]
    if re.sub(r"[\-.]", "_", last).upper() in table["not"]:
        return False
    # token_b64, apiKeyBase64: the word before the encoding's name
    words = _WORDS.findall(table["encoding"].sub("", last))
    if not words:
        return False
    word = words[-1].upper()
    return word not in _COUNTS and _is_secret_part(word, table, last.upper())


# ------------------------------------------------------------------ finding secrets in a text


def _url_spans(text: str, spans: list) -> None:
    """The userinfo of ``scheme://user:password@host``: the password (which may hold ``/``, ``#``
    or ``?``), or the whole user part when it has no password (``https://token@host``)."""
    start = text.find("://")
    word_end = -1
    while start != -1:
        if start >= word_end:
            found = _END_OF_WORD.search(text, start)
            word_end = found.start() if found else len(text)
        after = start + 3
        following = text.find("://", after, word_end)
        bound = following if following != -1 else word_end
        at = text.find("@", after, bound)
        if at > after:
            user, colon, password = text[after:at].partition(":")
            if any(c in user for c in "/?#"):
                pass  # an @ in the path or the query: https://host/a@b
            elif not colon:
                spans.append((after, at, "url"))
            elif password and not _PORT.match(password):  # https://host:8080/a@b is a port
                spans.append((after + len(user) + 1 if user else after, at, "url"))
        start = following if following != -1 else text.find("://", word_end)


def _value_end(text: str, at: int, flag: bool) -> tuple[int, int]:
    """(start, end) of the value that begins at ``at``: inside its quotes when quoted, else the word."""
    quote = '\\"' if text.startswith('\\"', at) else text[at : at + 1]
    if quote in ('"', "'", '\\"'):
        inner = at + len(quote)
        close = text.find(quote, inner, inner + _QUOTED_MAX)
        if close == -1:
            line = text.find("\n", inner)
            close = len(text) if line == -1 else line
        return inner, close
    found = (_FLAG_VALUE if flag else _UNQUOTED).match(text, at)
    return at, found.end() if found else at


def _setting_spans(text: str, lower: str, spans: list) -> None:
    """The values of settings named as secrets: ``--password=X``, ``--token X``, ``password: X``,
    ``"password": "X"``, ``logger.comet_api_key=X``, ``apiKey=X``, ``password<TAB>X``, ``api-key X``.
    Not a name that ends a path (``POST /token: the TLS certificate...``), nor a word of a sentence
    (``invalid token: the server...``, ``invalid api-key provided``)."""
    masked_to = 0
    for found in _table()["setting"].finditer(lower):
        if found.start() < masked_to:
            continue  # inside the value just masked
        start, limit = found.start(), max(found.start() - _NAME_MAX, masked_to, 0)
        while start > limit and text[start - 1] in _NAME_CHARS:
            start -= 1
        if start > 0 and text[start - 1] == "/":
            continue  # a URL's or a file's path: POST /token: ..., /etc/app/password: No such file
        name = text[start : found.end()]
        after = _AFTER_NAME.match(text, found.end())
        blanks, separator, begin = after[2], after[3], after.end()
        flag = name.startswith("-")
        # without : or =, a value follows a flag (--token X), a tab (password<TAB>X, as netrc and
        # tab-separated fields have it) or a name of two words or more (api-key X)
        if not separator and not (blanks and (flag or "\t" in blanks or _two_words(name))):
            continue
        if not is_secret_key(name):
            continue
        if not separator and (begin >= len(text) or text[begin] == "-"):
            continue  # --token --next-flag: a flag without a value
        inner, end = _value_end(text, begin, flag)
        value = text[inner:end]
        if not value or _NOT_A_VALUE.match(value):
            continue
        if not flag and inner == begin and _in_a_sentence(text, value, end, separator, blanks):
            continue
        spans.append((inner, end, "setting"))
        masked_to = end


def _two_words(name: str) -> bool:
    return len(_WORDS.findall(name.lstrip("-\\\"'"))) >= 2


def _in_a_sentence(text: str, value: str, end: int, separator: str, blanks: str) -> bool:
    """Whether the unquoted ``value`` after a setting's name is a word of a sentence: a short
    lower-case word after a blank (``invalid api-key provided``) or after a colon with the sentence
    going on (``invalid token: the server said...``); never after ``=`` or a tab."""
    if not _A_WORD.fullmatch(value):
        return False
    if not separator:
        return "\t" not in blanks
    return separator == ":" and bool(_SENTENCE_GOES_ON.match(text, end))


def _command_spans(text: str, lower: str, spans: list) -> None:
    """``mysql -pPASSWORD``, ``sshpass -p PASSWORD``, ``docker login -p PASSWORD``, ``curl -u
    user:PASSWORD``: the flags after the command, on its line."""
    seen: dict[
        str, bool
    ] = {}  # whether the text holds a flag, a command's word: each looked for once

    def holds(words, where) -> bool:
        for word in words:
            if word not in seen:
                seen[word] = word in where
            if seen[word]:
                return True
        return False

    for rule in _table()["command_flags"]:
        if not holds(rule.flags, text) or not holds(rule.words, lower):
            continue
        scanned_to = 0
        for found in rule.command.finditer(lower):
            if found.end() < scanned_to:
                continue  # the rest of this line was read after an earlier command
            line_end = text.find("\n", found.end())
            scanned_to = len(text) if line_end == -1 else line_end
            spans += [
                (flag.start(1), flag.end(1), "password")
                for flag in rule.flag.finditer(text, found.end(), scanned_to)
            ]


def _token_spans(text: str, spans: list) -> None:
    """Credentials in their vendors' formats (``token_formats``): ``hf_...``, ``ghp_...``, ``AKIA...``."""
    for pattern, names in _table()["token_patterns"]:
        spans += [
            (m.start(), m.end(), f"format:{names[m.lastgroup]}") for m in pattern.finditer(text)
        ]


def _a_plain_variable(name: str, table: dict) -> bool:
    return name.isupper() and name in table["not"]


def _spans(text: str, known: Iterable[str]) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    for secret in {s for s in known if s}:
        at = text.find(secret)
        while at != -1:
            spans.append((at, at + len(secret), "value"))
            at = text.find(secret, at + len(secret))
    table = _table()
    lower = text.lower()
    if len(lower) != len(text):  # a letter lowered into two (U+0130): keep the text's positions
        lower = text.translate(_ASCII_LOWER)
    if "://" in text:
        _url_spans(text, spans)
    if "@" in text:
        spans += [(m.start(1), m.end(1), "url") for m in _BARE_USERINFO.finditer(text)]
    if "=" in text:
        spans += [
            (m.start(1), m.end(1), "query")
            for m in table["query"].finditer(lower)
            if m.start() == 0 or text[m.start() - 1] not in _NAME_CHARS
            if not m[1].startswith("$")  # a shell's expansion (code=$?), not a value
            if not _a_plain_variable(text[m.start() : m.start(1) - 1], table)  # PWD=/home/me
        ]
    if "authorization" in lower or "cookie" in lower:
        spans += [(m.start(1), m.end(1), "header") for m in _HEADERS.finditer(lower)]
    if "bearer" in lower or "basic" in lower:
        spans += [(m.start(1), m.end(1), "header") for m in _SCHEMES.finditer(lower)]
    if "eyJ" in text:
        spans += [(m.start(), m.end(), "token") for m in _JWT.finditer(text)]
    _command_spans(text, lower, spans)
    _token_spans(text, spans)
    _setting_spans(text, lower, spans)
    return [s for s in spans if s[1] > s[0] and text[s[0] : s[1]] != MASK]


def mask(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with every secret in it written as ``***``: the values in ``known`` (the declared
    secrets' values: ``environment_secrets``), and the credentials any value can carry (see the
    module's docstring). Mask before cutting a text short: half a secret is not recognised."""
    known = tuple(sorted({s for s in known if s}))
    if len(text) <= _REMEMBERED_MAX:
        return _mask_remembered(text, known)
    return _masked(text, known)


# mask is a function of its text and the known values alone: a short text's answer is remembered. The
# records llmb archive scrubs repeat their values run after run (the same recipe fields, dtypes and
# versions): 4.5 million strings for 10,000 runs, most of its time (benchmarks/results_at_scale.py).
_REMEMBERED_MAX = 512


@lru_cache(maxsize=1 << 16)
def _mask_remembered(text: str, known: tuple[str, ...]) -> str:
    return _masked(text, known)


def _masked(text: str, known: tuple[str, ...]) -> str:
    spans = sorted(_spans(text, known))
    if not spans:
        return text
    out, at = [], 0
    for begin, end, _ in spans:
        if end <= at:
            continue  # inside the secret just masked
        if begin > at or not out:
            out += [text[at:begin], MASK]
        at = end
    out.append(text[at:])
    return "".join(out)


_KINDS = {
    "url": "a password (or token) inside a URL",
    "query": "a credential in a query parameter",
    "value": "the value of a secret variable of this shell",
}


def credential_in(value: str, known: Iterable[str] = ()) -> str | None:
    """What credential ``value`` carries in the clear (a URL's password, a secret query parameter,
    a ``--password=`` setting, a header, one of the ``known`` secret values), for refusing it where
    a secret must not be written; or None."""
    kinds = {kind for _, _, kind in _spans(value, known)}
    if not kinds:
        return None
    named = next((_KINDS[k] for k in ("url", "query", "value") if k in kinds), None)
    formats = sorted(k.removeprefix("format:") for k in kinds if k.startswith("format:"))
    return named or (formats[0] if formats else "a credential")


# ------------------------------------------------------------------ the environment's secrets


def environment_secrets(
    environ: Mapping[str, str] | None = None, declared: Iterable[str] = ()
) -> tuple[str, ...]:
    """The secret values of ``environ`` (this process's environment by default) to mask wherever
    they reappear: the values of its secret variables (by name, or declared), and the credentials
    found inside its other values (a proxy's password); none shorter than ``MIN_SECRET``, and no
    path of an existing file (``SSH_AUTH_SOCK``, ``AWS_SHARED_CREDENTIALS_FILE``: the file is
    the secret, not its name)."""
    environ = os.environ if environ is None else environ
    return _environment_secrets(tuple(sorted(environ.items())), frozenset({*declared, *_declared}))


@lru_cache(maxsize=8)
def _environment_secrets(items: tuple, declared: frozenset) -> tuple[str, ...]:
    found = set()
    for name, value in items:
        if is_secret_name(name, declared):
            found.add(value)
        else:
            found.update(value[b:e] for b, e, _ in _spans(value, ()))
    return tuple(
        sorted(
            (
                v
                for v in found
                if len(v) >= MIN_SECRET
                and v != MASK
                and not (os.path.isabs(v) and os.path.exists(v))
            ),
            key=len,
            reverse=True,
        )
    )


# ------------------------------------------------------------------ records


def scrub(data, known: Iterable[str] | None = None):
    """``data`` (JSON-like: mappings, lists, strings, numbers) as it may be written down: every
    string masked (``mask``, with ``known``: by default ``environment_secrets()``); the string value
    of a key named as a secret (``HF_TOKEN``, ``password``, ``comet_api_key``), and the other strings
    of a record named as one (``{"name": "HF_TOKEN", "value": ...}``, ``{"setting":
    "logger.comet_api_key", "run": ...}``), written ``***`` whole. Anything else (a path object, a
    date) is written as its masked ``str``."""
    known = environment_secrets() if known is None else tuple(known)
    return _scrub(data, known)


def _scrub(data, known):
    if isinstance(data, str):
        return mask(data, known)
    if isinstance(data, bool | int | float) or data is None:
        return data
    if isinstance(data, Mapping):
        named = _named_secret(data)
        return {
            (mask(key, known) if isinstance(key, str) else key): (
                MASK if _hidden(key, value, named) else _scrub(value, known)
            )
            for key, value in data.items()
        }
    if isinstance(data, list | tuple):
        return [_scrub(item, known) for item in data]
    return mask(str(data), known)


def differences(data, known: Iterable[str] | None = None, where: str = "") -> list[str]:
    """The places (``env.FOO``, ``framework_config.logger.comet_api_key``) where ``scrub`` would
    change ``data``: what a file that a job reads (``run.json``) cannot hold, since masking it would
    change what runs."""
    known = environment_secrets() if known is None else tuple(known)
    return _differences(data, known, where)


def _differences(data, known, where):
    if isinstance(data, Mapping):
        named = _named_secret(data)
        found = []
        for key, value in data.items():
            here = f"{where}.{key}" if where else str(key)
            if (isinstance(key, str) and mask(key, known) != key) or _hidden(key, value, named):
                found.append(here)
            else:
                found += _differences(value, known, here)
        return found
    if isinstance(data, list | tuple):
        return [
            d for i, item in enumerate(data) for d in _differences(item, known, f"{where}[{i}]")
        ]
    if isinstance(data, str) and mask(data, known) != data:
        return [where or "the value"]
    return []


_NAMING = ("name", "setting", "variable")


def _named_secret(record: Mapping) -> str | None:
    """The member of ``record`` that names it, when that name is a secret's."""
    for member in _NAMING:
        name = record.get(member)
        if isinstance(name, str) and _names_secret(name):
            return member
    return None


def _hidden(key, value, named: str | None) -> bool:
    """Whether ``value``, under ``key`` of a record named by its member ``named``, is written
    ``***`` whole."""
    if not isinstance(value, str) or not value or value == MASK:
        return False
    return _names_secret(key) or (named is not None and key != named)


def _names_secret(key) -> bool:
    """A record's key that names a secret: an environment variable's name (upper case: any part
    of it, as ``is_secret_name``), any other key by its last word (``is_secret_key``)."""
    if not isinstance(key, str):
        return False
    if key.isupper() or key in _declared:
        return is_secret_name(key)
    return is_secret_key(key)
