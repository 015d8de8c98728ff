"""A seeded robustness run over the whole simulated cluster, its invariants checked all along.

The simulated cluster (real agents, kubelet simulators over real sockets, the loopback API
server; 910 servers and 310P nodes serving dynamic vNPUs), two scheduler replicas as
processes of their own electing a leader on a Lease (the stand-in kube-scheduler calls
whichever is ready, as a Service routes to ready pods), and the workload of
``simulation.workload`` (910 pods and gangs, plain, under one ToR or in one SuperPoD, vNPU
and inference pods, jobs that end, fail, and retry through ``fault-retry-times``), while
faults drawn from the seed strike at random moments, several at once:

- ``api-down``: the API server unreachable for a while (every call fails, watches cut);
- ``watches-cut``: every open watch stream broken;
- ``compact``: the history compacted (a watch resuming from before it gets 410);
- ``lost-bind``: the next Bindings stored but answered with an error;
- ``replica-kill``: the leading replica SIGKILLed, started again later;
- ``replica-pause``: the leading replica SIGSTOPped past its lease, then resumed;
- ``agent-restart``: a node's agent stopped and started again (its kubelet stays);
- ``kubelet-restart``: a node's kubelet restarted (sockets wiped, plugins re-register);
- ``chip-fail``: a chip of a node failing, recovering later;
- ``hostile``: a tenant's pod with malformed NPU annotations;
- ``agent-down``: a node's agent stopped for a while (its DeviceInfo goes stale, Allocate
  fails), then started again;
- ``noded-unhealthy``: a node's NodeD reports it UnHealthy for a while (its
  ``mindx-dl-nodeinfo-<node>``; the replicas read NodeD, ``--noded``), then Healthy again.

Invariants, each a typed check with its evidence (``Violation``), after every step: no chip in
two live containers; every bound NPU pod carries the scheduler's chips; every container's
devices are the chips its pod records (``AscendReal``); no AI core of a 310P chip given twice,
each vNPU on the chip chosen; a switch-affinity gang under one ToR, a SuperPoD gang in one
SuperPoD; no gang partly running past its TTL. After the last fault, every
pod runs or carries a reason within a bound, and a fault-retry-times job whose pod failed is
restarted (or given up) within it. After the run no job arrives for at most ``DRAIN``
seconds, until a job of every kind submitted has run: a kind never placed is a violation
naming what the scheduler answered its pods (a run whose training jobs no server served
once passed with its vNPU pods alone). At the end, every DeviceInfo published says what the
node's kubelet can still give, and each replica's view equals a fresh read of the cluster
(its ``/debug/compare``).

A failure prints the seed and the fault schedule; ``Schedule.load`` runs it again.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from contract import nodeinfo
from contract.annotations import CHIPS_ANNOTATION, FAULT_RETRY_LABEL
from contract.chip_names import RESOURCE_NAME
from contract.groups import KUEUE_GROUP_LABEL, KUEUE_TOTAL_ANNOTATION
from contract.objects import Obj
from infra.kube.port import KubeError
from scheduler_core.service.routes import COMPARE_PERIOD
from simulation import invariants
from simulation.cluster import (
    VNPU_CHIPS,
    SimulatedCluster,
    simulated_cluster,
    tor_configmap,
    wait_for,
)
from simulation.fault_schedule import Fault, Schedule
from simulation.kube_scheduler import (
    Backoff,
    ExtenderConfig,
    ExtenderError,
    KubeScheduler,
    post_json,
)
from simulation.memory import pod_object
from simulation.processes import GANG_TTL, LEASE, Replica
from simulation.workload import NAMESPACE, Workload

STEP = 0.25  # seconds between the harness's steps
SETTLE = 10.0  # after the last fault: every pod runs or has a reason by then
# After the run, no job arrives: the jobs running end (25 s at most, ``simulation.workload``)
# and those waiting are placed; by then a job of every kind submitted has run.
DRAIN = 40.0
AI_CORES = 8  # of a simulated 310P chip
# What NodeD reports of a node it finds faulty (a CPU fault it separates the node for).
NODE_DOWN = nodeinfo.NodeInfo(
    nodeinfo.UNHEALTHY, (nodeinfo.DeviceFault("CPU", 0, ("00000011",), "SeparateFault"),)
)


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    evidence: str
    at: float


@dataclass(frozen=True, slots=True)
class Event:
    """A moment of the run's timeline (drawn by ``benchmarks/figures.py``)."""

    at: float  # seconds into the run
    what: str  # "fault", "ended" (a fault's end taken effect), "leader", "restart", "violation"
    detail: str  # the fault's kind; the new leader ("" for none); the invariant


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster once a second: pods placed so far, pods running, pods not bound."""

    at: float
    placed: int
    running: int
    waiting: int


@dataclass
class Report:
    schedule: Schedule
    placed: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    submitted: Counter[str] = field(default_factory=Counter)  # jobs submitted, by shape
    started: Counter[str] = field(default_factory=Counter)  # jobs that ran, by shape
    restarts: int = 0  # jobs the scheduler restarted (fault-retry-times, gangs stuck partly)
    retry_given_up: int = 0  # fault-retry-times jobs given up, out of restarts
    views_compared: int = 0  # replicas' views compared with a fresh read at the end
    violations: list[Violation] = field(default_factory=list)
    longest_wait_after_faults: float = 0.0
    api_requests_during: float = 0.0  # per second
    api_requests_after: float = 0.0
    rss_growth_mib: dict[str, float] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


class Run:
    def __init__(self, cluster: SimulatedCluster, schedule: Schedule, workdir: Path) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.rng = random.Random(schedule.seed + 1)
        self.replicas = [Replica(f"replica-{i}", cluster.api.url, workdir) for i in range(2)]
        self.config = ExtenderConfig("http://127.0.0.1:9", http_timeout=3.0)
        self.scheduler = KubeScheduler(
            cluster, self.config, backoff=Backoff(0.5, 2.0), seed=schedule.seed
        )
        self.report = Report(schedule)
        self.workload = Workload(
            cluster, self.rng, inference=schedule.inference_nodes > 0, network=schedule.network
        )
        self.waiting_since: dict[str, float] = {}
        self._restore: list[tuple[float, Fault]] = []
        self._down_agents: set[str] = set()
        self._leading: str | None = None  # the leader last seen, for the timeline
        self._restarts_seen = 0
        self._start = time.monotonic()

    # ---- the run ---------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self._start

    def execute(self) -> Report:
        for replica in self.replicas:
            replica.start()
        try:
            if not wait_for(lambda: any(r.ready() for r in self.replicas), timeout=60):
                raise RuntimeError("no scheduler replica became ready")
            self._start = time.monotonic()
            pending = list(self.schedule.faults)
            last_fault = self.schedule.faults[-1].at if self.schedule.faults else 0.0
            requests_at_faults_end: tuple[float, int] | None = None
            requests_start = self._requests()
            while (now := self.now()) < self.schedule.seconds + DRAIN:
                arriving = now < self.schedule.seconds
                if not arriving and not self.workload.never_started():
                    break
                while pending and pending[0].at <= now:
                    self._inject(pending.pop(0))
                self._restore_due(now)
                self.workload.step(now, submit=arriving)
                self._schedule()
                self._nodes()
                self._check(now, after_faults=now > last_fault + SETTLE)
                if requests_at_faults_end is None and now > last_fault:
                    requests_at_faults_end = (now, self._requests())
                for replica in self.replicas:
                    replica.tick()
                time.sleep(STEP)
            self._check_kinds()
            self._final(requests_start, requests_at_faults_end)
        finally:
            self.scheduler.close()
            for replica in self.replicas:
                replica.stop()
        return self.report

    # ---- the callers ---------------------------------------------------------------------

    def _schedule(self) -> None:
        leader = self._leader()  # the one the Service routes to: it carries the leader label
        name = leader.name if leader is not None else None
        if name != self._leading:
            self._leading = name
            self.report.events.append(Event(round(self.now(), 2), "leader", name or ""))
        if leader is None:
            return
        self.scheduler.extender.config = replace(self.config, url_prefix=leader.url)
        try:
            self.report.placed += self.scheduler.cycle()
        except Exception:  # the stand-in reading an unreachable store
            if self.cluster.store.reachable:
                raise

    def _nodes(self) -> None:
        if not self.cluster.store.reachable:
            return
        try:
            self.cluster.reap()
            self.cluster.admit()
            self.workload.follow(self.now())
        except Exception:
            if self.cluster.store.reachable:
                raise

    # ---- faults ----------------------------------------------------------------------------

    def _leader(self) -> Replica | None:
        return next((r for r in self.replicas if r.leads()), None)

    def _inject(self, fault: Fault) -> None:
        self.report.faults[fault.kind] += 1
        self.report.events.append(Event(round(self.now(), 2), "fault", fault.kind))
        store, nodes = self.cluster.store, list(self.cluster.nodes.values())
        node = nodes[fault.target % len(nodes)]
        if fault.kind == "api-down":
            store.reachable = False
        elif fault.kind == "watches-cut":
            self.cluster.api.drop_connections()
        elif fault.kind == "compact":
            store.compact()
        elif fault.kind == "lost-bind":
            store.lost_bind_answers += 1 + fault.target % 3
        elif fault.kind == "replica-kill":
            victim = self._leader() or self.replicas[fault.target % 2]
            victim.kill()
        elif fault.kind == "replica-pause":
            victim = self._leader() or self.replicas[fault.target % 2]
            victim.pause(LEASE + fault.lasts)
        elif fault.kind == "agent-restart":
            self.cluster.restart_node_agent(node.name)
        elif fault.kind == "kubelet-restart":
            node.kubelet.restart()
        elif fault.kind == "chip-fail":
            node.set_health(frozenset({fault.target % (VNPU_CHIPS if node.dynamic_vnpu else 8)}))
        elif fault.kind == "hostile":
            self._hostile(fault)
        elif fault.kind == "agent-down":
            node.agent.stop()
            self._down_agents.add(node.name)
        elif fault.kind == "noded-unhealthy":
            # The API server away (another fault): this write of NodeD's is lost.
            with contextlib.suppress(KubeError):
                self._noded(node.name, NODE_DOWN)
        self._restore.append((self.now() + fault.lasts, fault))

    def _noded(self, node: str, info: nodeinfo.NodeInfo) -> None:
        """NodeD's report of ``node`` written (Ascend/mind-cluster component/noded/pkg/reporter/
        cmreporter/configmap_reporter.go: created, then updated)."""
        body = {
            "metadata": {
                "name": nodeinfo.configmap_name(node),
                "namespace": nodeinfo.NAMESPACE,
                "labels": dict([nodeinfo.CONSUMER_LABEL]),
            },
            "data": nodeinfo.encode(info),
        }
        store = self.cluster.store
        try:
            store.get_configmap(nodeinfo.NAMESPACE, nodeinfo.configmap_name(node))
        except KubeError:
            store.create_configmap(body)
        else:
            store.update_configmap(body)

    def _hostile(self, fault: Fault) -> None:
        """A tenant's pod whose NPU annotations are garbage (it must be refused, named)."""
        pod = pod_object(NAMESPACE, f"hostile-{fault.at}".replace(".", "-"), None, 2)
        pod["metadata"]["annotations"].update(
            {
                CHIPS_ANNOTATION: "Ascend910-99,x",
                "predicate-time": "yesterday",
                KUEUE_TOTAL_ANNOTATION: "-3",
            }
        )
        pod["metadata"]["labels"][KUEUE_GROUP_LABEL] = "hostile"
        try:
            self.cluster.store.put("Pod", pod)
        except Exception:
            return

    def _restore_due(self, now: float) -> None:
        due = [f for at, f in self._restore if at <= now]
        self._restore = [(at, f) for at, f in self._restore if at > now]
        for fault in due:
            try:
                if self._end_fault(fault):
                    self.report.events.append(Event(round(self.now(), 2), "ended", fault.kind))
            except KubeError:  # the API server is away (another fault): end it later
                self._restore.append((now + 1, fault))

    def _end_fault(self, fault: Fault) -> bool:
        """Undo a fault that lasts; False for one that struck once (nothing to undo)."""
        nodes = list(self.cluster.nodes.values())
        node = nodes[fault.target % len(nodes)]
        if fault.kind == "api-down":
            self.cluster.store.reachable = True
        elif fault.kind == "replica-kill":
            for replica in self.replicas:
                if not replica.alive():
                    replica.start()
        elif fault.kind == "chip-fail":
            node.set_health(frozenset())
        elif fault.kind == "kubelet-restart":
            self.cluster.sync_node_status()
        elif fault.kind == "agent-down" and node.name in self._down_agents:
            self._down_agents.discard(node.name)
            self.cluster.restart_node_agent(node.name)
        elif fault.kind == "noded-unhealthy":
            self._noded(node.name, nodeinfo.NodeInfo(nodeinfo.HEALTHY))
        else:
            return False
        return True

    # ---- invariants ----------------------------------------------------------------------

    def _requests(self) -> int:
        return sum(self.cluster.api.traffic()[0].values())

    def _violate(self, invariant: str, evidence: str) -> None:
        self.report.violations.append(Violation(invariant, evidence, round(self.now(), 2)))
        self.report.events.append(Event(round(self.now(), 2), "violation", invariant))

    def _check(self, now: float, after_faults: bool) -> None:
        if not self.cluster.store.reachable:
            return
        self.report.checks += 1
        pods = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in self.cluster.store.list_pods(None)[0]
        }
        for invariant, evidence in [
            *invariants.containers(self.cluster.admitted, pods),
            *invariants.cores(self.cluster.admitted, pods, AI_CORES),
            *invariants.bindings(pods),
            *invariants.network(pods, self._gangs(), TOR_OF, SUPER_POD_OF),
        ]:
            self._violate(invariant, evidence)
        self._check_gangs(now)
        self._record(now, pods)
        if after_faults:
            self._check_waiting(now, pods)
            self._check_restarts(now)

    def _record(self, now: float, pods: dict[str, Obj]) -> None:
        """The timeline: jobs the scheduler restarted as they happen, the counts once a second."""
        restarted = self.workload.restarted
        if restarted > self._restarts_seen:
            self.report.events += [Event(round(now, 2), "restart", "")] * (
                restarted - self._restarts_seen
            )
            self._restarts_seen = restarted
        if self.report.samples and now - self.report.samples[-1].at < 1.0:
            return
        waiting = sum(not (p.get("spec") or {}).get("nodeName") for p in pods.values())
        self.report.samples.append(
            Sample(round(now, 2), self.report.placed, len(self.cluster.admitted), waiting)
        )

    def _gangs(self) -> dict[str, tuple[str, list[str]]]:
        return {
            job.key: (job.shape, [f"{NAMESPACE}/{p}" for p in job.pods])
            for job in self.workload.jobs.values()
            if job.size > 1
        }

    def _check_gangs(self, now: float) -> None:
        for job in self.workload.jobs.values():
            if job.size < 2:
                continue
            running = sum(f"{NAMESPACE}/{p}" in self.cluster.admitted for p in job.pods)
            if 0 < running < job.size:
                job.partial_since = job.partial_since or now
                if now - job.partial_since > GANG_TTL + SETTLE:
                    self._violate(
                        "no gang partly running past its TTL",
                        f"{job.key}: {running} of {job.size} running since "
                        f"{job.partial_since:.1f} s",
                    )
            else:
                job.partial_since = None

    def _check_restarts(self, now: float) -> None:
        """A fault-retry-times job whose pod failed is restarted by the scheduler (or given
        up, its record saying no restarts are left) within SETTLE."""
        for job in self.workload.jobs.values():
            if job.failed_since is not None and now - job.failed_since > SETTLE:
                self._violate(
                    "a job with restarts left restarts when its pod fails",
                    f"{job.key} ({FAULT_RETRY_LABEL} {job.retries}): a pod failed "
                    f"{now - job.failed_since:.1f} s ago, not restarted",
                )
                job.failed_since = now  # said once per SETTLE, not at every step

    def _check_kinds(self) -> None:
        """Every kind of job the workload submitted ran at least once (the drain after the
        run leaves each its chance): a kind never placed is a violation, with what the
        scheduler answered its pods."""
        for shape in self.workload.never_started():
            jobs = [j for j in self.workload.jobs.values() if j.shape == shape]
            why = ""
            for job in jobs:
                reasons = self.scheduler.reasons.get(f"{NAMESPACE}/{job.pods[0]}") or {}
                if reasons:
                    why = f"; {job.pods[0]} refused: " + "; ".join(
                        f"{node}: {reason}" for node, reason in sorted(reasons.items())[:3]
                    )
                    break
            self._violate(
                "every kind of job submitted is placed",
                f"{shape}: {self.workload.submitted[shape]} submitted from "
                f"{self.workload.first_submitted[shape]:.1f} s, none placed in "
                f"{self.now():.1f} s{why}",
            )

    def _check_waiting(self, now: float, pods: dict[str, Obj]) -> None:
        """After the faults: a pod not running has a reason (the caller's), within SETTLE."""
        for key, pod in pods.items():
            if (pod.get("spec") or {}).get("nodeName"):
                self.waiting_since.pop(key, None)
                continue
            since = self.waiting_since.setdefault(key, now)
            self.report.longest_wait_after_faults = max(
                self.report.longest_wait_after_faults, now - since
            )
            if now - since > SETTLE and not self.scheduler.reasons.get(key):
                self._violate("every pod runs or carries a reason", f"{key} waits, no reason")

    def _final(self, requests_start: int, after: tuple[float, int] | None) -> None:
        total = self._requests()
        now = self.now()
        if after is not None:
            # A run without faults has no time under them (its first step is not a second).
            self.report.api_requests_during = (after[1] - requests_start) / max(after[0], 1.0)
            self.report.api_requests_after = (total - after[1]) / max(now - after[0], 1e-9)
        if not wait_for(self.cluster.settled, timeout=30):
            self._violate(
                "every DeviceInfo says what its kubelet can still give",
                ", ".join(
                    f"{n}: published {self.cluster.published_free(n)}, kubelet "
                    f"{s.kubelet.free(RESOURCE_NAME)}"
                    for n, s in self.cluster.nodes.items()
                ),
            )
        self.report.submitted = self.workload.submitted
        self.report.started = self.workload.started
        self.report.restarts = self.workload.restarted
        self.report.retry_given_up = self.workload.given_up
        self._compare_views()
        for replica in self.replicas:
            if replica.first_rss is not None:
                self.report.rss_growth_mib[replica.name] = round(
                    replica.last_rss - replica.first_rss, 1
                )

    def _compare_views(self) -> None:
        """Each replica's view equals a fresh read of the cluster (its ``/debug/compare``
        answers nothing) within SETTLE."""
        for replica in self.replicas:
            if not replica.alive():
                continue
            seen: list[object] = []

            def agrees(replica: Replica = replica, seen: list[object] = seen) -> bool:
                try:
                    seen.append(post_json(f"{replica.url}/debug/compare", {}, 10))
                except ExtenderError as failed:
                    seen.append(str(failed))
                return seen[-1] == {}

            # A replica answers one compare per COMPARE_PERIOD (429 between): asked at that pace.
            patience = SETTLE + 2 * COMPARE_PERIOD
            if not wait_for(agrees, timeout=patience, step=COMPARE_PERIOD):
                self._violate(
                    "each replica's view equals a fresh read", f"{replica.name}: {seen[-1]}"
                )
            self.report.views_compared += 1


def _node(i: int) -> str:
    return f"node-{i:02d}"


PER_TOR, PER_SUPER_POD = 4, 3  # servers under a ToR; servers in a SuperPoD
TOR_OF = {_node(i): i // PER_TOR for i in range(100)}
SUPER_POD_OF = {_node(i): i // PER_SUPER_POD for i in range(100)}


@contextmanager
def robustness_run(schedule: Schedule, workdir: Path) -> Iterator[Run]:
    """The cluster of the schedule; with a network, ToRs of 4 servers (the imported ToR
    topology) and SuperPoDs of 3, which the two divide differently."""
    nodes = [_node(i) for i in range(schedule.nodes)]
    with simulated_cluster(
        schedule.nodes,
        serve=False,
        every_kubelet_random=True,
        vnpu_nodes=schedule.inference_nodes,
        super_pods={n: SUPER_POD_OF[n] for n in nodes} if schedule.network else None,
    ) as cluster:
        if schedule.network:
            cluster.store.put("ConfigMap", tor_configmap(schedule.nodes, PER_TOR))
        yield Run(cluster, schedule, workdir)


def run_schedule(schedule: Schedule, workdir: Path) -> Report:
    with robustness_run(schedule, workdir) as run:
        return run.execute()


def timeline(report: Report) -> str:
    """The run's schedule, timeline and counts as JSON (``--timeline``), for the figure."""
    return json.dumps(
        {
            "schedule": asdict(report.schedule),
            "summary": describe(report),
            "events": [asdict(e) for e in report.events],
            "samples": [asdict(s) for s in report.samples],
        },
        indent=None,
        separators=(",", ":"),
    )


def describe(report: Report) -> str:
    kinds = ", ".join(f"{k} {report.started[k]}/{n}" for k, n in sorted(report.submitted.items()))
    lines = [
        f"seed {report.schedule.seed}, {report.schedule.seconds:.0f} s, "
        f"{report.schedule.nodes} + {report.schedule.inference_nodes} nodes: "
        f"{report.placed} pods placed (jobs run of submitted: "
        f"{kinds}), "
        f"jobs the scheduler restarted {report.restarts} (fault-retry-times given up "
        f"{report.retry_given_up}), "
        f"{sum(report.faults.values())} faults "
        f"({', '.join(f'{k} {v}' for k, v in sorted(report.faults.items()))}), "
        f"{report.checks} invariant checks, {report.views_compared} replica views compared, "
        f"{len(report.violations)} violations; longest wait "
        f"after the faults {report.longest_wait_after_faults:.1f} s; API requests/s during "
        f"{report.api_requests_during:.0f}, after {report.api_requests_after:.0f}; replica RSS "
        f"growth {report.rss_growth_mib} MiB"
    ]
    lines += [f"  VIOLATION {v.invariant} at {v.at} s: {v.evidence}" for v in report.violations]
    return "\n".join(lines)
