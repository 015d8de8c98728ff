"""``python -m scheduler_core.certs``: the scheduler service's certificates and token, made in
the cluster once (a Job running the project's image, as ingress-nginx's kube-webhook-certgen
makes a webhook's: kubernetes/ingress-nginx images/kube-webhook-certgen).

One self-signed CA signs the service's serving certificate (the Service's DNS names) and the
client certificate kube-scheduler presents (CN ``ascend-npu-kube-scheduler``, the name the
service's ``client-allowed-names`` lets in); a random token is Volcano's credential. Three
Secrets hold them: the server's (``tls.crt``, ``tls.key``, ``ca.crt``), the client's (same
keys) and the token's (``token``, ``ca.crt``). The CA's key is kept nowhere: nothing can sign
another certificate later.

The Job creates nothing: the manifests make the three Secrets, of type ``Opaque`` and empty,
and the Job's account may only ``get`` and ``update`` those three by name (a Secret's type is
immutable, so it can never turn one into a ServiceAccount token Secret for the token
controller to fill). The Job fills them when all three are empty and leaves them alone when
all three are filled (a second run does nothing, an upgrade keeps them); to renew, empty the
three (or delete them and apply the manifests again) and run the Job again. Exit codes: 0
filled (or filled already), 2 bad flags, a Secret missing, not ``Opaque``, or only some
filled (named), 1 the API server failed.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import logging
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from contract.objects import Obj
from infra.cli import name_list
from infra.kube.client import api_client
from infra.kube.port import KubeError

log = logging.getLogger(__name__)

VALIDITY = datetime.timedelta(days=3650)  # renewed by emptying the Secrets (see above)
CLIENT_NAME = "ascend-npu-kube-scheduler"
EXIT_BAD_INPUT, EXIT_API = 2, 1
OPAQUE = "Opaque"  # the type the manifests give the three Secrets (immutable)


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its key, PEM."""

    cert: bytes
    key: bytes


@dataclass(frozen=True, slots=True)
class Bundle:
    ca: bytes  # the CA's certificate, PEM (its key is not kept)
    server: Pair
    client: Pair
    token: str


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def service_hosts(service: str, namespace: str) -> tuple[str, ...]:
    """The names a Service is reached by inside the cluster."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def _alternative(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(
    hosts: Sequence[str], client_name: str, now: datetime.datetime, validity: datetime.timedelta
) -> Bundle:
    """A fresh CA, a serving certificate for ``hosts`` and a client certificate of CN
    ``client_name``, both signed by it, and a token."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ascend-npu-scheduler-ca")])
    start, end = now - datetime.timedelta(minutes=5), now + validity
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
        .sign(ca_key, hashes.SHA256())
    )

    def signed(common: str, usage: x509.ObjectIdentifier, names: Sequence[str]) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            alternatives = [_alternative(n) for n in names]
            builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    return Bundle(
        ca.public_bytes(serialization.Encoding.PEM),
        signed(hosts[0], ExtendedKeyUsageOID.SERVER_AUTH, hosts),
        signed(client_name, ExtendedKeyUsageOID.CLIENT_AUTH, ()),
        secrets.token_urlsafe(32),
    )


@dataclass(frozen=True, slots=True)
class SecretNames:
    server: str = "ascend-npu-scheduler-tls"
    client: str = "ascend-npu-kube-scheduler-client"
    token: str = "ascend-npu-scheduler-token"


def contents(bundle: Bundle, names: SecretNames) -> dict[str, dict[str, bytes]]:
    """What each of the three Secrets holds once filled, by the Secret's name."""
    return {
        names.server: _pair(bundle.server, bundle.ca),
        names.client: _pair(bundle.client, bundle.ca),
        names.token: {"token": bundle.token.encode(), "ca.crt": bundle.ca},
    }


def secrets_of(bundle: Bundle, namespace: str, names: SecretNames) -> list[Obj]:
    """The three Secrets as they are once the Job filled them (``Opaque``, as the manifests
    make them)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": OPAQUE,
            "data": _encoded(data),
        }
        for name, data in contents(bundle, names).items()
    ]


def _encoded(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def _pair(pair: Pair, ca: bytes) -> dict[str, bytes]:
    return {"tls.crt": pair.cert, "tls.key": pair.key, "ca.crt": ca}


def _read(core: client.CoreV1Api, namespace: str, name: str) -> Obj | None:
    """The Secret as the API server has it (None: there is none)."""
    try:
        # As JSON: sent back whole (labels, annotations, resourceVersion) with the data added.
        answer: Any = core.read_namespaced_secret(name, namespace, _preload_content=False)
    except ApiException as failed:
        if failed.status == 404:
            return None
        raise
    secret: Obj = json.loads(answer.data)
    return secret


def fill(core: client.CoreV1Api, namespace: str, wanted: dict[str, dict[str, bytes]]) -> str:
    """Write ``wanted`` (data by Secret name) into those Secrets when all are empty; nothing
    when all are filled: what was done. ValueError when one is missing, when only some are
    filled (new certificates would not match theirs) or when an empty one is not ``Opaque``."""
    names = list(wanted)
    live = {name: _read(core, namespace, name) for name in names}
    missing = [name for name, secret in live.items() if secret is None]
    if missing:
        raise ValueError(
            f"the Secrets {', '.join(missing)} do not exist in {namespace}: the chart (or "
            "daemonset/base) makes them, empty, for this Job to fill; apply the manifests again"
        )
    found = {name: secret for name, secret in live.items() if secret is not None}
    filled = [name for name, secret in found.items() if secret.get("data")]
    if len(filled) == len(names):
        return f"the Secrets {', '.join(names)} are filled already: nothing to do"
    if filled:
        raise ValueError(
            f"only {', '.join(filled)} of {', '.join(names)} are filled in {namespace}: empty "
            "all three (or delete them and apply the manifests again) to make them anew (their "
            "certificates would not match new ones)"
        )
    typed = {name: str(secret.get("type") or OPAQUE) for name, secret in found.items()}
    if wrong := [f"{name} ({kind})" for name, kind in typed.items() if kind != OPAQUE]:
        raise ValueError(
            f"the Secrets {', '.join(wrong)} are not of type {OPAQUE}: delete them and apply "
            "the manifests again"
        )
    for name, secret in found.items():
        secret["metadata"].pop("managedFields", None)
        # Its resourceVersion makes this write fail if another run wrote first.
        body = {**secret, "data": _encoded(wanted[name])}
        # The client takes a dict as the body too (it serializes either).
        core.replace_namespaced_secret(name, namespace, body, _preload_content=False)  # type: ignore[arg-type]
    return f"filled the Secrets {', '.join(names)} in {namespace}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_core.certs",
        description="Fill the scheduler service's empty Secrets: CA, certificates, token.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--namespace", default="kube-system", help="of the Service and Secrets")
    parser.add_argument("--service", default="ascend-npu-scheduler", help="the Service's name")
    parser.add_argument(
        "--extra-hosts",
        type=name_list,
        default=frozenset(),
        metavar="HOST,...",
        help="more names or addresses of the serving certificate",
    )
    parser.add_argument("--client-name", default=CLIENT_NAME, help="the client certificate's CN")
    defaults = SecretNames()
    parser.add_argument("--server-secret", default=defaults.server)
    parser.add_argument("--client-secret", default=defaults.client)
    parser.add_argument("--token-secret", default=defaults.token)
    parser.add_argument("--kubeconfig", type=Path, help="in-cluster when not given")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    hosts = [*service_hosts(args.service, args.namespace), *sorted(args.extra_hosts)]
    now = datetime.datetime.now(datetime.UTC)
    bundle = issue(hosts, args.client_name, now, VALIDITY)
    names = SecretNames(args.server_secret, args.client_secret, args.token_secret)
    try:
        core = client.CoreV1Api(api_client(args.kubeconfig))
        log.info("%s", fill(core, args.namespace, contents(bundle, names)))
    except ValueError as bad:
        print(f"error: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KubeError as failed:
        print(f"error: {failed}", file=sys.stderr)
        return EXIT_API
    except ApiException as failed:
        reason = _reason(failed)
        print(f"error: the API server answered HTTP {failed.status}: {reason}", file=sys.stderr)
        return EXIT_API
    except (urllib3.exceptions.HTTPError, OSError) as failed:
        print(f"error: the API server is unreachable ({type(failed).__name__})", file=sys.stderr)
        return EXIT_API
    return 0


def _reason(failed: ApiException) -> str:
    try:
        return str(json.loads(failed.body or "{}").get("message") or failed.reason)
    except (ValueError, AttributeError):
        return str(failed.reason)


if __name__ == "__main__":
    sys.exit(main())
