"""One HTTP exchange with a server llmb does not fully trust, kept safe.

``fetch`` sends a ``urllib`` request and reads the whole answer, with four
guarantees a plain ``urlopen`` lacks:

- the ``Authorization`` header follows a redirect only to the same origin
  (scheme, host and port); a redirect elsewhere is followed without it, and one
  to a scheme not in ``schemes`` (plain ``http`` unless allowed) is refused;
- the exchange ends by a deadline: connecting, sending and every read share
  one clock, so a server that answers a byte at a time cannot hold the caller
  past it (a socket timeout alone restarts with every byte);
- the answer is read up to ``max_bytes``, and refused beyond that (``fetch``
  into memory, ``copy_bounded`` into a file, from an ``exchange``);
- ``mask`` (``llmb.redaction.mask``) takes secrets out of any text made from
  what a server said.

An ``https`` server's certificate is verified as Python's default context
does (the system's certificate authorities, or ``SSL_CERT_FILE`` /
``SSL_CERT_DIR``; its name must match the host), before any byte of the
request, its headers and secrets included, is sent. A refusal is
``CertificateRefused``, never retried: it says why and how to trust a
private certificate authority (tests/test_https.py, over real TLS).

OpenSSL opens the certificate paths of the environment when the first ``https``
connection is made, before any deadline can run, and waits on a FIFO for ever.
So every one of them (``CERTIFICATE_FILE_VARIABLES``, ``CERTIFICATE_DIR_VARIABLES``)
is checked first (``certificate_path_problems``), by the rule every file llmb reads
from others follows (``llmb.files``): a certificate file is a regular file of at
most ``MAX_CERTIFICATE_BYTES``, a certificate directory a directory whose hashed
entries (``<hash>.0``) are such files. Another one is ``CertificatePathRefused``, a
user error (exit 2) in one line that says what the path is and what is valid. A path
that does not exist, or cannot be read, is OpenSSL's to skip, as it does.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import os
import re
import socket
import ssl
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from llmb import files
from llmb.errors import UsageError
from llmb.redaction import MASK, mask  # noqa: F401 - part of this module's interface (public_api)

CHUNK = 1 << 16
_DEFAULT_PORTS = {"http": 80, "https": 443}
# The variables that hand OpenSSL certificate authorities: OpenSSL's own (its "openssl-env" manual
# page: SSL_CERT_FILE, SSL_CERT_DIR, which Python's ssl module and curl read), Requests' and curl's
# (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE: the tools a job or an image import runs).
CERTIFICATE_FILE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
CERTIFICATE_DIR_VARIABLES = ("SSL_CERT_DIR",)  # directories, separated by ":"
# The bundles of the systems' certificate authorities are about 200 KB; a larger enterprise bundle a
# few MB.
MAX_CERTIFICATE_BYTES = 16 << 20
_HASHED_NAME = re.compile(r"[0-9a-f]{8}\.r?[0-9]+")  # what OpenSSL opens in a certificate directory
_VALID_FILE = (
    "it must name a PEM file of certificate authorities, a regular file of at most {limit} MiB "
    "(OpenSSL's openssl-env manual page), or be unset for the system's certificate authorities"
)
_VALID_DIR = (
    "it must name directories of certificate files named by their hash (<hash>.0, as "
    "'openssl rehash' makes them), each a regular file of at most {limit} MiB, separated by ':' "
    "(OpenSSL's openssl-env manual page), or be unset for the system's certificate authorities"
)


class CertificatePathRefused(UsageError):
    """A certificate path of the environment that OpenSSL must not be handed (a FIFO, a device, a
    file too large): its message says which variable, what it names and what is valid."""


class DeadlineExceeded(TimeoutError):
    """The exchange did not finish by its deadline."""


class TooLarge(ValueError):
    """The answer is longer than the caller accepts."""

    def __init__(self, limit: int):
        super().__init__(f"the answer is larger than {limit:,} bytes")
        self.limit = limit


class RedirectRefused(ValueError):
    """A redirect to a scheme the caller does not allow (plain http, say)."""

    def __init__(self, url: str, schemes: tuple[str, ...]):
        super().__init__(f"a redirect to {url} was refused: only {' or '.join(schemes)} is allowed")
        self.url = url


class CertificateRefused(ValueError):
    """An ``https`` server's certificate failed verification: nothing was sent to it. Not a
    connection that dropped (a retry would fail the same way)."""

    def __init__(self, url: str, error: ssl.SSLCertVerificationError):
        _, host, port = origin(url)
        why = getattr(error, "verify_message", None) or getattr(error, "reason", None) or str(error)
        super().__init__(
            f"the TLS certificate of {host}:{port} was refused ({why}); nothing was sent to it. "
            f"A server whose certificate a private certificate authority signed is trusted once "
            f"SSL_CERT_FILE names that authority's certificate"
        )
        self.url = url


def _not_a_certificate_file(path: str) -> str | None:
    """Why OpenSSL must not be handed ``path`` as a file of certificates; None when it may (or when
    it is missing or unreadable: OpenSSL skips it)."""
    try:
        handle, size = files.open_regular(path)  # stat first; the open never blocks
    except files.NotRegularFile as exc:
        return f"{exc.kind}, not a regular file"
    except OSError:
        return None
    handle.close()
    if size > MAX_CERTIFICATE_BYTES:
        return f"a file of {size:,} bytes, far more than certificate authorities take"
    return None


def _not_a_certificate_dir(directory: str) -> str | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return f"{files.kind_of(st)}, not a directory"
    try:
        entries = sorted(e.name for e in os.scandir(directory) if _HASHED_NAME.fullmatch(e.name))
    except OSError:
        return None
    for name in entries:
        why = _not_a_certificate_file(os.path.join(directory, name))
        if why:
            return f"a directory whose certificate file {name} is {why}"
    return None


def certificate_path_problems(environ=None) -> list[str]:
    """One line for each certificate path of ``environ`` (this process's environment by default)
    that OpenSSL must not be handed: which variable, what it names, what is valid."""
    env = os.environ if environ is None else environ
    limit = MAX_CERTIFICATE_BYTES >> 20
    problems = []
    for variable in CERTIFICATE_FILE_VARIABLES:
        path = env.get(variable) or ""
        if path and (why := _not_a_certificate_file(path)):
            problems.append(f"{variable}={path} is {why}; {_VALID_FILE.format(limit=limit)}")
    for variable in CERTIFICATE_DIR_VARIABLES:
        for directory in (env.get(variable) or "").split(os.pathsep):
            if directory and (why := _not_a_certificate_dir(directory)):
                problems.append(
                    f"{variable}={env[variable]}: {directory} is {why}; "
                    f"{_VALID_DIR.format(limit=limit)}"
                )
    return problems


def check_certificate_paths(environ=None) -> None:
    """CertificatePathRefused, naming the first bad one, unless every certificate path of
    ``environ`` may be handed to OpenSSL (``certificate_path_problems``)."""
    problems = certificate_path_problems(environ)
    if problems:
        raise CertificatePathRefused(problems[0])


@dataclass(frozen=True)
class Reply:
    status: int
    headers: http.client.HTTPMessage  # names looked up in any case
    body: bytes


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)


class KeepAuthOnOrigin(urllib.request.HTTPRedirectHandler):
    """Follow redirects; drop ``Authorization`` on one that leaves the origin; refuse one to another scheme."""

    def __init__(self, schemes: tuple[str, ...] = ("https",)):
        self.schemes = schemes

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(newurl)[0] not in self.schemes:
            fp.close()
            raise RedirectRefused(newurl, self.schemes)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and origin(newurl) != origin(req.full_url):
            new.remove_header("Authorization")
        return new


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each given only the time left until the deadline."""

    def __init__(self, sock: socket.socket, deadline: float):
        super().__init__()
        self._sock, self._deadline = sock, deadline
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("no complete answer by the deadline")
        self._sock.settimeout(left)
        try:
            return self._raw.readinto(buffer)
        except TimeoutError:
            if time.monotonic() >= self._deadline:
                raise DeadlineExceeded("no complete answer by the deadline") from None
            raise

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """What ``HTTPResponse`` is given instead of the socket: it only calls ``makefile``."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock, *args, deadline: float, **kwargs):
        super().__init__(_DeadlineSocket(sock, deadline), *args, **kwargs)


class _DeadlineConnection:
    """Mixed into HTTP(S)Connection: connecting takes at most the time left, answers are read by the deadline."""

    def __init__(self, *args, deadline: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.deadline = deadline
        self.response_class = functools.partial(_DeadlineResponse, deadline=deadline)

    def connect(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("no connection by the deadline")
        if not isinstance(self.timeout, (int, float)) or self.timeout > left:
            self.timeout = left
        super().connect()


class _HTTPConnection(_DeadlineConnection, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_DeadlineConnection, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(functools.partial(_HTTPConnection, deadline=self.deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        check_certificate_paths()  # before OpenSSL opens them (a FIFO would hold it for ever)
        return self.do_open(
            functools.partial(_HTTPSConnection, deadline=self.deadline), req, context=self._context
        )


def read_bounded(response, max_bytes: int) -> bytes:
    """The whole body of ``response``, or TooLarge as soon as it passes ``max_bytes``."""
    declared = (response.headers.get("Content-Length") or "").strip() if response.headers else ""
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(max_bytes)
    body = bytearray()
    while chunk := response.read(min(CHUNK, max_bytes + 1 - len(body))):
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(max_bytes)
    return bytes(body)


@contextlib.contextmanager
def exchange(
    request: urllib.request.Request,
    *,
    deadline_s: float,
    timeout: float | None = None,
    schemes: tuple[str, ...] = ("https",),
    redirects: KeepAuthOnOrigin | None = None,
):
    """Send ``request``; yield its response, an error status included (check ``status``), whose
    reads all end by the deadline ``deadline_s`` seconds from now (DeadlineExceeded). ``redirects``:
    the redirect handler, ``KeepAuthOnOrigin(schemes)`` or a subclass. Raises what ``fetch`` raises."""
    deadline = time.monotonic() + deadline_s
    opener = urllib.request.build_opener(
        _HTTPHandler(deadline), _HTTPSHandler(deadline), redirects or KeepAuthOnOrigin(schemes)
    )
    try:
        response = opener.open(request, timeout=min(timeout or deadline_s, deadline_s))
    # an answer all the same: its status and body are the caller's
    except urllib.error.HTTPError as error:
        response = error
    except urllib.error.URLError as error:
        if isinstance(error.reason, DeadlineExceeded):
            raise error.reason from None
        if isinstance(error.reason, ssl.SSLCertVerificationError):
            raise CertificateRefused(request.full_url, error.reason) from None
        raise
    try:
        yield response
    finally:
        response.close()


def copy_bounded(response, out, max_bytes: int, progress=None) -> int:
    """Write the body of ``response`` to the binary file ``out``; its size, or TooLarge as soon as
    it passes ``max_bytes`` (before writing past it). ``progress(done, total or None)`` after each chunk."""
    declared = (response.headers.get("Content-Length") or "").strip() if response.headers else ""
    total = int(declared) if declared.isdigit() else None
    if total is not None and total > max_bytes:
        raise TooLarge(max_bytes)
    done = 0
    while chunk := response.read(min(CHUNK, max_bytes + 1 - done)):
        done += len(chunk)
        if done > max_bytes:
            raise TooLarge(max_bytes)
        out.write(chunk)
        if progress:
            progress(done, total)
    return done


def fetch(
    request: urllib.request.Request,
    *,
    deadline_s: float,
    max_bytes: int,
    timeout: float | None = None,
    schemes: tuple[str, ...] = ("https",),
) -> Reply:
    """Send ``request`` and read its answer (any status) within ``deadline_s`` seconds.

    Raises DeadlineExceeded, TooLarge, RedirectRefused, CertificateRefused, CertificatePathRefused
    (before connecting), or what urllib and http.client raise when there is no answer (URLError,
    OSError, HTTPException)."""
    with exchange(request, deadline_s=deadline_s, timeout=timeout, schemes=schemes) as response:
        if getattr(response, "fp", None) is None:  # an HTTPError made without a response
            return Reply(response.code, response.headers or http.client.HTTPMessage(), b"")
        return Reply(response.status, response.headers, read_bounded(response, max_bytes))
