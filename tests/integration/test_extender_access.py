"""Only the cluster's schedulers may call the verbs: HTTPS, client certificates signed by the
configured CA, or a bearer token; probes and monitoring keep /healthz, /readyz, /metrics."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from infra.http import tls_context
from scheduler_core.service.server import Access
from tests.integration.test_extender import Harness, pending


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def issue(
    directory: Path, name: str, signer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None
) -> tuple[Issued, x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for ``name`` (a CA when ``signer`` is None), written as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer[0].subject if signer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=signer is None, path_length=None), critical=True)
    )
    if signer is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    cert = builder.sign(signer[1] if signer else key, hashes.SHA256())
    files = Issued(directory / f"{name}.crt", directory / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files, cert, key


@dataclass(frozen=True)
class Pki:
    ca: Issued
    server: Issued
    scheduler: Issued  # a client certificate signed by the cluster's CA
    stranger: Issued  # a client certificate signed by another CA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, ca_cert, ca_key = issue(directory, "ca", None)
    server, _, _ = issue(directory, "server", (ca_cert, ca_key))
    scheduler, _, _ = issue(directory, "kube-scheduler", (ca_cert, ca_key))
    _, other_cert, other_key = issue(directory, "other-ca", None)
    stranger, _, _ = issue(directory, "stranger", (other_cert, other_key))
    return Pki(ca, server, scheduler, stranger)


@pytest.fixture
def served(pki: Pki, request: pytest.FixtureRequest) -> Iterator[tuple[Harness, str]]:
    h = Harness(1)
    tls = tls_context(pki.server.cert, pki.server.key, pki.ca.cert)
    token = getattr(request, "param", None)
    url = h.service.start(access=Access(tls, client_certificates=True, token=token))
    pending(h.api, "p", 2)
    yield h, url
    h.service.stop()


def call(
    url: str, pki: Pki, client: Issued | None = None, token: str | None = None, path: str = "filter"
) -> int:
    context = ssl.create_default_context(cafile=pki.ca.cert)
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "ns"}}, "NodeNames": []})
    request = urllib.request.Request(
        f"{url}/{path}", data=body.encode() if path == "filter" else None
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as failed:
        return failed.code


def test_the_verbs_need_a_client_certificate_signed_by_the_clusters_ca(
    served: tuple[Harness, str], pki: Pki
) -> None:
    _, url = served
    assert url.startswith("https://")
    assert call(url, pki, client=pki.scheduler) == 200
    assert call(url, pki) == 401
    # Refused by TLS, another CA signed it: the client reads the server's alert, or only
    # the closed connection when the server was quicker to close it.
    with pytest.raises((ssl.SSLError, urllib.error.URLError)):
        call(url, pki, client=pki.stranger)


def test_probes_and_monitoring_need_no_certificate(served: tuple[Harness, str], pki: Pki) -> None:
    _, url = served
    for path in ("healthz", "readyz", "metrics"):
        assert call(url, pki, path=path) == 200


@pytest.mark.parametrize("served", ["s3cret"], indirect=True)
def test_a_bearer_token_lets_in_where_no_certificate_is_shown(
    served: tuple[Harness, str], pki: Pki
) -> None:
    _, url = served
    assert call(url, pki, token="s3cret") == 200
    assert call(url, pki, token="guess") == 401
    assert call(url, pki) == 401


def test_plain_http_gets_no_answer_from_the_https_port(served: tuple[Harness, str]) -> None:
    _, url = served
    with pytest.raises(OSError):
        urllib.request.urlopen(url.replace("https://", "http://") + "/healthz", timeout=10)
