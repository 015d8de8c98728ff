"""Who may call which verb: each caller's credential is good for its own verbs only
(docs/security.md). kube-scheduler's client certificate (its CN an allowed name) calls
``/filter``, ``/prioritize``, ``/preempt`` and ``/bind`` (the extender's) and ``/place``,
``/reserve``, ``/unreserve`` and ``/waits`` (the AscendNPU plugin's); Volcano's token, over
TLS, calls ``/volcano/*``; either calls ``/debug/compare`` and the NPU map, which an operator
reaches with one or the other; ``/healthz``, ``/readyz``, ``/leader`` and ``/metrics`` stay
open to probes and monitoring. Apart from the routes (``routes``) so that what a stolen
credential can do is read in one place; every refusal is counted by its reason."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.chip_names import quoted
from infra.http import Caller, Response, error
from scheduler_core.service.routes import COMPARE, VERBS
from scheduler_core.service.verbs.plugin import PluginVerbs
from scheduler_core.service.verbs.volcano import VolcanoVerbs
from scheduler_core.service.views.npu_map import PATHS as MAP_PATHS

# Why a call was refused, the label of ``ascend_scheduler_auth_refusals`` (bounded).
NO_CREDENTIALS, BAD_TOKEN, NAME_NOT_ALLOWED = "no_credentials", "bad_token", "name_not_allowed"
VERB_NOT_ALLOWED = "verb_not_allowed"  # a good credential, for another caller's verbs

# Each credential is good for its own caller's verbs only: kube-scheduler's client
# certificate for its extender verbs, the token (Volcano's) for ``/volcano/*``; both for
# ``/debug/compare`` and the NPU map (an operator uses either). A stolen token binds nothing
# through ``/bind``, a stolen certificate allocates nothing through ``/volcano/allocateFunc``.
SHARED_VERBS = frozenset({COMPARE})
CERTIFICATE_VERBS = frozenset(VERBS) | frozenset(PluginVerbs.VERBS) | SHARED_VERBS
TOKEN_VERBS = frozenset(f"volcano/{v}" for v in VolcanoVerbs.VERBS) | SHARED_VERBS
CERTIFICATE_SAYS = "/filter, /prioritize, /preempt, /bind, /place, /reserve, /unreserve, /waits"
TOKEN_SAYS = "/volcano/*"


@dataclass(frozen=True, slots=True)
class Denied:
    """A call refused: 401 (no or wrong credentials) or 403 (a verified identity not
    allowed), with the metric's reason and the one-line message."""

    code: int
    reason: str
    message: str


def _common_name(certificate: Mapping[str, Any]) -> str:
    """The subject's CN as Go reads it (the last CN attribute: ``FillFromRDNSequence`` in
    crypto/x509/pkix), which kube-apiserver matches ``--requestheader-allowed-names`` against
    (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/authentication/request/x509/
    x509.go: ``chain[0].Subject.CommonName``)."""
    names = [
        str(value)
        for rdn in certificate.get("subject", ())
        for key, value in rdn
        if key == "commonName"
    ]
    return names[-1] if names else ""


def _presented_token(authorization: str) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or the password of HTTP Basic: Go's
    net/http client turns a URL's userinfo into Basic (``send`` in src/net/http/client.go), and
    that is all Volcano's extender plugin can send (volcano-sh/volcano
    pkg/scheduler/plugins/extender/extender.go: a plain ``http.Client{Timeout}``)."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[2]
    return None


@dataclass(frozen=True, slots=True)
class Access:
    """Who may call the verbs and ``/debug/compare`` (``/healthz``, ``/readyz``, ``/leader``
    and ``/metrics`` stay open to probes and monitoring): a client certificate the client CA
    signed whose CN is in ``allowed_names`` (kube-scheduler's verbs), or the token (Bearer,
    or Basic's password) over TLS (``/volcano/*``); each also ``/debug/compare`` and the
    NPU map, and nothing else (403, ``verb_not_allowed``). Neither: anyone who reaches the
    port (only with ``--insecure``)."""

    tls: ssl.SSLContext | None = None
    allowed_names: frozenset[str] = frozenset()  # CNs of client certificates let in
    token: str | None = None

    @property
    def open(self) -> bool:
        return not self.allowed_names and self.token is None

    def check(self, caller: Caller) -> Denied | None:
        if self.open:
            return None
        path = caller.path.partition("?")[0]
        # As the routes read it: a POST's verb is its path (``Routes.post``), a GET the map's.
        shared = path in MAP_PATHS
        verb = caller.path.strip("/")
        # The TLS layer verified the chain against the client CA before any request.
        name = None if caller.certificate is None else _common_name(caller.certificate)
        certified = name is not None and name in self.allowed_names
        if certified and (shared or verb in CERTIFICATE_VERBS):
            return None
        presented = _presented_token(caller.headers.get("authorization", ""))
        if self.token is not None and presented is not None:
            # Constant time: the comparison does not tell how much of a guess was right.
            if not hmac.compare_digest(presented.encode(), self.token.encode()):
                return Denied(401, BAD_TOKEN, "the token is wrong")
            if shared or verb in TOKEN_VERBS:
                return None
            return _not_for(path, "the token", TOKEN_SAYS)
        if certified:
            return _not_for(
                path, f"the client certificate of CN {quoted(name or '')}", CERTIFICATE_SAYS
            )
        if name is not None and self.allowed_names:
            return Denied(
                403,
                NAME_NOT_ALLOWED,
                f"the client certificate's CN {quoted(name)} is not an allowed name",
            )
        wanted = [
            "a client certificate of an allowed name" if self.allowed_names else "",
            "the token (Bearer, or Basic's password)" if self.token is not None else "",
        ]
        return Denied(401, NO_CREDENTIALS, "the verbs need " + " or ".join(w for w in wanted if w))

    def guard(self, caller: Caller, refused: Callable[[str], None]) -> Response | None:
        """The answer to a call refused (None: let in); ``refused`` counts it by reason."""
        denied = self.check(caller)
        if denied is None:
            return None
        refused(denied.reason)
        answer = error(denied.code, denied.message)
        if denied.code == 401 and self.token is not None:
            # A 401 names the scheme that would do (RFC 9110 11.6.1): a browser opening the
            # NPU map then asks for the token as Basic's password.
            challenge = ("WWW-Authenticate", 'Basic realm="ascend-npu-scheduler", charset="UTF-8"')
            return dataclasses.replace(answer, headers=(challenge,))
        return answer


def _not_for(path: str, credential: str, verbs: str) -> Denied:
    """403: a good credential, on a path that is not its caller's."""
    return Denied(
        403,
        VERB_NOT_ALLOWED,
        f"{quoted(path)} is not for {credential}, which calls {verbs}, /debug/compare and the "
        "NPU map only",
    )


OPEN = Access()
