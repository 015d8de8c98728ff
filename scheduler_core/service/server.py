"""The scheduler service: the extender over HTTP, fed by a refresh loop.

``POST /filter``, ``/prioritize``, ``/bind`` take kube-scheduler's extender JSON (Go field
names: ``Pod``, ``NodeNames``, ``FailedNodes``, ``Host``, ``Score``, ``PodName``, …);
``GET /healthz``, ``/readyz`` (ready once the cluster has been read) and ``/metrics``
(Prometheus text). Every ``refresh_period`` the loop lists nodes, DeviceInfo ConfigMaps,
the ToR topology (``kube-system/basic-tor-node-cm``) and pods, hands the extender a new
snapshot, deletes the pods of fault jobs so they restart, and writes what changed of
``volcano-system/vcjob-fault-npu-cm``, the jobs' ``fault-config-<job>`` and
``volcano-system/tor-share-cm``.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contract import deviceinfo
from contract.chip_names import InvalidInput
from contract.objects import Obj
from infra.histogram import Histogram
from infra.kube.port import KubeError, KubeGateway, NotFound
from scheduler_core.engine import rescheduling, tor, tor_share
from scheduler_core.service import cluster_view as cluster_state
from scheduler_core.service.extender import Extender
from scheduler_core.service.volcano import VolcanoVerbs

log = logging.getLogger(__name__)

VERBS = ("filter", "prioritize", "bind")
TOPOLOGY_CONFIGMAP, TOPOLOGY_KEY = "basic-tor-node-cm", "tor_info"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[str, int] = dict.fromkeys(VERBS, 0)
        self.errors: dict[str, int] = dict.fromkeys(VERBS, 0)
        self.latency: dict[str, Histogram] = {}
        self.refresh_errors = 0

    def record(self, verb: str, seconds: float, failed: bool) -> None:
        with self._lock:
            self.calls[verb] = self.calls.get(verb, 0) + 1
            self.errors[verb] = self.errors.get(verb, 0) + int(failed)
            histogram = self.latency.setdefault(
                verb, Histogram("ascend_scheduler_request_seconds", f'verb="{verb}"')
            )
        histogram.observe(seconds)

    def text(self, binds: int, nodes: int) -> str:
        with self._lock:
            lines = ["# TYPE ascend_scheduler_requests_total counter"]
            lines += [
                f'ascend_scheduler_requests_total{{verb="{v}"}} {n}' for v, n in self.calls.items()
            ]
            lines.append("# TYPE ascend_scheduler_request_errors_total counter")
            lines += [
                f'ascend_scheduler_request_errors_total{{verb="{v}"}} {n}'
                for v, n in self.errors.items()
            ]
            lines.append("# TYPE ascend_scheduler_request_seconds histogram")
            for histogram in self.latency.values():
                lines += histogram.lines()
            lines += [
                "# TYPE ascend_scheduler_binds_total counter",
                f"ascend_scheduler_binds_total {binds}",
                "# TYPE ascend_scheduler_npu_nodes gauge",
                f"ascend_scheduler_npu_nodes {nodes}",
                "# TYPE ascend_scheduler_refresh_errors_total counter",
                f"ascend_scheduler_refresh_errors_total {self.refresh_errors}",
            ]
        return "\n".join(lines) + "\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The stdlib default backlog of 5 resets connections when callers arrive together.
    request_queue_size = 128


class SchedulerService:
    def __init__(
        self,
        gateway: KubeGateway,
        extender: Extender,
        refresh_period: float = 1.0,
        self_maintain: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gateway = gateway
        self.extender = extender
        self.metrics = Metrics()
        self.volcano = VolcanoVerbs(extender, self.refresh_once_safely)
        self.nodes = 0
        self._period = refresh_period
        self._self_maintain = self_maintain
        self._clock = clock
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._written: dict[tuple[str, str], dict[str, str]] = {}
        self._write_errors: dict[tuple[str, str], str] = {}
        self._topology_error = ""
        self._restored = False

    def refresh(self) -> None:
        """Read the cluster once and give the extender the new snapshot."""
        nodes = self.gateway.list_nodes()
        configmaps = self.gateway.list_configmaps(deviceinfo.NAMESPACE)
        pods, _ = self.gateway.list_pods(None)
        if not self._restored:
            self._restore_faults()
        snapshot = cluster_state.build(nodes, configmaps, pods, self._clock(), self._self_maintain)
        self.extender.refresh(snapshot, pods, self._topology(configmaps))
        # The snapshot lives until the next refresh; keep the cyclic collector from walking
        # it on every pause (at 5,000 nodes those walks were the tail of each request).
        gc.freeze()
        self.nodes = len(snapshot.nodes)
        for name, reason in snapshot.left_out.items():
            log.debug("node %s left out: %s", name, reason)
        self._reschedule()
        shared = self.extender.tor_share_data()
        if shared is not None:
            self._write_configmap(*tor_share.CONFIGMAP, shared)

    def _topology(self, configmaps: list[Obj]) -> tor.Topology | None:
        """The ToR topology, if imported; a malformed one is reported once and ignored."""
        found = next(
            (c for c in configmaps if c.get("metadata", {}).get("name") == TOPOLOGY_CONFIGMAP),
            None,
        )
        if found is None:
            return None
        try:
            topology = tor.parse_topology((found.get("data") or {}).get(TOPOLOGY_KEY, ""))
        except InvalidInput as bad:
            if str(bad) != self._topology_error:
                log.error("%s/%s ignored: %s", deviceinfo.NAMESPACE, TOPOLOGY_CONFIGMAP, bad)
            self._topology_error = str(bad)
            return None
        self._topology_error = ""
        return topology

    def _restore_faults(self) -> None:
        """Fault jobs restarting when this scheduler (re)started: from the record it wrote."""
        try:
            data = self.gateway.get_configmap(*rescheduling.RECORD).get("data") or {}
        except NotFound:
            self._restored = True
            return
        try:
            faults = rescheduling.restore(data)
        except InvalidInput as bad:
            log.error("fault record not restored: %s", bad)
        else:
            self.extender.restore_faults(faults)
            self._written[rescheduling.RECORD] = dict(data)
        self._restored = True

    def _reschedule(self) -> None:
        for deletion in self.extender.fault_deletions():
            key = f"{deletion.namespace}/{deletion.name}"
            try:
                self.gateway.delete_pod(
                    deletion.namespace, deletion.name, deletion.uid, deletion.grace_seconds
                )
                log.warning(
                    "deleted %s of a fault job (grace %s)",
                    key,
                    deletion.grace_seconds,
                    extra={"pod": key},
                )
            except NotFound:
                pass  # already gone (or replaced: the UID precondition keeps the new one)
            except KubeError as failed:
                log.warning("fault job pod %s not deleted: %s", key, failed)
        record, configs = self.extender.fault_records()
        if configs or rescheduling.RECORD in self._written:  # no record before a first fault
            self._write_configmap(*rescheduling.RECORD, record)
        for (namespace, name), data in configs.items():
            self._write_configmap(namespace, name, data)

    def _write_configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create or replace a ConfigMap the scheduler owns, when its content changed."""
        if self._written.get((namespace, name)) == data:
            return
        body: Obj = {"metadata": {"namespace": namespace, "name": name}, "data": data}
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

    def _refresh_loop(self) -> None:
        # start() has just read the cluster: the first refresh is one period later.
        while not self._stop.wait(self._period):
            try:
                self.refresh()
            except KubeError as failed:
                self.metrics.refresh_errors += 1
                log.warning("cluster not read: %s", failed)

    def handle(self, verb: str, body: Any) -> Any:
        """One extender call: kube-scheduler's verbs, or ``volcano/<verb>`` (KeyError if none)."""
        start = time.perf_counter()
        failed = True
        answer: Any
        try:
            if verb.startswith("volcano/"):
                answer = self.volcano.handle(verb.removeprefix("volcano/"), body)
                failed = bool(answer.get("errorMessage")) if isinstance(answer, dict) else False
                return answer
            if verb not in VERBS:
                raise KeyError(verb)
            if verb == "filter":
                answer = self.extender.filter(body)
                failed = bool(answer.get("Error"))
            elif verb == "prioritize":
                answer = self.extender.prioritize(body)
                failed = False
            else:
                answer = self.extender.bind(body)
                failed = bool(answer.get("Error"))
            return answer
        finally:
            self.metrics.record(verb, time.perf_counter() - start, failed)

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self.refresh_once_safely()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

            def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif self.path == "/readyz":
                    ready = service.extender.ready
                    self._send(
                        200 if ready else 503, b"ready\n" if ready else b"not ready\n", "text/plain"
                    )
                elif self.path == "/metrics":
                    text = service.metrics.text(service.extender.binds, service.nodes)
                    self._send(200, text.encode(), "text/plain; version=0.0.4")
                else:
                    self._send(404, b'{"Error":"not found"}')

            def do_POST(self) -> None:
                verb = self.path.strip("/")
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, json.dumps({"Error": "the body is not JSON"}).encode())
                    return
                if not isinstance(body, dict):
                    self._send(400, json.dumps({"Error": "the body is not a JSON object"}).encode())
                    return
                try:
                    answer = service.handle(verb, body)
                except KeyError:
                    self._send(404, json.dumps({"Error": f"no verb {verb!r}"}).encode())
                    return
                self._send(200, json.dumps(answer).encode())

        server = _Server((host, port), Handler)
        self._server = server
        for target in (server.serve_forever, self._refresh_loop):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return f"http://{host}:{server.server_address[1]}"

    def refresh_once_safely(self) -> None:
        try:
            self.refresh()
        except KubeError as failed:
            log.warning("cluster not read yet: %s", failed)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
