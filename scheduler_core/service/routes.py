"""The routes of the verbs' port: a request's path and body in, the answer out. ``POST
/<verb>`` (kube-scheduler's extender JSON, Go field names: ``Pod``, ``NodeNames``,
``FailedNodes``, ``Host``, ``Score``, ``PodName``, …) and ``/volcano/<verb>`` reach the verbs
(``verbs``) on the replica that decides; ``POST /debug/compare`` answers where this replica's
view differs from a fresh read of the cluster (empty: nowhere), one call per
``COMPARE_PERIOD``; ``GET /healthz``, ``/readyz``, ``/leader``, ``/metrics`` and, when it is
on, the NPU map (``views``). Who may call which is ``access``'s; this module decodes, calls
and counts, and keeps of its own only when ``/debug/compare`` last ran."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from contract.chip_names import quoted
from infra.http import PROMETHEUS_TEXT, Response, error
from infra.kube.port import KubeError
from scheduler_core.service.state.informers import ClusterInformers
from scheduler_core.service.verbs.extender import BindRefused, Extender
from scheduler_core.service.verbs.plugin import PluginVerbs
from scheduler_core.service.verbs.volcano import VolcanoVerbs
from scheduler_core.service.views.metrics import Metrics
from scheduler_core.service.views.npu_map import PATHS as MAP_PATHS
from scheduler_core.service.views.npu_map import NpuMap
from scheduler_core.service.wire import BadRequest, ExtenderArgs, decode_extender_args

log = logging.getLogger(__name__)

VERBS = ("filter", "prioritize", "preempt", "bind")
TYPED_VERBS = frozenset({"filter", "prioritize"})
KNOWN_VERBS = (
    frozenset(VERBS) | frozenset(PluginVerbs.VERBS) | {f"volcano/{v}" for v in VolcanoVerbs.VERBS}
)
COMPARE = "debug/compare"  # POST: this replica's view against a fresh read (guarded)
# Seconds between two /debug/compare calls a replica answers: each LISTs every pod, node and
# ConfigMap, which a caller looping on it would turn into load on the API server.
COMPARE_PERIOD = 10.0


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


class NotLeader(Exception):
    """A verb reached a replica that does not lead: it decides nothing."""


class Routes:
    def __init__(
        self,
        extender: Extender,
        volcano: VolcanoVerbs,
        informers: ClusterInformers,
        metrics: Metrics,
        npu_map: NpuMap | None,
        *,
        deciding: Callable[[], bool],
        ready: Callable[[], bool],
        compare_period: float = COMPARE_PERIOD,
    ) -> None:
        self._extender = extender
        self._volcano = volcano
        self._plugin = PluginVerbs(extender)
        self._informers = informers
        self._metrics = metrics
        self._npu_map = npu_map
        self._deciding = deciding
        self._ready = ready
        self._compare_period = compare_period
        self._compared: float | None = None  # when /debug/compare last ran (monotonic)
        self._comparing = threading.Lock()

    def handle(self, verb: str, body: Any) -> Any:
        """One extender call: kube-scheduler's verbs, or ``volcano/<verb>``: KeyError when there
        is no such verb, BadRequest when the body has the wrong shape."""
        if verb not in KNOWN_VERBS:
            raise KeyError(verb)  # before any metric: a label value per path would grow forever
        if not self._deciding():
            raise NotLeader(verb)
        start = time.perf_counter()
        failed = True
        answer: Any
        extender = self._extender
        extender.begin_call()
        try:
            if verb.startswith("volcano/"):
                answer = self._volcano.handle(verb.removeprefix("volcano/"), body)
                failed = bool(getattr(answer, "error_message", ""))
                return answer
            if verb in PluginVerbs.VERBS:
                answer = self._plugin.handle(verb, body)
                failed = bool(getattr(answer, "Error", ""))  # a place without nodes is no failure
                return answer
            if verb == "filter":
                answer = extender.filter(body, best=extender.filter_best)
                failed = bool(answer.Error)
            elif verb == "prioritize":
                answer = extender.prioritize(body)
                failed = False
            elif verb == "preempt":
                answer = extender.preempt(body)
                failed = False
            else:
                answer = extender.bind(body)
                failed = bool(answer.Error)
            return answer
        finally:
            seconds = time.perf_counter() - start
            self._metrics.record(verb, seconds, failed, extender.call_kind())

    def guarded_get(self, path: str) -> bool:
        """A GET the verbs' guard decides: the NPU map's, when it is served."""
        return self._npu_map is not None and path.partition("?")[0] in MAP_PATHS

    def get_with_map(self, path: str) -> Response:
        """The verbs' port: the NPU map too, when it is on (never on ``--metrics-listen``,
        which monitoring reaches unauthenticated)."""
        answer = None if self._npu_map is None else self._npu_map.get(path)
        return self.get(path) if answer is None else answer

    def get(self, path: str) -> Response:
        if path == "/healthz":
            return Response.text(200, "ok\n")
        if path == "/readyz":
            ready = self._ready()
            return Response.text(200 if ready else 503, "ready\n" if ready else "not ready\n")
        if path == "/leader":
            leads = self._deciding()
            return Response.text(200 if leads else 503, "leader\n" if leads else "not leader\n")
        if path == "/metrics":
            text = self._metrics.text()
            return Response.text(200, text, PROMETHEUS_TEXT)
        return Response.json(404, {"Error": "not found"})

    def post(self, path: str, raw: bytes) -> Response:
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
            return json_response(200, self._informers.compare())
        except KubeError as failed:
            return error(503, f"the cluster could not be read to compare: {failed}")
