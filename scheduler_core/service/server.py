"""The scheduler service: the extender over HTTP, fed by a refresh loop.

``POST /filter``, ``/prioritize``, ``/bind`` take kube-scheduler's extender JSON (Go field
names: ``Pod``, ``NodeNames``, ``FailedNodes``, ``Host``, ``Score``, ``PodName``, …);
``GET /healthz``, ``/readyz`` (ready while every watch is well and was last seen well
recently, leader or not: every replica may be evicted, see docs/ha.md), ``/leader`` (200 only
while this replica answers the verbs, as Patroni's ``GET /leader``) and ``/metrics``
(Prometheus text); ``POST /debug/compare`` (guarded as the verbs, one call per
``COMPARE_PERIOD``) answers where this replica's view differs from a fresh read of the cluster
(empty: nowhere). The cluster is read once and then
watched (``informers``): each change reaches the extender as it arrives. Every
``refresh_period`` a maintenance pass, which reads nothing, lets time act (DeviceInfo
ageing, assumed binds and reservations expiring), deletes the pods of fault jobs so they
restart, and writes what changed of ``volcano-system/vcjob-fault-npu-cm``, the jobs'
``fault-config-<job>`` and ``volcano-system/tor-share-cm``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import gc
import hmac
import logging
import math
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contract.annotations import FAULT_RECORD, TOR_SHARE_CONFIGMAP, WRITER_LABEL
from contract.chip_names import InvalidInput, quoted
from contract.objects import Obj
from contract.pods import PodView
from infra.events import pod_ref
from infra.http import PROMETHEUS_TEXT, Caller, HttpServer, Limits, Response, error
from infra.kube.port import KubeError, KubeGateway, NotFound
from infra.leader import LeaderElector, PodLabel, Timing
from scheduler_core.engine import rescheduling
from scheduler_core.service.controllers.deletions import delete_marked
from scheduler_core.service.state.fault_restarts import GANG_RESTART, ResetUpdate
from scheduler_core.service.state.informers import ClusterInformers
from scheduler_core.service.verbs.extender import BindRefused, Extender
from scheduler_core.service.verbs.volcano import VolcanoVerbs
from scheduler_core.service.views.metrics import ClusterView, Metrics, NpuNode
from scheduler_core.service.views.npu_map import PATHS as MAP_PATHS
from scheduler_core.service.views.npu_map import NpuMap, read_view
from scheduler_core.service.wire import BadRequest, ExtenderArgs, decode_extender_args

log = logging.getLogger(__name__)

VERBS = ("filter", "prioritize", "preempt", "bind")
TYPED_VERBS = frozenset({"filter", "prioritize"})
KNOWN_VERBS = frozenset(VERBS) | {f"volcano/{v}" for v in VolcanoVerbs.VERBS}
MALFORMED_REASON = "NPUAnnotationMalformed"
CHIP_CUT_ERROR = "chipDyCutErr"  # upstream's reason for deleting a pod whose vNPU failed
COMPARE = "debug/compare"  # POST: this replica's view against a fresh read (guarded)
# Seconds between two /debug/compare calls a replica answers: each LISTs every pod, node and
# ConfigMap, which a caller looping on it would turn into load on the API server.
COMPARE_PERIOD = 10.0
STALE_PERIODS = 3  # not ready once the last good read is this many periods old
# The leader's pod carries it; the Service selects it (daemonset/base/scheduler-deployment.yaml).
LEADER_LABEL = ("ascend-npu.io/scheduler-role", "leader")


# Why a call was refused, the label of ``ascend_scheduler_auth_refusals`` (bounded).
NO_CREDENTIALS, BAD_TOKEN, NAME_NOT_ALLOWED = "no_credentials", "bad_token", "name_not_allowed"
VERB_NOT_ALLOWED = "verb_not_allowed"  # a good credential, for another caller's verbs

# Each credential is good for its own caller's verbs only: kube-scheduler's client
# certificate for its extender verbs, the token (Volcano's) for ``/volcano/*``; both for
# ``/debug/compare`` and the NPU map (an operator uses either). A stolen token binds nothing
# through ``/bind``, a stolen certificate allocates nothing through ``/volcano/allocateFunc``.
SHARED_VERBS = frozenset({COMPARE})
CERTIFICATE_VERBS = frozenset(VERBS) | SHARED_VERBS
TOKEN_VERBS = frozenset(f"volcano/{v}" for v in VolcanoVerbs.VERBS) | SHARED_VERBS
CERTIFICATE_SAYS = "/filter, /prioritize, /preempt, /bind"
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
        # As the handlers read it: a POST's verb is its path (``_post``), a GET the NPU map's.
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


def _not_for(path: str, credential: str, verbs: str) -> Denied:
    """403: a good credential, on a path that is not its caller's."""
    return Denied(
        403,
        VERB_NOT_ALLOWED,
        f"{quoted(path)} is not for {credential}, which calls {verbs}, /debug/compare and the "
        "NPU map only",
    )


OPEN = Access()


def decode_body(raw: bytes) -> Any:
    """A request's JSON. msgspec, not the stdlib: on kube-scheduler's bodies (a pod and 5,000
    node names) it decodes several times faster (``benchmarks/extender.py`` prints the wire
    floor both ways); BadRequest when the body is not JSON."""
    try:
        return msgspec.json.decode(raw or b"{}")
    except RecursionError:
        raise BadRequest("the body nests too deep") from None
    except msgspec.DecodeError as bad:
        raise BadRequest(f"the body is not JSON ({bad})") from None


def json_response(code: int, value: Any) -> Response:
    """An answer's JSON (msgspec: a prioritize answer is 5,000 small objects)."""
    return Response(code, msgspec.json.encode(value))


@dataclass(frozen=True, slots=True)
class PodRef:
    """This replica's own pod."""

    namespace: str
    name: str

    @staticmethod
    def from_environment(environ: Mapping[str, str] = os.environ) -> PodRef | None:
        """The pod named by the downward API's ``POD_NAME`` and ``POD_NAMESPACE`` (the
        Deployment sets both), None outside a pod; ValueError when only one is set."""
        name, namespace = environ.get("POD_NAME", ""), environ.get("POD_NAMESPACE", "")
        if bool(name) != bool(namespace):
            missing = "POD_NAMESPACE" if name else "POD_NAME"
            raise ValueError(f"{missing} is not set: set POD_NAME and POD_NAMESPACE together")
        return PodRef(namespace, name) if name else None


@dataclass(frozen=True, slots=True)
class Election:
    """The Lease the replicas of the service elect their leader on, and the pod the leader
    labels (None: none, outside a pod)."""

    namespace: str = "kube-system"
    name: str = "ascend-npu-scheduler"
    timing: Timing = field(default_factory=Timing)
    holder: str | None = None  # default: <hostname>_<uuid>
    pod: PodRef | None = None


class NotLeader(Exception):
    """A verb reached a replica that does not lead: it decides nothing."""


class SchedulerService:
    def __init__(
        self,
        gateway: KubeGateway,
        extender: Extender,
        refresh_period: float = 1.0,
        self_maintain: bool = True,
        clock: Callable[[], float] = time.time,
        *,
        election: Election | None = None,
        compare_period: float = COMPARE_PERIOD,
        npu_map: bool = False,
        noded: bool = False,
        clusterd: bool = False,
        force_enqueue: bool = True,
    ) -> None:
        self.gateway = gateway
        self.extender = extender
        # With an election, only the leader answers the verbs and carries the label the
        # Service selects; every replica is ready while its view is fresh, and the others keep
        # reading the cluster, so a new leader starts warm (and reads it once more first).
        self.leader = None if election is None else self._elector(gateway, election)
        if self.leader is not None:
            extender.state.fence = self.leader.may_decide  # re-checked before a decision is written
        self.metrics = Metrics(lambda: self.extender.state.binds, extender.state.node_count)
        self.metrics.read(self._cluster_view, extender.state.gangs.ttl)
        self.volcano = VolcanoVerbs(extender, self._fresh_view, force_enqueue)
        self.informers = ClusterInformers(
            gateway,
            extender.state,
            clock,
            self_maintain=self_maintain,
            noded=noded,
            clusterd=clusterd,
            on_pods=self._report_malformed,
            on_api_error=self.metrics.watch_failed,
            on_loop_error=self.metrics.loop_failed,
        )
        self._period = refresh_period
        self._self_maintain = self_maintain
        self._clock = clock
        self._stop = threading.Event()
        self._server: HttpServer | None = None
        self._metrics_server: HttpServer | None = None
        self.metrics_url = ""
        self._thread: threading.Thread | None = None
        self._written: dict[tuple[str, str], dict[str, str]] = {}
        self._write_errors: dict[tuple[str, str], str] = {}
        self._delete_errors: dict[str, str] = {}  # pod → the last error deleting it
        self._restored = False
        self._last_read: float | None = None
        self._reading = threading.Lock()  # one read or maintenance pass at a time
        self._malformed: dict[str, str] = {}  # pod → the version already reported
        self._compare_period = compare_period
        self._compared: float | None = None  # when /debug/compare last ran (monotonic)
        self._comparing = threading.Lock()
        # The live NPU map (--npu-map): on the verbs' port only, behind their authentication.
        self.npu_map = (
            NpuMap(lambda: read_view(extender.state, self.informers.holders())) if npu_map else None
        )

    def _cluster_view(self) -> ClusterView:
        """What a scrape reports of the state: references copied under its lock, O(nodes)."""
        state = self.extender.state
        leader = self.deciding()  # the election's lock is not taken under the state's
        with state.lock:
            session = state.session
            nodes = [
                NpuNode(name, node.product, session.usable(name), node.unhealthy)
                for name, node in session.nodes.items()
            ]
            left_out = dict(state.left_out)
            waiting, oldest = state.gangs.wait_classes(state.clock())
            restarts = {**state.faults.restarted, GANG_RESTART: state.gangs.restarted}
        return ClusterView(leader, nodes, left_out, waiting, oldest, restarts)

    def _elector(self, gateway: KubeGateway, election: Election) -> LeaderElector:
        label = None
        if election.pod is None:
            log.warning(
                "POD_NAME and POD_NAMESPACE are not set (not in a pod): the leader labels no "
                "pod, so a Service selecting %s=%s finds none; find the leader by GET /leader",
                *LEADER_LABEL,
            )
        else:
            label = PodLabel(election.pod.namespace, election.pod.name, *LEADER_LABEL)
        return LeaderElector(
            gateway,
            election.namespace,
            election.name,
            on_started=self._lead,
            timing=election.timing,
            holder=election.holder,
            label=label,
        )

    def refresh(self) -> None:
        """Read the whole cluster again (the first read; a new leader's), then maintain."""
        self.informers.relist()
        self.maintain()

    def maintain(self) -> None:
        """The periodic pass: time acts on the view, fault jobs restart, the scheduler's
        ConfigMaps are written when they changed. It reads nothing from the API server."""
        if not self._restored:
            self._restore_faults()
        self.informers.tick()
        self.extender.state.expire()
        if self.deciding():  # a standby deletes and writes nothing: the leader does
            self._reschedule()
            self._delete_failed_creations()
            shared = self.extender.state.tor_share_data()
            if shared is not None:
                self._write_configmap(*TOR_SHARE_CONFIGMAP, shared)
        if self.informers.healthy():
            self._last_read = self._clock()

    def _report_malformed(self, pods: list[PodView]) -> None:
        """A pod whose chip annotations are malformed holds no chips by them: say so once per
        version of it (a log line, a counter, a Warning Event on the pod)."""
        for pod in pods:
            errors = pod.errors()
            if not errors or self._malformed.get(pod.key) == pod.resource_version:
                continue
            self._malformed[pod.key] = pod.resource_version
            self.metrics.malformed("pod")
            message = "; ".join(errors)
            log.warning("ignoring chip annotations: %s", message, extra={"pod": pod.key})
            self.extender.state.events.warn(
                pod_ref(pod.namespace, pod.name, pod.uid), MALFORMED_REASON, message
            )

    def _restore_faults(self) -> None:
        """Fault jobs restarting when this scheduler (re)started or took the lead: from the
        record it (or the leader before it) wrote."""
        data = self.informers.fault_record_data()
        if data is None:
            self._restored = True
            return
        try:
            faults = rescheduling.restore(data)
            retries = rescheduling.restore_retries(data)
        except InvalidInput as bad:
            log.error("fault record not restored: %s", bad)
        else:
            self.extender.state.restore_faults(faults, retries)
            self._written[FAULT_RECORD] = dict(data)
        self._restored = True

    def _reschedule(self) -> None:
        for deletion in self.extender.state.restart_deletions():
            key = f"{deletion.namespace}/{deletion.name}"
            try:
                delete_marked(
                    self.gateway,
                    deletion.namespace,
                    deletion.name,
                    deletion.uid,
                    grace_seconds=deletion.grace_seconds,
                    reason=deletion.reason,
                )
                log.warning(
                    "deleted %s (grace %s): %s",
                    key,
                    deletion.grace_seconds,
                    deletion.why,
                    extra={"pod": key},
                )
                about = pod_ref(deletion.namespace, deletion.name, deletion.uid)
                self.extender.state.events.warn(about, deletion.reason, deletion.why)
            except NotFound:
                pass  # already gone (or replaced: the UID precondition keeps the new one)
            except KubeError as failed:
                log.warning("pod %s of a restarting job not deleted: %s", key, failed)
        record, configs = self.extender.state.fault_records()
        # No record before a first fault or restart.
        if configs or rescheduling.RETRIES_KEY in record or FAULT_RECORD in self._written:
            self._write_configmap(*FAULT_RECORD, record)
        for (namespace, name), data in configs.items():
            self._write_configmap(namespace, name, data)
        for namespace, job, update in self.extender.state.resets_due():
            self._update_reset_config(namespace, job, update)

    def _update_reset_config(self, namespace: str, job: str, update: ResetUpdate) -> None:
        """Volcano's update of the job's ``reset-config-<job>`` (``rescheduling.
        reset_config``), only when the user made one (label ``reset=true``): never created."""
        name = rescheduling.RESET_CONFIG_PREFIX + job
        try:
            current = self.gateway.get_configmap(namespace, name)
        except NotFound:
            return  # the job asked for none
        except KubeError as failed:
            log.warning("configmap %s/%s not read: %s", namespace, name, failed)
            return
        meta = current.get("metadata") or {}
        if (meta.get("labels") or {}).get("reset") != "true":
            return
        try:
            data = rescheduling.reset_config(
                current.get("data") or {},
                time.time(),
                pod_level=update.pod_level,
                graceful_exit=update.graceful_exit,
            )
        except InvalidInput as bad:
            log.warning("configmap %s/%s not updated: %s", namespace, name, bad)
            return
        try:
            self.gateway.update_configmap({**current, "data": data})
        except KubeError as failed:
            log.warning("configmap %s/%s not updated: %s", namespace, name, failed)
            return
        log.info("updated %s/%s: %s", namespace, name, data[rescheduling.RESET_DATA_KEY])

    def _delete_failed_creations(self) -> None:
        """A pod the kubelet failed because its vNPU could not be made is deleted at once,
        so that its controller makes it again (upstream's ``chipDyCutErr`` recovery)."""
        for pod in self.extender.state.failed_creations():
            try:
                delete_marked(
                    self.gateway,
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    grace_seconds=0,
                    reason=CHIP_CUT_ERROR,
                )
            except NotFound:
                self._delete_errors.pop(pod.key, None)
                continue  # already gone (or replaced: the UID precondition keeps the new one)
            except KubeError as failed:
                if self._delete_errors.get(pod.key) != str(failed):
                    log.warning("pod %s (vNPU not made) not deleted: %s", pod.key, failed)
                self._delete_errors[pod.key] = str(failed)
                continue
            self._delete_errors.pop(pod.key, None)
            self.metrics.vnpu_restarted()
            log.warning("deleted %s: its vNPU could not be made", pod.key, extra={"pod": pod.key})
            message = f"deleted: the kubelet failed it ({pod.reason}), its vNPU could not be made"
            self.extender.state.events.warn(
                pod_ref(pod.namespace, pod.name, pod.uid), CHIP_CUT_ERROR, message
            )

    def _write_configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create or replace a ConfigMap the scheduler owns, when its content changed."""
        if self._written.get((namespace, name)) == data:
            return
        # Labelled as the scheduler's: its admission policy lets it replace a job's
        # fault-config only when it made it (never a tenant's own ConfigMap of that name).
        metadata = {"namespace": namespace, "name": name, "labels": dict([WRITER_LABEL])}
        body: Obj = {"metadata": metadata, "data": data}
        try:
            try:
                self.gateway.update_configmap(body)
            except NotFound:
                self.gateway.create_configmap(body)
        except KubeError as failed:
            if self._write_errors.get((namespace, name)) != str(failed):
                log.warning("configmap %s/%s not written: %s", namespace, name, failed)
            self._write_errors[(namespace, name)] = str(failed)
            return
        self._write_errors.pop((namespace, name), None)
        self._written[(namespace, name)] = data

    def _maintain_loop(self) -> None:
        # start() has just read the cluster: the first pass is one period later.
        while not self._stop.wait(self._period):
            with self._reading:
                self._safely(self.maintain)

    def _lead(self) -> None:
        """This replica now leads: read everything once more, fault record included."""
        self._restored = False
        self.refresh_once_safely()

    def handle(self, verb: str, body: Any) -> Any:
        """One extender call: kube-scheduler's verbs, or ``volcano/<verb>``: KeyError when there
        is no such verb, BadRequest when the body has the wrong shape."""
        if verb not in KNOWN_VERBS:
            raise KeyError(verb)  # before any metric: a label value per path would grow forever
        if not self.deciding():
            raise NotLeader(verb)
        start = time.perf_counter()
        failed = True
        answer: Any
        self.extender.begin_call()
        try:
            if verb.startswith("volcano/"):
                answer = self.volcano.handle(verb.removeprefix("volcano/"), body)
                failed = bool(getattr(answer, "error_message", ""))
                return answer
            if verb == "filter":
                answer = self.extender.filter(body)
                failed = bool(answer.Error)
            elif verb == "prioritize":
                answer = self.extender.prioritize(body)
                failed = False
            elif verb == "preempt":
                answer = self.extender.preempt(body)
                failed = False
            else:
                answer = self.extender.bind(body)
                failed = bool(answer.Error)
            return answer
        finally:
            seconds = time.perf_counter() - start
            self.metrics.record(verb, seconds, failed, self.extender.call_kind())

    def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        access: Access = OPEN,
        metrics_at: tuple[str, int] | None = None,
    ) -> str:
        """Serve the verbs (and the probes and metrics) on ``host:port``, and the probes and
        metrics alone on ``metrics_at`` too when given (a port a NetworkPolicy can open to
        monitoring while the verbs' port admits only the schedulers)."""
        self.refresh_once_safely()
        self.extender.state.warm()
        # The view lives as long as the service; keep the cyclic collector from walking it
        # on every pause (at 5,000 nodes those walks were the tail of each request).
        gc.freeze()
        self.informers.start()
        self._server = HttpServer(
            "extender",
            self._get_with_map,
            self._post,
            # Volcano posts its whole session at onSessionOpen (jobs, nodes, queues: tens of
            # MiB at a few thousand nodes), which the service reads none of, and every node's
            # NodeInfo at prioritize (past 8 MiB from ~2,600 nodes), which it must read.
            limits=Limits(
                drained=frozenset({"/volcano/onSessionOpen"}),
                large=frozenset({"/volcano/prioritize"}),
            ),
            tls=access.tls,
            guard=lambda caller: self._guard(access, caller),
            guarded_get=self._map_path,
        )
        url = self._server.start(host, port)
        if metrics_at is not None:
            self._metrics_server = HttpServer("scheduler-metrics", self._get)
            self.metrics_url = self._metrics_server.start(*metrics_at)
        self._thread = threading.Thread(target=self._maintain_loop, name="maintain", daemon=True)
        self._thread.start()
        if self.leader is not None:
            self.leader.start()
        return url

    def _guard(self, access: Access, caller: Caller) -> Response | None:
        denied = access.check(caller)
        if denied is None:
            return None
        self.metrics.refused(denied.reason)
        refused = error(denied.code, denied.message)
        if denied.code == 401 and access.token is not None:
            # A 401 names the scheme that would do (RFC 9110 11.6.1): a browser opening the
            # NPU map then asks for the token as Basic's password.
            challenge = ("WWW-Authenticate", 'Basic realm="ascend-npu-scheduler", charset="UTF-8"')
            return dataclasses.replace(refused, headers=(challenge,))
        return refused

    def _map_path(self, path: str) -> bool:
        """A GET the verbs' guard decides: the NPU map's, when it is served."""
        return self.npu_map is not None and path.partition("?")[0] in MAP_PATHS

    def _get_with_map(self, path: str) -> Response:
        """The verbs' port: the NPU map too, when it is on (never on ``--metrics-listen``,
        which monitoring reaches unauthenticated)."""
        answer = None if self.npu_map is None else self.npu_map.get(path)
        return self._get(path) if answer is None else answer

    def _compare(self) -> Response:
        """``/debug/compare``, at most once per ``compare_period`` seconds of real time (429
        and Retry-After)."""
        period = self._compare_period
        with self._comparing:
            now = time.monotonic()
            if self._compared is not None and now - self._compared < period:
                wait = math.ceil(period - (now - self._compared))
                limited = error(429, f"one compare per {period:g} s: retry in {wait} s")
                return dataclasses.replace(limited, headers=(("Retry-After", str(wait)),))
            self._compared = now
        try:
            return json_response(200, self.informers.compare())
        except KubeError as failed:
            return error(503, f"the cluster could not be read to compare: {failed}")

    def _get(self, path: str) -> Response:
        if path == "/healthz":
            return Response.text(200, "ok\n")
        if path == "/readyz":
            ready = self.ready()
            return Response.text(200 if ready else 503, "ready\n" if ready else "not ready\n")
        if path == "/leader":
            leads = self.deciding()
            return Response.text(200 if leads else 503, "leader\n" if leads else "not leader\n")
        if path == "/metrics":
            text = self.metrics.text()
            return Response.text(200, text, PROMETHEUS_TEXT)
        return Response.json(404, {"Error": "not found"})

    def _post(self, path: str, raw: bytes) -> Response:
        verb = path.strip("/")
        if verb == COMPARE:
            return self._compare()
        body: Any
        try:
            # kube-scheduler's ExtenderArgs typed as it is decoded; the rest as JSON values.
            body = decode_extender_args(raw) if verb in TYPED_VERBS else decode_body(raw)
        except BadRequest as bad:
            return error(400, str(bad))
        if not isinstance(body, (dict, ExtenderArgs)):
            return error(400, "the body is not a JSON object")
        try:
            return json_response(200, self.handle(verb, body))
        except KeyError:
            return error(404, f"no verb {quoted(verb)}")
        except BadRequest as bad:
            return error(400, str(bad))
        except BindRefused as bind_refused:
            log.warning("%s", bind_refused)
            return error(403, str(bind_refused))
        except NotLeader:
            # A replica that lost the lease while its callers keep connections to it: closing
            # sends their next call through the Service again, to the leader (docs/ha.md).
            refused = error(503, "this replica does not lead: it decides nothing")
            return dataclasses.replace(refused, close=True)

    def _fresh_view(self) -> None:
        """Volcano opens a session: the watches keep the view current; a service that does
        not watch (a test's) reads the cluster at most once a period for it."""
        if self.informers.watching:
            return
        with self._reading:
            last = self._last_read
            if last is None or self._clock() - last >= self._period:
                self._safely(self.refresh)

    def refresh_once_safely(self) -> None:
        """One read of the whole cluster; no failure stops anything: it is counted, logged,
        and ``/readyz`` turns false once the last good read is three periods old."""
        with self._reading:
            self._safely(self.refresh)

    def _safely(self, step: Callable[[], None]) -> None:
        try:
            step()
        except KubeError as failed:
            self.metrics.refresh_failed()
            log.warning("cluster not read: %s", failed)
        except Exception:
            self.metrics.refresh_failed()
            log.exception("refresh failed")

    def ready(self) -> bool:
        """The cluster has been read, and not too long ago: this replica could lead now.
        Leader or not: were only the leader ready, a PodDisruptionBudget could never let it
        be evicted (a node drain would hang); the leader label routes the verbs instead."""
        last = self._last_read
        return last is not None and self._clock() - last <= STALE_PERIODS * self._period

    def deciding(self) -> bool:
        """Whether this replica decides now: there is no election, or it leads and has
        renewed its lease within the renew deadline."""
        return self.leader is None or self.leader.may_decide()

    def stop(self) -> None:
        # The election first: the other replica takes over while this one winds down.
        if self.leader is not None:
            self.leader.stop()
        self._stop.set()
        self.informers.stop()
        for server in (self._server, self._metrics_server):
            if server is not None:
                server.stop()
