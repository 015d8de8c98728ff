"""The scheduler service's HA as shipped, on the real control plane: its Deployment's two
replicas run as pods (``testbed/pod_runner.py``), kube-scheduler reaches them through the
Service (``testbed/proxy.py`` following the EndpointSlices of kube-controller-manager), and a
stream of NPU pods is scheduled throughout.

- Each replica is evicted in turn through the eviction API (``policy/v1``, as ``kubectl drain``
  evicts): allowed by the PodDisruptionBudget, the leader too, and the other replica takes the
  leader label. With only the leader Ready and ``minAvailable: 1`` (the design before this
  one), the leader's eviction was refused for ever and a drain of its node never ended.
- A rolling update (a pod template annotation, as ``kubectl rollout restart``) completes.
- Throughout, every NPU pod is bound and runs, each container sees the extender's chips, and
  no chip is held by two running pods at once.

The stand-ins' own rules (endpoint choice, probe thresholds, the container's command) are
checked at the end, without a cluster.
"""

from __future__ import annotations

import datetime
import json
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from contract.annotations import CHIPS_ANNOTATION, REAL_ANNOTATION
from infra.kube.client import KubernetesGateway
from infra.kube.port import Selection
from infra.kube.reflector import Change, Reflector
from scheduler_core.certs import (
    CLIENT_NAME,
    VALIDITY,
    SecretNames,
    issue,
    secrets_of,
    service_hosts,
)
from scheduler_core.service.election import LEADER_LABEL
from simulation.processes import Part
from testbed.cluster import (
    KUBE_SCHEDULER_ACCOUNT,
    NAMESPACE,
    ExtenderTls,
    apply,
    extender_configuration,
    node_host,
    npu_pod,
)
from testbed.control_plane import ControlPlane, Process, running, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.pod_runner import (
    PROJECT_IMAGE,
    WATCH_WINDOW,
    PodRunner,
    Probe,
    ProbeState,
    command_line,
    image_name,
    reach,
)
from testbed.proxy import ServiceProxy, endpoints, usable
from testbed.rest import Obj, RestError

NAME = "ascend-npu-scheduler"  # the Deployment, its Service, its PDB and its Lease
SELECTOR = f"app.kubernetes.io/name={NAME}"
NODES = 3
STARTUP = 90.0  # a replica's start on a loaded machine: imports, the first read, a probe
SETTLE = 60.0  # a leader's handover, a replacement Ready, a pod bound: with room to spare
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
DEFAULT_SCHEDULER: Obj = {  # the cluster's own scheduler, which places the replicas' pods
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": False},
}


@dataclass
class Ha:
    plane: ControlPlane
    nodes: Part
    runner: PodRunner
    proxy: ServiceProxy
    scheduler: Process  # the NPU pods' scheduler: kube-scheduler, or Volcano's


# How the NPU pods' scheduler starts: given the control plane, the Service's URL (through the
# proxy, HTTPS) and the certs Job's files.
Schedulers = Callable[[ControlPlane, str, ExtenderTls], AbstractContextManager[Process]]


@contextmanager
def shipped_kube_scheduler(plane: ControlPlane, url: str, tls: ExtenderTls) -> Iterator[Process]:
    process = plane.start_scheduler(
        extender_configuration(url, tls=tls),
        kubeconfig=plane.service_account(NAMESPACE, KUBE_SCHEDULER_ACCOUNT),
    )
    try:
        yield process
    finally:
        process.stop()
        del plane.processes[process.name]


@contextmanager
def deployed_as_pods(
    plane: ControlPlane,
    workdir: Path,
    overlay: str = "kube-scheduler",
    schedulers: Schedulers = shipped_kube_scheduler,
) -> Iterator[Ha]:
    """The overlay applied as shipped; the scheduler service's Deployment run by the pod
    runner on simulated nodes, placed by the cluster's default scheduler; the NPU pods'
    scheduler (``schedulers``: kube-scheduler as shipped) calling the Service (through the
    proxy)."""
    apply(plane, kustomize(MANIFESTS / "overlays" / overlay))
    # The certs Job's Secrets, made as it makes them (its pod is not run here), the serving
    # certificate also for the proxy's address, where the scheduler reaches the Service.
    hosts = [*service_hosts(NAME, NAMESPACE), "127.0.0.1"]
    made = issue(hosts, CLIENT_NAME, datetime.datetime.now(datetime.UTC), VALIDITY)
    for secret in secrets_of(made, NAMESPACE, SecretNames()):
        apply(plane, [secret])
    tls = ExtenderTls.write(workdir / "extender-tls", made)
    nodes = node_host(plane, workdir / "nodes", NODES, "--run-elsewhere", SELECTOR)
    runner = PodRunner(plane, SELECTOR, workdir / "pods")
    proxy = ServiceProxy(KubernetesGateway.from_environment(plane.admin), NAMESPACE, NAME, "http")
    default: Process | None = None
    try:
        runner.start()
        proxy.start()
        default = plane.start_scheduler(DEFAULT_SCHEDULER, name="default-scheduler")
        with schedulers(plane, proxy.url.replace("http://", "https://"), tls) as scheduler:
            yield Ha(plane, nodes, runner, proxy, scheduler)
    finally:
        if default is not None:
            default.stop()
            del plane.processes[default.name]
        proxy.stop()
        runner.stop()
        nodes.stop()


@pytest.fixture(scope="module")
def ha() -> Iterator[Ha]:
    with running("ha") as plane, deployed_as_pods(plane, plane.workdir) as cluster:
        yield cluster


# ---- the replicas -------------------------------------------------------------------------


def replicas(ha: Ha) -> list[Obj]:
    """The Deployment's pods that are not being deleted."""
    listed = ha.plane.rest().get(PODS, labelSelector=SELECTOR)["items"]
    return [p for p in listed if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: Obj) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def labelled(pods: list[Obj]) -> list[str]:
    """The pods that carry the leader label."""
    key, value = LEADER_LABEL
    return [
        p["metadata"]["name"] for p in pods if p["metadata"].get("labels", {}).get(key) == value
    ]


def holder(ha: Ha) -> str:
    """The pod of the Lease's holder (its identity is ``<host name>_<uuid>``, and a pod's
    host name is its name)."""
    try:
        lease = ha.plane.rest().get(f"{LEASES}/{NAME}")
    except RestError as missing:
        if missing.status != 404:
            raise
        return ""  # not made yet
    return str(lease["spec"].get("holderIdentity") or "").split("_")[0]


def two_running(ha: Ha) -> tuple[str, list[Obj]] | None:
    """The Lease's holder and the two replicas, when both run and it is one of them."""
    pods = replicas(ha)
    lead = holder(ha)
    running = all(p["status"].get("phase") == "Running" for p in pods)
    names = {p["metadata"]["name"] for p in pods}
    return (lead, pods) if len(pods) == 2 and running and lead in names else None


def one_leader(ha: Ha) -> str:
    """Once two replicas run and the Lease's holder is one of them: its name."""
    wait_until(lambda: two_running(ha) is not None, STARTUP, "two replicas, one holding the Lease")
    found = two_running(ha)
    assert found is not None
    return found[0]


def both_ready_and_labelled(ha: Ha) -> str:
    """Once both replicas are Ready, the Lease's holder alone carries the label, the Service's
    endpoints name it alone, and the PodDisruptionBudget allows one disruption: the leader."""
    found: dict[str, str] = {}

    def settled() -> bool:
        now = two_running(ha)
        if now is None:
            return False
        lead, pods = now
        budget = ha.plane.rest().get(
            f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{NAME}"
        )
        status = budget.get("status") or {}
        ready_ips = {e.address for e in ha.proxy.endpoints() if e.ready}
        leader_ip = next(p["status"].get("podIP") for p in pods if p["metadata"]["name"] == lead)
        found["leader"] = lead
        return (
            all(is_ready(p) for p in pods)
            and labelled(pods) == [lead]
            and ready_ips == {leader_ip}
            and status.get("observedGeneration") == budget["metadata"]["generation"]
            and status.get("currentHealthy") == 2
            and status.get("disruptionsAllowed") == 1
        )

    wait_until(settled, STARTUP, "both replicas Ready, the leader alone labelled and routed to")
    return found["leader"]


def evict(ha: Ha, pod: str) -> int:
    """The eviction API's answer for ``pod`` (200: evicted; 429: refused by the budget)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": NAMESPACE},
    }
    return ha.plane.rest().status("POST", f"{PODS}/{pod}/eviction", body)


def drain_evict(ha: Ha, pod: str, within: float) -> None:
    """Evict as ``kubectl drain`` does: asked again while the budget refuses (429), until
    ``within`` seconds have passed."""

    def evicted() -> bool:
        answer = evict(ha, pod)
        assert answer in (200, 429), f"eviction of {pod}: HTTP {answer}"
        return answer == 200

    wait_until(evicted, within, f"{pod}'s eviction allowed (a drain of its node ends)")


def taken_over(ha: Ha, gone: str) -> str:
    """Once another replica holds the Lease and the label and the Service routes to it alone
    (the evicted one gone): its name."""
    found: dict[str, str] = {}

    def moved() -> bool:
        pods = replicas(ha)
        lead = holder(ha)
        ips = {p["status"].get("podIP") for p in pods if p["metadata"]["name"] == lead}
        found["leader"] = lead
        return (
            lead not in ("", gone)
            and labelled(pods) == [lead]
            and {e.address for e in ha.proxy.endpoints() if e.ready} == ips
        )

    wait_until(moved, SETTLE, f"another replica leads once {gone} is evicted")
    return found["leader"]


# ---- the NPU pods scheduled throughout ----------------------------------------------------


@dataclass
class Stream:
    """NPU pods made one every ``every`` seconds in ``namespace``, each deleted once it runs
    (so chips are reused), followed by a watch in the order of the API server's writes:
    a chip is held from its pod's Running to its pod's deletion."""

    ha: Ha
    namespace: str
    every: float = 0.5
    chips: int = 2
    scheduler: str | None = None  # the pods' schedulerName (None: the overlay's profile)
    made: list[str] = field(default_factory=list)
    ran: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)  # AscendReal
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    twice: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)  # containers not seeing their chips
    # The chips a pod runs on are its AscendReal (the agent's record, what the scheduler
    # counts: contract/pods.py); each must be the extender's choice.
    swapped: list[str] = field(default_factory=list)  # AscendReal not the extender's choice

    def __post_init__(self) -> None:
        self._rest = self.ha.plane.rest()
        self._rest.ensure_namespace(self.namespace)
        self._stop = threading.Event()
        self._ended: queue.Queue[str | None] = queue.Queue()
        self._watch = Reflector(
            KubernetesGateway.from_environment(self.ha.plane.admin),
            Selection("Pod", self.namespace),
            lambda pod: pod,
            on_change=self._changed,
            name=f"stream {self.namespace}",
            window=WATCH_WINDOW,
        )
        self._threads = [
            threading.Thread(target=self._make, daemon=True),
            threading.Thread(target=self._end, daemon=True),
        ]

    def _changed(self, changes: list[Change[Obj]]) -> None:
        for change in changes:
            if change.new is None:
                for place, owner in list(self.held.items()):
                    if owner == change.key:
                        del self.held[place]
                continue
            pod = change.new
            phase = pod["status"].get("phase")
            if phase == "Failed":
                self.failed.append(f"{change.key}: {pod['status'].get('message')}")
            if phase != "Running" or change.key in self.ran:
                continue
            node = pod["spec"]["nodeName"]
            annotations = pod["metadata"]["annotations"]
            chosen = chip_ids(annotations[CHIPS_ANNOTATION])
            chips = chip_ids(annotations.get(REAL_ANNOTATION) or annotations[CHIPS_ANNOTATION])
            if chips != chosen:
                self.swapped.append(f"{change.key} runs on {set(chips)}, not {set(chosen)}")
            self.ran[change.key] = (node, chips)
            for chip in chips:
                owner = self.held.setdefault((node, chip), change.key)
                if owner != change.key:
                    self.twice.append(f"chip {chip} of {node}: {owner} and {change.key}")
            self._ended.put(change.key)

    def _make(self) -> None:
        while not self._stop.wait(self.every):  # the stream's pace, not a wait
            name = f"p{len(self.made):04d}"
            pod = npu_pod(self.chips, {"stream": self.namespace})
            pod["metadata"]["name"] = name
            if self.scheduler is not None:
                pod["spec"]["schedulerName"] = self.scheduler
            self._rest.create(f"/api/v1/namespaces/{self.namespace}/pods", pod)
            self.made.append(f"{self.namespace}/{name}")

    def _end(self) -> None:
        """Each pod that runs: what its container sees (the agent's Allocate answer, through
        the kubelet), then its deletion."""
        while (key := self._ended.get()) is not None:
            seen: dict[str, str] = json.loads(self.ha.nodes.ask("visible"))
            chips = {int(c) for c in seen.get(key, "").split(",") if c}
            if chips != self.ran[key][1]:
                self.unseen.append(f"{key} sees {chips}, not {set(self.ran[key][1])}")
            namespace, name = key.split("/")
            try:
                self._rest.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
            except RestError as gone:
                if gone.status != 404:
                    raise

    def __enter__(self) -> Stream:
        self._watch.start()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._threads[0].join()
        try:
            if exc[0] is None:
                wait_until(
                    lambda: set(self.made) <= set(self.ran) or bool(self.failed),
                    SETTLE,
                    "every NPU pod of the stream bound and running",
                )
        finally:
            self._ended.put(None)
            self._threads[1].join()
            self._watch.stop()

    def check(self) -> None:
        """Every pod ran, on the chips its container sees, and no chip was held twice."""
        assert not self.failed, "the kubelet refused pods (Allocate failed)"
        assert not self.twice, "a chip was held by two running pods at once"
        assert not self.unseen, "each container sees the chips its pod records"
        assert not self.swapped, "each container runs on the extender's chips"
        assert self.made and set(self.made) == set(self.ran)


def chip_ids(names: str) -> frozenset[int]:
    """``Ascend910-0,Ascend910-1`` as ``{0, 1}``."""
    return frozenset(int(chip.rsplit("-", 1)[1]) for chip in names.split(","))


# ---- the tests ----------------------------------------------------------------------------


def test_each_replica_is_evicted_in_turn_and_the_other_takes_over(ha: Ha) -> None:
    with Stream(ha, "evictions") as stream:
        first = one_leader(ha)
        # As a drain of the leader's node evicts it: allowed once both replicas are Ready.
        # (Only the leader Ready and minAvailable: 1 refused it for ever.)
        drain_evict(ha, first, STARTUP)
        second = taken_over(ha, first)
        # The other one, now leading, once its replacement is Ready: allowed at the first ask.
        assert both_ready_and_labelled(ha) == second
        assert evict(ha, second) == 200, "allowed: the budget allows one disruption"
        third = taken_over(ha, second)
        assert third not in (first, second)
    stream.check()


def test_a_rolling_update_completes_while_pods_are_scheduled(ha: Ha) -> None:
    with Stream(ha, "rollout") as stream:
        both_ready_and_labelled(ha)
        old = {p["metadata"]["name"] for p in replicas(ha)}
        now = datetime.datetime.now(datetime.UTC).isoformat()
        restart = {"kubectl.kubernetes.io/restartedAt": now}  # as kubectl rollout restart
        ha.plane.rest().patch(
            f"{DEPLOYMENTS}/{NAME}", {"spec": {"template": {"metadata": {"annotations": restart}}}}
        )

        def rolled() -> bool:
            deployment = ha.plane.rest().get(f"{DEPLOYMENTS}/{NAME}")
            status = deployment["status"]
            pods = {p["metadata"]["name"] for p in replicas(ha)}
            return (
                status.get("observedGeneration") == deployment["metadata"]["generation"]
                and status.get("replicas") == status.get("updatedReplicas") == 2
                and status.get("availableReplicas") == status.get("readyReplicas") == 2
                and not status.get("unavailableReplicas")
                and not pods & old
            )

        wait_until(rolled, 2 * STARTUP, "the rollout complete: two new replicas available")
        lead = both_ready_and_labelled(ha)
        assert lead not in old
    stream.check()


# ---- the stand-ins' own rules -------------------------------------------------------------


def test_the_proxy_uses_ready_endpoints_else_serving_terminating_ones() -> None:
    def endpoint(ip: str, ready: bool, terminating: bool = False) -> Obj:
        conditions = {"ready": ready, "serving": True, "terminating": terminating}
        return {"addresses": [ip], "conditions": conditions}

    ports = [{"name": "http", "port": 8888}, {"name": "metrics", "port": 9395}]
    both = [
        {"ports": ports, "endpoints": [endpoint("10.244.0.1", True), endpoint("10.244.0.2", False)]}
    ]
    assert [e.address for e in usable(endpoints(both, "http"))] == ["10.244.0.1"]
    going = [{"ports": ports, "endpoints": [endpoint("10.244.0.1", False, terminating=True)]}]
    assert [(e.address, e.port) for e in usable(endpoints(going, "http"))] == [("10.244.0.1", 8888)]
    assert usable(endpoints([{"ports": ports, "endpoints": []}], "http")) == []


def test_a_probe_result_changes_only_after_its_threshold() -> None:
    probe = Probe("/readyz", 9395, delay=0, period=2, timeout=1, successes=1, failures=3)
    readiness = ProbeState(probe, result=True, due=0)
    assert [readiness.observe(False, now) for now in (0, 2, 4)] == [False, False, True]
    assert not readiness.result and readiness.due == 6
    assert readiness.observe(True, 6), "one success is enough"


def test_a_container_runs_here_with_its_mounts_mapped_and_its_credentials() -> None:
    container = {
        "command": ["python", "-m", "scheduler_core"],
        "args": ["serve", "--config=/etc/a/s.yaml"],
    }
    command = command_line(container, {"/etc/a": Path("/tmp/pod/volumes/config")}, Path("/tmp/k"))
    assert command[1:] == [
        "-m",
        "scheduler_core",
        "serve",
        "--config=/tmp/pod/volumes/config/s.yaml",
        "--kube=kubeconfig",
        "--kubeconfig=/tmp/k",
    ]
    assert reach("10.244.0.7") == "127.244.0.7"
    assert image_name("registry.example:5000/team/ascend-npu-k8s:0.1.0@sha256:ab") == PROJECT_IMAGE
