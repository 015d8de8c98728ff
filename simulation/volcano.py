"""A stand-in for Volcano's scheduler with its extender plugin, written from volcano v1.13:

- ``pkg/scheduler/scheduler.go`` runOnce: open a session, run the actions (enqueue,
  allocate), close it.
- ``pkg/scheduler/plugins/extender/extender.go``: ``onSessionOpen`` posts the whole session
  (Jobs, Nodes, Queues, ...); when it fails and the plugin is not ``ignorable`` the other
  callbacks are not registered for that session (the session places pods without the
  extender). ``managedResources`` (a list) decides which tasks are sent. ``predicate``
  answers a code (0 fits; any other fails the node; 3 is unresolvable: preempt and reclaim
  skip it); ``prioritize`` a score per node; ``allocateFunc`` / ``deallocateFunc`` fire with
  the TaskInfo as the statement allocates, pipelines and discards; ``jobEnqueueable``.
- ``pkg/scheduler/actions/enqueue``: a Pending job becomes Inqueue when no plugin rejects it.
- ``pkg/scheduler/actions/allocate`` and ``framework/statement.go``: per job, each pending task
  onto the best node that passes the predicates: ``Allocate`` when the node's idle resources
  hold it, ``Pipeline`` when only its future idle (idle plus what terminating pods release)
  does; a ready job (allocated ≥ minAvailable) is committed, any other discarded, the
  allocations undone in reverse (each task Pending again, deallocateFunc fired).
- ``pkg/scheduler/cache/cache.go`` DefaultBinder: a Binding whose annotations are the pod's
  as the session's snapshot had them.
- The plugin's client is a plain ``http.Client{Timeout}``: no TLS or header settings. An
  ``https://user:token@host/...`` urlPrefix is how it authenticates: Go's client sends the
  userinfo as HTTP Basic (``send`` in src/net/http/client.go) and verifies the server
  against the system roots, which ``SSL_CERT_DIR`` extends (src/crypto/x509/root_unix.go);
  ``ca_file`` stands for the CA made trusted that way.

It schedules the pods whose ``spec.schedulerName`` is ``volcano``. Jobs come from the pods:
Volcano's PodGroup annotation ``scheduling.k8s.io/group-name``, else
the gang label, else one job per pod; minAvailable from the PodGroup's ``minMember``, or the
gang size.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.annotations import GANG_LABEL, GANG_SIZE_ANNOTATION
from contract.groups import VOLCANO, podgroups
from contract.objects import PLACED_RESOURCES, Obj
from infra.kube.port import KubeError
from simulation.cluster import SimulatedCluster
from simulation.kube_scheduler import UNRESOLVABLE as UNRESOLVABLE_STATUS
from simulation.kube_scheduler import (
    Connections,
    ExtenderError,
    interested,
    neighbours_of,
    node_rules,
    pending_pods,
    reply,
    requests_of,
)


def go_post(url: str, body: Any, timeout: float, ca_file: Path | None) -> Any:
    """A POST as Go's net/http client makes it for an https URL: the server verified
    (against ``ca_file``), the URL's userinfo sent as HTTP Basic; ExtenderError on a
    non-200, a failed handshake, no JSON."""
    parts = urllib.parse.urlsplit(url)
    verb = parts.path.rsplit("/", 1)[-1]
    headers = {"Content-Type": "application/json"}
    if parts.username is not None:
        userinfo = f"{urllib.parse.unquote(parts.username)}:"
        userinfo += urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(userinfo.encode()).decode()
    context = ssl.create_default_context(cafile=ca_file)
    host = parts.hostname or ""
    connection = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=context)
    try:
        connection.request("POST", parts.path, body=json.dumps(body).encode(), headers=headers)
        answer = connection.getresponse()
        status, data = answer.status, answer.read()
    except (http.client.HTTPException, OSError) as failed:
        raise ExtenderError(f"{verb}: {failed}") from None
    finally:
        connection.close()
    return reply(verb, status, data)


PENDING, ALLOCATED, PIPELINED = 1, 2, 4  # TaskStatus
SUCCESS, UNRESOLVABLE = 0, 3
PERMIT, REJECT = 1, -1
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
SCHEDULER_NAME = "volcano"


@dataclass(frozen=True, slots=True)
class VolcanoConfig:
    """The extender plugin's arguments (``extender.*``)."""

    url_prefix: str
    http_timeout: float = 1.0
    ignorable: bool = False
    managed_resources: tuple[str, ...] = PLACED_RESOURCES
    ca_file: Path | None = None  # the CA of an https urlPrefix's server (else system roots)
    # onSessionOpenVerb / onSessionCloseVerb set: the shipped entry names neither (a failed
    # onSessionOpen would leave the session without the extender's predicate).
    session_verbs: bool = False


@dataclass
class Job:
    key: str
    min_available: int
    tasks: list[Obj] = field(default_factory=list)  # pending pods, as the snapshot has them
    running: int = 0
    inqueue: bool = False


@dataclass
class SessionReport:
    bound: int = 0
    extender_used: bool = True
    discarded: list[str] = field(default_factory=list)  # jobs whose statement was discarded


class VolcanoScheduler:
    def __init__(self, cluster: SimulatedCluster, config: VolcanoConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or VolcanoConfig(f"{cluster.url}/volcano")
        self.reasons: dict[str, dict[str, str]] = {}  # task → node → why not
        self.unresolvable: dict[str, set[str]] = {}  # task → nodes preempt would skip
        self._inqueue: set[str] = set()
        # node → labels of the pods on it or allocated there this session (anti-affinity)
        self._neighbours: dict[str, list[Mapping[str, str]]] = {}
        self._connections = Connections()

    def close(self) -> None:
        self._connections.close()

    def pending(self) -> list[Obj]:
        return pending_pods(self.cluster, SCHEDULER_NAME)

    def _post(self, verb: str, body: Any) -> Any:
        url = f"{self.config.url_prefix}/{verb}"
        if url.startswith("https://"):
            return go_post(url, body, self.config.http_timeout, self.config.ca_file)
        return self._connections.post(url, body, self.config.http_timeout)

    def _interested(self, pod: Obj) -> bool:
        return interested(pod, self.config.managed_resources)

    # ---- the snapshot -------------------------------------------------------------------

    def _snapshot(self) -> tuple[list[Obj], list[Obj], dict[str, Job]]:
        nodes = sorted(self.cluster.store.list_nodes(), key=lambda n: n["metadata"]["name"])
        pods, _ = self.cluster.store.list_pods(None)
        pods = copy.deepcopy(pods)  # the session works on its own copy
        jobs: dict[str, Job] = {}
        for pod in pods:
            if pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            if (pod.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME:
                continue  # another scheduler's
            meta = pod["metadata"]
            notes, labels = meta.get("annotations") or {}, meta.get("labels") or {}
            group = notes.get(GROUP_ANNOTATION) or labels.get(GANG_LABEL) or meta["name"]
            key = f"{meta['namespace']}/{group}"
            size = int(notes.get(GANG_SIZE_ANNOTATION, "1")) if labels.get(GANG_LABEL) else 1
            if GROUP_ANNOTATION in notes:
                try:  # the job's PodGroup (the cache skips a task whose PodGroup is missing)
                    podgroup = self.cluster.store.get(podgroups(VOLCANO), meta["namespace"], group)
                except KubeError:
                    continue
                size = int((podgroup.get("spec") or {}).get("minMember") or 1)
            job = jobs.setdefault(key, Job(key, size))
            if (pod.get("spec") or {}).get("nodeName"):
                job.running += 1
            else:
                job.tasks.append(pod)
        return nodes, pods, jobs

    @staticmethod
    def _task(pod: Obj, job: str, node: str = "", status: int = PENDING) -> dict[str, Any]:
        meta = pod["metadata"]
        scalars = {r: n * 1000 for r, n in requests_of(pod).items() if "/" in r}
        return {
            "UID": meta["uid"],
            "Job": job,
            "Name": meta["name"],
            "Namespace": meta["namespace"],
            "Resreq": {"MilliCPU": 0, "Memory": 0, "ScalarResources": scalars},
            "NodeName": node,
            "Status": status,
            "Pod": pod,
        }

    def _session_body(self, nodes: list[Obj], jobs: dict[str, Job]) -> dict[str, Any]:
        body_jobs = {}
        for job in jobs.values():
            total: dict[str, float] = {}
            for pod in job.tasks:
                for resource, count in requests_of(pod).items():
                    if "/" in resource:
                        total[resource] = total.get(resource, 0) + count * 1000
            body_jobs[job.key] = {
                "UID": job.key,
                "MinAvailable": job.min_available,
                "Tasks": {t["metadata"]["uid"]: self._task(t, job.key) for t in job.tasks},
                "TotalRequest": {"MilliCPU": 0, "Memory": 0, "ScalarResources": total},
                "PodGroup": {"spec": {"minMember": job.min_available}},
            }
        body_nodes = {
            n["metadata"]["name"]: {"Name": n["metadata"]["name"], "Node": n} for n in nodes
        }
        return {"Jobs": body_jobs, "Nodes": body_nodes, "Queues": {}, "NamespaceInfo": {}}

    # ---- resources ------------------------------------------------------------------------

    def _idle(
        self, nodes: list[Obj], pods: list[Obj]
    ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """Each node's idle and releasing extended resources."""
        idle: dict[str, dict[str, int]] = {}
        releasing: dict[str, dict[str, int]] = {}
        for node in nodes:
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            idle[node["metadata"]["name"]] = {
                r: int(v) for r, v in allocatable.items() if "/" in r and str(v).isdigit()
            }
        for pod in pods:
            where = (pod.get("spec") or {}).get("nodeName")
            if (
                not where
                or where not in idle
                or pod["status"].get("phase") in ("Succeeded", "Failed")
            ):
                continue
            for resource, count in requests_of(pod).items():
                idle[where][resource] = idle[where].get(resource, 0) - count
                if pod["metadata"].get("deletionTimestamp"):
                    releasing.setdefault(where, {})[resource] = (
                        releasing.setdefault(where, {}).get(resource, 0) + count
                    )
        return idle, releasing

    # ---- one session ----------------------------------------------------------------------

    def session(self) -> SessionReport:
        """OpenSession, enqueue, allocate, CloseSession."""
        report = SessionReport()
        nodes, pods, jobs = self._snapshot()
        if self.config.session_verbs:
            try:
                self._post("onSessionOpen", self._session_body(nodes, jobs))
            except ExtenderError:
                report.extender_used = self.config.ignorable  # not ignorable: no callbacks
        self._enqueue(jobs, report)
        idle, releasing = self._idle(nodes, pods)
        self._neighbours = neighbours_of(pods)
        for job in jobs.values():
            if job.key in self._inqueue and job.tasks:
                self._allocate(job, nodes, idle, releasing, report)
        if report.extender_used and self.config.session_verbs:
            self._post("onSessionClose", {})
        return report

    def _enqueue(self, jobs: dict[str, Job], report: SessionReport) -> None:
        for job in jobs.values():
            if job.key in self._inqueue or not job.tasks:
                continue
            if report.extender_used and any(self._interested(t) for t in job.tasks):
                body = self._session_body([], {job.key: job})["Jobs"][job.key]
                if self._post("jobEnqueueable", {"job": body})["status"] == REJECT:
                    continue
            self._inqueue.add(job.key)

    def _feasible(  # noqa: PLR0917 (the session's state, as Volcano's allocate passes it)
        self,
        pod: Obj,
        job: Job,
        nodes: list[Obj],
        idle: dict[str, dict[str, int]],
        releasing: dict[str, dict[str, int]],
        use: bool,
    ) -> tuple[list[str], dict[str, str], set[str]]:
        """The nodes that pass the task's predicates, why each other does not, and those
        preempt would skip: Volcano's predicates plugin (node selector, anti-affinity) first,
        then the resources, then the extender's predicate."""
        asked = {r: n for r, n in requests_of(pod).items() if "/" in r}
        fits: list[str] = []
        why: dict[str, str] = {}
        never: set[str] = set()
        admitted, ruled_out = node_rules(pod, nodes, self._neighbours)
        for name, (code, reason) in ruled_out.items():
            why[name] = reason
            if code == UNRESOLVABLE_STATUS:
                never.add(name)
        for node in admitted:
            name = node["metadata"]["name"]
            future = {r: idle[name].get(r, 0) + releasing.get(name, {}).get(r, 0) for r in asked}
            if any(future[r] < n for r, n in asked.items()):
                why[name] = f"Insufficient {next(iter(asked))}"
                continue
            if use:
                answer = self._post(
                    "predicate",
                    {"task": self._task(pod, job.key), "node": {"Name": name, "Node": node}},
                )
                if answer["code"] != SUCCESS or answer["status"]:
                    why[name] = answer["status"]
                    if answer["code"] == UNRESOLVABLE:
                        never.add(name)
                    continue
            fits.append(name)
        return fits, why, never

    def _allocate(
        self,
        job: Job,
        nodes: list[Obj],
        idle: dict[str, dict[str, int]],
        releasing: dict[str, dict[str, int]],
        report: SessionReport,
    ) -> None:
        neighbours = self._neighbours
        statement: list[tuple[Obj, str, int]] = []  # task, node, Allocated or Pipelined
        for pod in job.tasks:
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            asked = {r: n for r, n in requests_of(pod).items() if "/" in r}
            use = report.extender_used and self._interested(pod)
            fits, why, never = self._feasible(pod, job, nodes, idle, releasing, use)
            if not fits:
                self.reasons[key], self.unresolvable[key] = why, never
                continue
            scores = dict.fromkeys(fits, 0.0)
            if use:
                tasks = self._task(pod, job.key)
                answer = self._post(
                    "prioritize", {"task": tasks, "nodes": [{"Name": n} for n in fits]}
                )
                for name, score in (answer.get("nodeScore") or {}).items():
                    if name in scores:
                        scores[name] += float(score)
            best = max(fits, key=lambda n: scores[n])  # ties: the first in node order
            allocated = all(idle[best].get(r, 0) >= n for r, n in asked.items())
            status = ALLOCATED if allocated else PIPELINED
            for resource, count in asked.items():
                idle[best][resource] = idle[best].get(resource, 0) - count
            if use:
                answer = self._post(
                    "allocateFunc", {"task": self._task(pod, job.key, best, status)}
                )
                if answer.get("errorMessage"):
                    self.reasons[key] = {best: answer["errorMessage"]}
            statement.append((pod, best, status))
            neighbours.setdefault(best, []).append(pod["metadata"].get("labels") or {})
        ready = job.running + sum(1 for _, _, s in statement if s == ALLOCATED) >= job.min_available
        if ready:
            for pod, where, status in statement:
                if status == ALLOCATED and self._bind(pod, where):
                    report.bound += 1
            return
        report.discarded.append(job.key)
        for pod, where, _ in reversed(statement):  # Discard: each task Pending again
            neighbours[where].remove(pod["metadata"].get("labels") or {})
            for resource, count in requests_of(pod).items():
                if "/" in resource:
                    idle[where][resource] = idle[where].get(resource, 0) + count
            if report.extender_used and self._interested(pod):
                self._post("deallocateFunc", {"task": self._task(pod, job.key, where, PENDING)})
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            self.reasons.setdefault(key, {where: f"job {job.key} not ready: statement discarded"})

    def _bind(self, pod: Obj, node: str) -> bool:
        """The DefaultBinder: a Binding with the snapshot's annotations."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            self.cluster.store.bind_pod(
                meta["namespace"],
                meta["name"],
                meta["uid"],
                node,
                dict(meta.get("annotations") or {}),
            )
        except Exception as failed:
            self.reasons[key] = {node: str(failed)}
            return False
        self.reasons.pop(key, None)
        self.unresolvable.pop(key, None)
        return True
