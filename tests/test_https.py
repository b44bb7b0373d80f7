"""HTTPS for real: llmb's one HTTP path (``llmb.http_safety``) against a TLS server on 127.0.0.1
whose certificates a throwaway certificate authority, made here, signs. Issue 36: every other
network test speaks plain http, so turning certificate verification off passed them all, though
those requests carry the Hugging Face token and the Run:ai secret.

A certificate the trusted authority signed for 127.0.0.1 is accepted; one from another authority,
one for another host name and an expired one are refused with ``CertificateRefused`` (a message
that says why and how to trust a private authority), before the request, its Authorization header
included, leaves llmb: the server sees a handshake and no HTTP byte. The Hugging Face download and
the Run:ai client say so in their own words, and Run:ai does not retry a refused certificate."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

x509 = pytest.importorskip("cryptography.x509", reason="./dev.sh installs cryptography")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402
from llmb import http_safety  # noqa: E402

SECRET = "hf_s3cret-token-for-the-tls-test"
NOW = datetime.datetime.now(datetime.timezone.utc)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


@dataclass
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, common: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(_name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(days=1))
            .not_valid_after(NOW + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def issue(self, directory: Path, label: str, names: list, days: tuple[int, int]) -> Path:
        """A server certificate (with its key) for ``names``, valid from ``days[0]`` to ``days[1]``
        days from now; the PEM file holding both."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(label))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW + datetime.timedelta(days=days[0]))
            .not_valid_after(NOW + datetime.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        path = directory / f"{label}.pem"
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            + cert.public_bytes(serialization.Encoding.PEM)
        )
        return path


@dataclass
class TlsServer:
    """One HTTPS server on 127.0.0.1 with the certificate in ``pem``: answers every request with
    ``body``; ``handshakes`` counts the connections, ``received`` what came after a handshake."""

    pem: Path
    body: bytes = b'{"ok": true}'
    handshakes: int = 0
    received: list[bytes] = field(default_factory=list)

    def __post_init__(self):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(self.pem)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.handshakes += 1
            with conn:
                conn.settimeout(10)
                try:
                    tls = self.context.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError):  # the client refused the certificate
                    continue
                with tls:
                    data = b""
                    try:
                        while b"\r\n\r\n" not in data:
                            chunk = tls.recv(65536)
                            if not chunk:
                                break
                            data += chunk
                    except (ssl.SSLError, OSError):
                        pass
                    self.received.append(data)
                    if data:
                        tls.sendall(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                            % (len(self.body), self.body)
                        )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The trusted authority's certificate file, and server certificates: good (127.0.0.1 and
    localhost), from another authority, for another host, expired."""
    directory = tmp_path_factory.mktemp("pki")
    trusted, stranger = Authority.make("llmb test CA"), Authority.make("someone else's CA")
    here = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    ca = directory / "ca.pem"
    ca.write_bytes(trusted.cert.public_bytes(serialization.Encoding.PEM))
    return {
        "ca": ca,
        "good": trusted.issue(directory, "good", here, (-1, 30)),
        "untrusted": stranger.issue(directory, "untrusted", here, (-1, 30)),
        "wrong-host": trusted.issue(
            directory, "wrong-host", [x509.DNSName("mirror.example")], (-1, 30)
        ),
        "expired": trusted.issue(directory, "expired", here, (-30, -1)),
    }


@pytest.fixture
def server(pki, monkeypatch):
    """``server(kind)``: a running TLS server with that certificate; the test trusts only the
    throwaway authority (Python's default context reads SSL_CERT_FILE)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki["ca"]))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    started: list[TlsServer] = []

    def start(kind: str) -> TlsServer:
        started.append(TlsServer(pki[kind]))
        return started[-1]

    yield start
    for one in started:
        one.close()


def _get(url: str) -> http_safety.Reply:
    request = urllib.request.Request(url + "/api/x", headers={"Authorization": f"Bearer {SECRET}"})
    return http_safety.fetch(request, deadline_s=30, max_bytes=1 << 20)


def test_a_certificate_the_trusted_authority_signed_for_the_host_is_accepted(server):
    tls = server("good")
    reply = _get(tls.url)
    assert (reply.status, reply.body) == (200, b'{"ok": true}')
    [request] = tls.received
    assert request.startswith(b"GET /api/x HTTP/1.1") and SECRET.encode() in request


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("untrusted", "unable to get local issuer certificate"),
        ("wrong-host", "IP address mismatch"),
        ("expired", "certificate has expired"),
    ],
)
def test_a_certificate_that_fails_verification_is_refused_before_anything_is_sent(
    server, kind, why
):
    tls = server(kind)
    with pytest.raises(http_safety.CertificateRefused) as refused:
        _get(tls.url)
    message = str(refused.value)
    assert f"the TLS certificate of 127.0.0.1:{tls.port} was refused" in message
    assert why in message and "SSL_CERT_FILE" in message and SECRET not in message
    assert tls.handshakes == 1 and tls.received == []  # no request, no token, ever left llmb


def test_the_hugging_face_download_says_the_certificate_was_refused(server, tmp_path, monkeypatch):
    from llmb.install import hf

    tls = server("untrusted")
    monkeypatch.setenv("HF_ENDPOINT", tls.url)
    with pytest.raises(hf.DownloadError) as refused:
        hf.download("meta-llama/Llama-3.1-8B", "config.json", str(tmp_path), SECRET)
    assert "config.json: the TLS certificate of 127.0.0.1" in str(refused.value)
    assert SECRET not in str(refused.value) and tls.received == []

    good = server("good")
    monkeypatch.setenv("HF_ENDPOINT", good.url)
    path = hf.download("meta-llama/Llama-3.1-8B", "config.json", str(tmp_path), SECRET)
    assert Path(path).read_bytes() == b'{"ok": true}'


def test_run_ai_does_not_retry_a_refused_certificate(server):
    from llmb_backend_runai.client import RunaiClient, RunaiError
    from llmb_backend_runai.settings import RunaiSettings

    tls = server("expired")
    settings = RunaiSettings(
        base_url=tls.url,
        app_id="llmb-qa",
        app_secret=SECRET,
        project="p",
        pvc_dir="/pvc",
        mounts=(),
    )
    client = RunaiClient(settings, sleep=lambda s: pytest.fail("a refused certificate was retried"))
    with pytest.raises(RunaiError) as refused:
        client.authenticate()
    assert "certificate has expired" in str(refused.value) and SECRET not in str(refused.value)
    # the whole refusal, unmasked: "token: the" is no credential (issue 41, item 1)
    assert str(refused.value).startswith(
        f"POST /token: the TLS certificate of 127.0.0.1:{tls.port} was refused"
    )
    assert tls.handshakes == 1 and tls.received == []


def test_run_ai_says_which_certificate_it_refused_in_clear(server, llmb_proc, tmp_path):
    """Issue 41, item 1: the mask took "token: the" for a credential, and Run:ai's refusal read
    ``POST /token: *** TLS certificate of ...``; through the real CLI, with the real TLS refusal."""
    from test_runai_backend import NEMOTRON4, runai_env

    tls = server("expired")
    env = {
        **runai_env(tls.url + "/api/v1", tmp_path),
        "RUNAI_ALLOW_HTTP": "0",
        "RUNAI_REQUEST_TIMEOUT": "20",
    }
    result = llmb_proc("run", *NEMOTRON4, "--detach", env=env, timeout=120)
    said = f"POST /token: the TLS certificate of 127.0.0.1:{tls.port} was refused"
    assert result.code != 0 and said in result.err, result.err[-3000:]
    assert "certificate has expired" in result.err and "***" not in result.err
    assert env["APP_SECRET"] not in result.out + result.err and tls.received == []
