"""A stand-in for kube-scheduler driving an HTTP extender, written from kubernetes v1.34:

- ``pkg/scheduler/extender.go`` (HTTPExtender): ``IsInterested`` by ``managedResources``;
  ``Filter`` sends ``NodeNames`` with ``nodeCacheCapable`` and a ``NodeList`` without, and
  reads back the same form (a node it did not send is an error); ``Prioritize``; ``Bind``;
  every call a POST with ``httpTimeout`` (5 s by default), a non-200 answer or an ``Error``
  an error.
- ``pkg/scheduler/schedule_one.go``: the scheduling cycle (the in-tree filters, here
  NodeResourcesFit for the extended resources, then ``findNodesThatPassExtenders``:
  ``FailedAndUnresolvableNodes`` are UnschedulableAndUnresolvable, ``FailedNodes``
  Unschedulable, a filter error fails the cycle unless the extender is ``ignorable``;
  ``prioritizeNodes``: extender score × weight × 10 added to the in-tree scores, a prioritize
  error ignored; ``selectHost``: the best score, ties at random), the pod assumed on its node,
  then the binding cycle run asynchronously (the next pod's cycle starts meanwhile); a failed
  bind forgets the assumed pod. DefaultPreemption considers only Unschedulable nodes (a node
  that failed an in-tree filter, never sent to the extender, is one); the stand-in records
  those as the pod's preemption candidates rather than evicting. The real kube-scheduler then
  asks the extender's ``preemptVerb``, which drops the nodes it holds unresolvable: that step
  and the evictions run on the real kube-scheduler only (``tests/real/test_preemption.py``).
- ``pkg/scheduler/backend/queue``: a failed pod backs off 1 s, doubling to 10 s.
- ``pkg/scheduler/framework/plugins/nodeaffinity`` (``spec.nodeSelector``) and
  ``interpodaffinity`` (a pod's own required anti-affinity over ``kubernetes.io/hostname``, the
  form Huawei's job samples use; existing pods' anti-affinity is not checked): ``node_rules``,
  which the Volcano stand-in applies too, as Volcano's ``predicates`` plugin does.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from contract.objects import PLACED_RESOURCES, Obj
from simulation.selectors import selects

MAX_NODE_SCORE, MAX_EXTENDER_PRIORITY = 100, 10
UNSCHEDULABLE, UNRESOLVABLE = "Unschedulable", "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """One ``extenders[]`` entry of a KubeSchedulerConfiguration (``config/v1/types.go``)."""

    url_prefix: str
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    bind_verb: str = "bind"
    weight: int = 1
    node_cache_capable: bool = True
    http_timeout: float = 5.0  # DefaultExtenderTimeout
    ignorable: bool = False
    managed_resources: tuple[str, ...] = PLACED_RESOURCES


SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
HOSTNAME = "kubernetes.io/hostname"


def node_rules(
    pod: Obj, nodes: Sequence[Obj], neighbours: Mapping[str, Sequence[Mapping[str, str]]]
) -> tuple[list[Obj], dict[str, tuple[str, str]]]:
    """The nodes that pass the pod's ``nodeSelector`` and its required pod anti-affinity over
    hostnames (``neighbours``: node → the labels of the pods on it or assumed there), and
    why each other node does not."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    terms = [t.get("labelSelector") or {} for t in anti if t.get("topologyKey") == HOSTNAME]
    passing, statuses = [], {}
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            statuses[name] = (UNRESOLVABLE, SELECTOR_MISMATCH)
        elif any(selects(t, other) for t in terms for other in neighbours.get(name, ())):
            statuses[name] = (UNSCHEDULABLE, ANTI_AFFINITY)
        else:
            passing.append(node)
    return passing, statuses


def neighbours_of(pods: Sequence[Obj]) -> dict[str, list[Mapping[str, str]]]:
    """Node → the labels of the live pods bound there."""
    found: dict[str, list[Mapping[str, str]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            found.setdefault(node, []).append(pod["metadata"].get("labels") or {})
    return found


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 1.0  # podInitialBackoffDuration
    maximum: float = 10.0  # podMaxBackoffDuration

    def after(self, attempts: int) -> float:
        return float(min(self.maximum, self.initial * 2.0 ** max(attempts - 1, 0)))


class ExtenderError(Exception):
    """A call the extender failed: an error answer, a non-200, a timeout."""


class Connections:
    """A caller's kept-alive connections (Go's transport keeps the extender's connections
    open): one per calling thread and server, all closed by ``close``, and with the caller
    once it is collected (a connection to a server since stopped would stay half closed)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._closer = weakref.finalize(self, _close_all, self._open, self._lock)

    def post(self, url: str, body: Any, timeout: float) -> Any:
        """The answer's JSON; ExtenderError on a non-200, a timeout, no JSON."""
        parts = urllib.parse.urlsplit(url)
        verb = parts.path.rsplit("/", 1)[-1]
        data = json.dumps(body).encode()
        try:
            status, answer = self._exchange(parts.netloc, parts.path, data, timeout)
        except (http.client.HTTPException, OSError) as failed:
            raise ExtenderError(f"{verb}: {failed}") from None
        return reply(verb, status, answer)

    def _exchange(self, netloc: str, path: str, data: bytes, timeout: float) -> tuple[int, bytes]:
        pool: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault("pool", {})
        kept = pool.pop(netloc, None)
        connection = kept or self._connect(netloc, timeout)
        try:
            connection.request(
                "POST", path, body=data, headers={"Content-Type": "application/json"}
            )
            answer = connection.getresponse()
            body = answer.read()
        except (http.client.HTTPException, OSError) as failed:
            self._drop(connection)
            if kept is not None and not isinstance(failed, TimeoutError):
                return self._exchange(netloc, path, data, timeout)  # the server closed it
            raise
        pool[netloc] = connection
        return answer.status, body

    def _connect(self, netloc: str, timeout: float) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection(netloc, timeout=timeout)
        with self._lock:
            self._open.add(connection)
        return connection

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        with self._lock:
            self._open.discard(connection)

    def close(self) -> None:
        """Every connection closed (the callers' threads done with them)."""
        _close_all(self._open, self._lock)


def _close_all(connections: set[http.client.HTTPConnection], lock: threading.Lock) -> None:
    with lock:
        closing = list(connections)
        connections.clear()
    for connection in closing:
        connection.close()


def post_json(url: str, body: Any, timeout: float) -> Any:
    """One POST on a connection of its own, closed after: the answer's JSON; ExtenderError
    on a non-200, a timeout, no JSON. (A caller keeping connections has ``Connections``.)"""
    once = Connections()
    try:
        return once.post(url, body, timeout)
    finally:
        once.close()


def reply(verb: str, status: int, data: bytes) -> Any:
    """An extender's answer: its JSON body, or ExtenderError on a non-200 or no JSON."""
    if status != 200:
        raise ExtenderError(f"{verb}: HTTP {status}")
    try:
        return json.loads(data)
    except ValueError as failed:
        raise ExtenderError(f"{verb}: {failed}") from None


def interested(pod: Obj, managed: Sequence[str]) -> bool:
    """Whether a caller sends the pod to the extender: no managed resources means every
    pod, else one it requests (``IsInterested``; Volcano's ``managedResources`` alike)."""
    return not managed or any(r in managed for r in requests_of(pod))


def requests_of(pod: Obj) -> dict[str, int]:
    """The pod's requests of extended and NPU resources (limits stand in for requests, as
    the API server defaults them for extended resources)."""
    totals: dict[str, int] = {}
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for name, value in {
            **(resources.get("limits") or {}),
            **(resources.get("requests") or {}),
        }.items():
            if str(value).isdigit():
                totals[name] = max(totals.get(name, 0), int(value))
    return totals


DEFAULT_SCHEDULER = "default-scheduler"
# The stand-in runs two profiles, as one kube-scheduler can: the cluster's default one, and
# the overlay's that NPU pods choose (the only one whose pods the extender's /bind binds).
PROFILES = (DEFAULT_SCHEDULER, "ascend-npu-scheduler")
# The schedulers whose pods the simulated cluster's service places: these profiles and the
# Volcano stand-in's (simulation/volcano.py SCHEDULER_NAME).
SERVICE_PROFILES = (*PROFILES, "volcano")


class ClusterStore(Protocol):
    """What a scheduler reads and writes of the cluster: its cache, and Bindings."""

    def list_pods(self, node: str | None) -> tuple[list[Obj], str]: ...

    def list_nodes(self) -> list[Obj]: ...

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None: ...


class Cluster(Protocol):
    @property
    def url(self) -> str:
        """The extender's."""
        ...

    @property
    def store(self) -> ClusterStore: ...


def pending_pods(cluster: Cluster, scheduler_name: str = DEFAULT_SCHEDULER) -> list[Obj]:
    """Pods of ``scheduler_name`` (their ``spec.schedulerName``, defaulted by the API server)
    not bound yet, whatever they ask for."""
    pods, _ = cluster.store.list_pods(None)
    return _pending(pods, (scheduler_name,))


def _pending(pods: list[Obj], scheduler_names: tuple[str, ...]) -> list[Obj]:
    return [
        p
        for p in pods
        if not (p.get("spec") or {}).get("nodeName")
        and ((p.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER) in scheduler_names
        and p["status"].get("phase") == "Pending"
        and not p["metadata"].get("deletionTimestamp")
    ]


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class HttpExtender:
    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self.connections = Connections()

    def interested(self, pod: Obj) -> bool:
        return interested(pod, self.config.managed_resources)

    def _send(self, verb: str, body: Any) -> Any:
        url = f"{self.config.url_prefix}/{verb}"
        return self.connections.post(url, body, self.config.http_timeout)

    def _args(self, pod: Obj, nodes: Sequence[Obj]) -> dict[str, Any]:
        if self.config.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod, "Nodes": {"items": list(nodes)}, "NodeNames": None}

    def filter(
        self, pod: Obj, nodes: Sequence[Obj]
    ) -> tuple[list[Obj], dict[str, str], dict[str, str]]:
        result = self._send(self.config.filter_verb, self._args(pod, nodes))
        if result.get("Error"):
            raise ExtenderError(result["Error"])
        by_name = {n["metadata"]["name"]: n for n in nodes}
        if self.config.node_cache_capable and result.get("NodeNames") is not None:
            names = list(result["NodeNames"])
        elif result.get("Nodes") is not None:
            names = [n["metadata"]["name"] for n in result["Nodes"].get("items") or []]
        else:
            names = []
        for name in names:
            if name not in by_name:
                raise ExtenderError(f"extender claims a filtered node {name!r} not in the input")
        failed = dict(result.get("FailedNodes") or {})
        never = dict(result.get("FailedAndUnresolvableNodes") or {})
        return [by_name[n] for n in names], failed, never

    def prioritize(self, pod: Obj, nodes: Sequence[Obj]) -> dict[str, int]:
        scores = self._send(self.config.prioritize_verb, self._args(pod, nodes))
        return {s["Host"]: int(s["Score"]) for s in scores}

    def bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        args = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        result = self._send(self.config.bind_verb, args)
        if result.get("Error"):
            raise ExtenderError(result["Error"])


@dataclass
class _Queued:
    attempts: int = 0
    ready_at: float = 0.0


@dataclass
class Outcome:
    node: str | None = None
    statuses: dict[str, tuple[str, str]] = field(default_factory=dict)  # node → (code, why)
    error: str = ""


class KubeScheduler:
    """kube-scheduler's part, against the extender over HTTP: one scheduling cycle at a time,
    bindings asynchronous."""

    def __init__(
        self,
        cluster: Cluster,
        config: ExtenderConfig | None = None,
        *,
        backoff: Backoff = Backoff(0.0, 0.0),
        clock: Callable[[], float] = time.monotonic,
        seed: int = 0,
    ) -> None:
        self.cluster = cluster
        self.extender = HttpExtender(config or ExtenderConfig(cluster.url))
        self._backoff = backoff
        self._clock = clock
        self._rng = random.Random(seed)
        self._queue: dict[str, _Queued] = {}
        # pod → node, requests, and its resourceVersion when it was assumed
        self._assumed: dict[str, tuple[str, dict[str, int], str]] = {}
        self._lock = threading.Lock()
        self._binder = ThreadPoolExecutor(4, thread_name_prefix="binding-cycle")
        self._snapshot: dict[tuple[str, str], int] | None = None
        self.reasons: dict[str, dict[str, str]] = {}  # pod → node → why not
        self.preemption_candidates: dict[str, list[str]] = {}  # pod → Unschedulable nodes

    def pending(self) -> list[Obj]:
        return [p for name in PROFILES for p in pending_pods(self.cluster, name)]

    @property
    def assumed(self) -> int:
        """Pods bound or being bound that the cache does not show bound yet."""
        with self._lock:
            return len(self._assumed)

    def _fits(self, pod: Obj, nodes: list[Obj]) -> tuple[list[Obj], dict[str, tuple[str, str]]]:
        """The in-tree NodeResourcesFit for the extended resources: allocatable less what
        bound and assumed pods request."""
        asked = {r: n for r, n in requests_of(pod).items() if "/" in r}
        used = dict(self._snapshot if self._snapshot is not None else self._usage())
        with self._lock:
            for where, requests, _ in self._assumed.values():
                for resource, count in requests.items():
                    used[(where, resource)] = used.get((where, resource), 0) + count
        passing, statuses = [], {}
        for node in nodes:
            name = node["metadata"]["name"]
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            short = [
                r
                for r, n in asked.items()
                if int(str(allocatable.get(r, "0")) or 0) - used.get((name, r), 0) < n
            ]
            if short:
                statuses[name] = (UNSCHEDULABLE, f"Insufficient {short[0]}")
            else:
                passing.append(node)
        return passing, statuses

    def _usage(self, pods: list[Obj] | None = None) -> dict[tuple[str, str], int]:
        """(node, resource) → what the pods bound there request: the scheduler's cache as a
        cycle's snapshot sees it."""
        used: dict[tuple[str, str], int] = {}
        if pods is None:
            pods, _ = self.cluster.store.list_pods(None)
        for other in pods:
            node = (other.get("spec") or {}).get("nodeName")
            if node and other["status"].get("phase") not in ("Succeeded", "Failed"):
                for resource, count in requests_of(other).items():
                    used[(node, resource)] = used.get((node, resource), 0) + count
        return used

    def schedule_one(
        self,
        pod: Obj,
        nodes: list[Obj],
        neighbours: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    ) -> Outcome:
        """The scheduling cycle; the binding cycle is started, not awaited."""
        outcome = Outcome()
        nodes, ruled_out = node_rules(pod, nodes, neighbours or {})
        feasible, outcome.statuses = self._fits(pod, nodes)
        outcome.statuses.update(ruled_out)
        interested = self.extender.interested(pod)
        if feasible and interested:
            try:
                passing, failed, never = self.extender.filter(pod, feasible)
            except ExtenderError as failed_call:
                if not self.extender.config.ignorable:
                    outcome.error = str(failed_call)
                    return outcome
            else:
                for name, why in never.items():
                    outcome.statuses[name] = (UNRESOLVABLE, why)
                for name, why in failed.items():
                    if name not in never:
                        outcome.statuses[name] = (UNSCHEDULABLE, why)
                feasible = passing
        if not feasible:
            return outcome
        scores = dict.fromkeys((n["metadata"]["name"] for n in feasible), MAX_NODE_SCORE)
        if interested:
            try:
                extra = self.extender.prioritize(pod, feasible)
            except ExtenderError:
                extra = {}  # "Prioritize error ignored"
            factor = self.extender.config.weight * MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
            for name, score in extra.items():
                if name in scores:
                    scores[name] += score * factor
        best = max(scores.values())
        outcome.node = self._rng.choice([n for n, s in scores.items() if s == best])
        return outcome

    def _bind(self, pod: Obj, node: str, interested: bool) -> str:
        """The binding cycle: the extender binds (it is the binder), or the default binder."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        try:
            if interested and self.extender.config.bind_verb:
                self.extender.bind(pod, node)
            else:
                meta = pod["metadata"]
                self.cluster.store.bind_pod(meta["namespace"], meta["name"], meta["uid"], node, {})
        except Exception as failed:
            with self._lock:
                self._assumed.pop(key, None)
            return str(failed)
        return ""

    def cycle(self, settle: Callable[[], None] | None = None) -> int:
        """One pass over the pending pods whose backoff is over; bindings run while the next
        pods are scheduled, and all of this pass's are awaited at its end. How many bound.

        A bound pod stays assumed until the cache shows it bound (``cache.go`` keeps an
        assumed pod until its informer's add arrives): a cache fed by a watch lags the
        Binding, and must neither offer its resources again nor schedule the pod twice."""
        nodes = sorted(self.cluster.store.list_nodes(), key=lambda n: n["metadata"]["name"])
        now = self._clock()
        pods, _ = self.cluster.store.list_pods(None)
        # Taken once per pass (the pods this pass binds count as assumed), not once per pod:
        # reading every pod per pod made the stand-in the bottleneck.
        self._snapshot = self._usage(pods)
        pending_as_assumed = {
            _key(p): p["metadata"].get("resourceVersion", "")
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
        }
        with self._lock:
            # Gone from the assumed: seen bound, deleted, or recreated pending since.
            for key, (_, _, version) in list(self._assumed.items()):
                if pending_as_assumed.get(key) != version:
                    del self._assumed[key]
            assumed_on = {key: node for key, (node, _, _) in self._assumed.items()}
        neighbours = neighbours_of(pods)
        for pod in pods:
            if (node := assumed_on.get(_key(pod))) is not None:
                neighbours.setdefault(node, []).append(pod["metadata"].get("labels") or {})
        started: list[tuple[str, Future[str], str]] = []
        for pod in _pending(pods, PROFILES):
            key = _key(pod)
            queued = self._queue.setdefault(key, _Queued())
            if queued.ready_at > now or key in self._assumed:
                continue
            outcome = self.schedule_one(pod, nodes, neighbours)
            if outcome.node is None:
                self._failed(key, outcome)
                continue
            neighbours.setdefault(outcome.node, []).append(pod["metadata"].get("labels") or {})
            with self._lock:
                self._assumed[key] = (
                    outcome.node,
                    requests_of(pod),
                    pod["metadata"].get("resourceVersion", ""),
                )
            interested = self.extender.interested(pod)
            started.append(
                (key, self._binder.submit(self._bind, pod, outcome.node, interested), outcome.node)
            )
        bound = 0
        for key, done, node in started:
            error = done.result()
            if error:
                self._failed(key, Outcome(statuses={node: (UNSCHEDULABLE, error)}))
            else:
                bound += 1
                self._queue.pop(key, None)
                self.reasons.pop(key, None)
                self.preemption_candidates.pop(key, None)
        self._snapshot = None
        if settle is not None:
            settle()
        return bound

    def settle(self, changed: threading.Event, timeout: float) -> int:
        """Passes until one binds nothing and the cache shows every binding (each next pass
        once ``changed`` says the cache moved, or a second later): how many pods bound."""
        deadline = time.monotonic() + timeout
        bound = 0
        while time.monotonic() < deadline:
            changed.clear()
            placed = self.cycle()
            bound += placed
            if not placed and not self.assumed:
                break
            changed.wait(1.0)
        return bound

    def _failed(self, key: str, outcome: Outcome) -> None:
        queued = self._queue.setdefault(key, _Queued())
        queued.attempts += 1
        queued.ready_at = self._clock() + self._backoff.after(queued.attempts)
        reasons = {n: why for n, (_, why) in outcome.statuses.items()}
        if outcome.error:
            reasons = {"": outcome.error}
        self.reasons[key] = reasons
        self.preemption_candidates[key] = sorted(
            n for n, (code, _) in outcome.statuses.items() if code == UNSCHEDULABLE
        )

    def close(self) -> None:
        self._binder.shutdown(wait=True)
        self.extender.connections.close()
