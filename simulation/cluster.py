"""A whole simulated cluster in one process, for end-to-end tests and the demo.

The loopback API server; per node a fake driver, the agent as its own builder wires a node
(pod cache, annotation handshake, DeviceInfo publisher, repair loop and node label, through
the official kubernetes client) and a kubelet simulator over real gRPC unix sockets; the
scheduler service over HTTP (driven by ``kube_scheduler.KubeScheduler``). ``admit`` lets each
node's kubelet admit the pods bound to it. Beside the 910 servers, 310P and 910B nodes may
serve dynamic vNPUs (``huawei.com/npu-core``, created at Allocate through the fake driver).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.builder import AgentConfig, KubeSettings, NodeAgent, start_node_agent
from agent.pod_cache import PodCache
from chip_drivers.fake import FakeDriver, edit_fake_state
from chip_topology.products import SUPERPOD_910A3X8
from contract.annotations import ACCELERATOR_TYPE_LABEL
from contract.chip_names import ASCEND310P, RESOURCE_NAME
from contract.deviceinfo import configmap_name, decode
from contract.objects import Obj, npu_request
from infra.kube.client import KubernetesGateway
from infra.kube.port import KubeError, NotFound
from scheduler_core.engine.policies import policy_by_name
from scheduler_core.engine.rescheduling import GRACE_OVER_TIME
from scheduler_core.service.access import OPEN, Access
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.hardware import ASCEND910_LABELS, Hardware
from simulation.kube_scheduler import SERVICE_PROFILES
from simulation.kubelet import Allocation, KubeletError, KubeletSimulator
from simulation.loopback import LoopbackApiServer, node_object
from simulation.memory import MemoryCluster

# A fault code Huawei's faultCode.json lists under SubHealthFaultCodes, with no frequency or
# duration rule in faultCustomization.json: sub-healthy by the shipped table alone, however
# often it comes and goes (80E01801, once used here, is RestartBusiness there and separates a
# chip after two occurrences a day).
SUB_HEALTH_CODE = "81A3880C"


# A node given a SuperPoD: an 8-chip server of an Atlas 9000 A3 SuperPoD, as Huawei's
# installation labels it (a job reaches it with sp-block and this accelerator-type selector).
A3_SUPER_POD_X8 = SUPERPOD_910A3X8.name
A3_SUPER_POD_X8_TYPE = SUPERPOD_910A3X8.accelerator_type


def state_file(
    unhealthy: Iterable[int] = (),
    chips: int = 8,
    *,
    codes: Mapping[int, str] | None = None,
    super_pod: int | None = None,
    link_down: Iterable[int] = (),
) -> str:
    """A fake-driver state file of one 8-chip module910x8 server (``codes``: chip → a fault
    code it reports; ``super_pod``: the SuperPoD it is in, which makes it an 8-chip server of
    an Atlas 9000 A3 SuperPoD, ``superpod910a3x8``; ``link_down``: chips whose RoCE link is
    down)."""
    unhealthy, down = set(unhealthy), set(link_down)
    lines = ["product: module910x8", "servertype: Ascend910-32"]
    if super_pod is not None:
        lines = [f"product: {A3_SUPER_POD_X8}", f"super_pod_id: {super_pod}"]
    lines.append("chips:")
    for i in range(chips):
        health = "Unhealthy" if i in unhealthy else "Healthy"
        code = (codes or {}).get(i)
        fault = f", fault_codes: ['{code}']" if code else ""
        if i in down:
            fault += ", network: down"
        lines.append(f"  - {{id: {i}, health: {health}, ip: 10.0.0.{i + 10}{fault}}}")
    return "\n".join(lines) + "\n"


VNPU_CHIPS = 4  # chips of a simulated 310P node (8 AI cores each)
STARTUP = 60.0  # seconds the nodes of a cluster have to come up: room for a loaded machine


def vnpu_state_file(chips: int = VNPU_CHIPS) -> str:
    """A fake-driver state file of a 310P node (8 AI cores and 7 AI CPUs per chip)."""
    rows = "".join(f"  - {{id: {i}, health: Healthy}}\n" for i in range(chips))
    return f"chip_type: {ASCEND310P.name}\nai_cores: 8\nchips:\n{rows}"


VNPU_910B_CHIPS = 8  # chips of a simulated Atlas 800T A2 (910B3: 20 AI cores each)


def vnpu_910b_state_file(chips: int = VNPU_910B_CHIPS) -> str:
    """A fake-driver state file of a 910B3 server cutting dynamic vNPUs: the driver reports
    the chip name (its node label ``node.kubernetes.io/npu.chip.name``, which picks the
    templates) and the servertype follows as upstream forms it (``Ascend910B-20``)."""
    rows = "".join(f"  - {{id: {i}, health: Healthy}}\n" for i in range(chips))
    return f"product: module910bx8\nai_cores: 20\nchip_name: 910B3\nchips:\n{rows}"


def start_agent(
    name: str, home: Path, gateway: KubernetesGateway, dynamic_vnpu: bool = False
) -> NodeAgent:
    """The node agent as a node runs it (the agent's own builder), on the fake driver whose
    state file is ``home/state.yaml``, its kubelet's sockets under ``home``."""
    kube = KubeSettings(
        name,
        volcano_type=True,
        pod_resources_socket=home / "podres.sock",
    )
    config = AgentConfig(
        home / "plugins",
        ascend_runtime=True,
        period=1,
        kube=kube,
        preset_virtual=not dynamic_vnpu,
    )
    return start_node_agent(config, FakeDriver(home / "state.yaml"), gateway)


def bound_in(cache: PodCache, key: str, node: str) -> bool:
    """The agent's pod cache has seen the pod bound to ``node``."""
    seen = cache.reflector.get(key)
    return seen is not None and seen.node == node


def set_health(state: Path, unhealthy: frozenset[int]) -> None:
    """The chips ``unhealthy`` of a fake driver's state file fail and every other recovers,
    the rest of the driver's state (its vNPUs, resets) kept: edited under the driver's lock."""

    def change(raw: dict[str, Any], _: object) -> None:
        for chip in raw.get("chips") or []:
            chip["health"] = "Unhealthy" if chip.get("id") in unhealthy else "Healthy"

    edit_fake_state(state, change)


@dataclass
class SimNode:
    name: str
    home: Path
    kubelet: KubeletSimulator
    agent: NodeAgent
    dynamic_vnpu: bool = False  # a 310P or 910B node whose agent runs -presetVirtualDevice=false
    # The agent's API client, closed once that agent has stopped (``stop_agent``).
    client: ExitStack = field(default_factory=ExitStack)

    def stop_agent(self) -> None:
        """The agent stops, then its API client closes (closed first, the agent would open
        connections nobody closes again)."""
        self.agent.stop()
        self.client.close()

    def set_health(self, unhealthy: frozenset[int]) -> None:
        set_health(self.home / "state.yaml", unhealthy)

    def write_state(self, unhealthy: frozenset[int], **details: Any) -> None:
        """``details``: ``state_file``'s fault codes and SuperPoD."""
        partial = self.home / "state.tmp"
        partial.write_text(state_file(unhealthy, **details))
        partial.replace(self.home / "state.yaml")


@dataclass
class Admitted:
    pod: str
    node: str
    allocation: Allocation
    uid: str = ""  # the pod's: one made again under its name is another pod


@dataclass
class SimulatedCluster:
    store: MemoryCluster
    api: LoopbackApiServer
    nodes: dict[str, SimNode]
    service: SchedulerService
    url: str
    stack: ExitStack
    admitted: dict[str, Admitted] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def start_node(
        self, name: str, home: Path, use_preferred: bool, seed: int, *, dynamic_vnpu: bool = False
    ) -> SimNode:
        kubelet = KubeletSimulator(home / "plugins", home / "podres.sock", use_preferred, seed)
        kubelet.start()
        client = ExitStack()
        agent = self._start_agent(name, home, dynamic_vnpu, client)
        node = SimNode(name, home, kubelet, agent, dynamic_vnpu, client)
        self.nodes[name] = node
        return node

    def _start_agent(
        self, name: str, home: Path, dynamic_vnpu: bool, client: ExitStack
    ) -> NodeAgent:
        return start_agent(name, home, loopback_gateway(self.api.url, client), dynamic_vnpu)

    def restart_node_agent(self, name: str) -> None:
        """The agent process restarts (its API client with it); its kubelet stays."""
        node = self.nodes[name]
        node.stop_agent()
        node.client = ExitStack()
        node.agent = self._start_agent(name, node.home, node.dynamic_vnpu, node.client)

    def sync_node_status(self) -> None:
        """What each kubelet reports in its node status: capacity and healthy allocatable of
        every resource its device plugins registered."""
        for name, node in self.nodes.items():
            obj = self.store.get_node(name)
            resources = node.kubelet.resources()
            obj["status"]["capacity"] = {r: str(len(node.kubelet.devices(r))) for r in resources}
            obj["status"]["allocatable"] = {r: str(node.kubelet.allocatable(r)) for r in resources}
            self.store.put("Node", obj)

    def published_free(self, node: str) -> int:
        """How many chips the node's agent publishes free (-1 before it publishes)."""
        try:
            data = self.store.get_configmap("kube-system", configmap_name(node))["data"]
        except KubeError:
            return -1
        return len(decode(data).free)

    def settled(self) -> bool:
        """Every 910 node's agent publishes as free exactly what its kubelet can still give:
        the DeviceInfo the scheduler reads next is current."""
        return all(
            self.published_free(name) == node.kubelet.free(RESOURCE_NAME)
            for name, node in self.nodes.items()
            if RESOURCE_NAME in node.kubelet.resources()
        )

    def wait_published(self, timeout: float = STARTUP) -> bool:
        if not wait_for(lambda: all(_writes(n) > 0 for n in self.nodes.values()), timeout):
            return False
        self.service.refresh()
        return True

    def admit(self) -> list[Admitted]:
        """Each kubelet admits the pods bound to its node that it has not admitted yet; the
        kubelets work side by side, as on real nodes."""
        by_node: dict[str, list[Obj]] = {}
        pods, _ = self.store.list_pods(None)
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            key = f"{meta['namespace']}/{meta['name']}"
            node = spec.get("nodeName")
            if (
                node
                and key not in self.admitted
                and key not in self.refused
                and (pod["status"].get("phase") == "Pending")
            ):
                by_node.setdefault(node, []).append(pod)
        if not by_node:
            return []
        for pods_there in by_node.values():  # a kubelet admits pods as their bindings arrive
            pods_there.sort(key=lambda p: int(p["metadata"].get("resourceVersion") or 0))
        with ThreadPoolExecutor(max_workers=len(by_node)) as pool:
            done = pool.map(self._admit_on, by_node.items())
        return [admitted for batch in done for admitted in batch]

    def _admit_on(self, work: tuple[str, list[Obj]]) -> list[Admitted]:
        node, pods = work
        done = []
        # A kubelet admits a pod once its own watch has delivered the binding; the agent's
        # watch of the same pods is as quick on a real node. Here the kubelet reads the store
        # directly, so it waits for the agent's cache to have seen the bindings first.
        cache = self.nodes[node].agent.cache
        if cache is not None:
            keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]
            wait_for(lambda: all(bound_in(cache, key, node) for key in keys), timeout=5)
        for pod in pods:
            meta = pod["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if not self._still_there(pod):
                # Deleted while it waited: the kubelet admits no pod whose removal it was
                # asked (pkg/kubelet/kubelet.go HandlePodAdditions); its Allocate would match
                # the next pod of its chip count on the node.
                continue
            resource, count = npu_request(pod)
            if count == 0:  # no device to allocate: the kubelet just starts it
                running = self.store.get_pod(meta["namespace"], meta["name"])
                running["status"]["phase"] = "Running"
                self.store.put("Pod", running)
                continue
            try:
                allocation = self.nodes[node].kubelet.allocate(key, "main", resource, count)
            except KubeletError as failed:
                self.refused[key] = str(failed)
                pod["status"].update(  # as the kubelet fails a pod whose Allocate failed
                    phase="Failed",
                    reason="UnexpectedAdmissionError",
                    message=f"Allocate failed due to {failed}, which is unexpected",
                )
                with contextlib.suppress(NotFound):  # deleted meanwhile: nothing to fail
                    self.store.put("Pod", self._fresh(pod))
                continue
            try:
                running = self.store.get_pod(meta["namespace"], meta["name"])
            except NotFound:  # deleted while it was being admitted: its devices go back
                self.nodes[node].kubelet.release(key)
                continue
            self.admitted[key] = Admitted(key, node, allocation, str(meta.get("uid") or ""))
            running["status"]["phase"] = "Running"
            self.store.put("Pod", running)
            done.append(self.admitted[key])
        return done

    def _still_there(self, pod: Obj) -> bool:
        """The store still holds this very pod (same UID), not being deleted."""
        meta = pod["metadata"]
        try:
            now = self.store.get_pod(meta["namespace"], meta["name"])["metadata"]
        except NotFound:
            return False
        return now.get("uid") == meta.get("uid") and not now.get("deletionTimestamp")

    def _fresh(self, pod: Obj) -> Obj:
        current = self.store.get_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        current["status"] = pod["status"]
        return current

    def reap(self) -> list[str]:
        """Each kubelet frees the device IDs of its pods deleted from the API server (by the
        scheduler restarting a fault job, for instance), known by UID as a kubelet knows
        them: a pod made again under the same name is not the one that ran; returns their
        keys."""
        pods, _ = self.store.list_pods(None)
        present = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": str(
                p["metadata"].get("uid") or ""
            )
            for p in pods
        }
        gone = [
            key
            for key, admitted in self.admitted.items()
            if key not in present or present[key] != admitted.uid
        ]
        for key in gone:
            admitted = self.admitted.pop(key)
            self.nodes[admitted.node].kubelet.release(key)
        return gone

    def fail(self, key: str) -> None:
        """A pod's container exits with an error (phase Failed)."""
        self.finish(key, phase="Failed")

    def finish(self, key: str, delete: bool = False, *, phase: str = "Succeeded") -> None:
        """A pod ends (``phase``) or is deleted: the kubelet frees its device IDs."""
        namespace, name = key.split("/")
        if delete:
            self.store.delete("Pod", namespace, name)
        else:
            pod = self.store.get_pod(namespace, name)
            pod["status"]["phase"] = phase
            self.store.put("Pod", pod)
        admitted = self.admitted.pop(key, None)
        if admitted is not None:
            self.nodes[admitted.node].kubelet.release(key)


def loopback_gateway(url: str, closing: ExitStack) -> KubernetesGateway:
    """A client of the loopback API server at ``url``, made as ``KubernetesGateway.for_url``
    makes it, closed with ``closing``: its pool keeps its connections, each left half closed
    once the server stops (an e2e run's process held hundreds of them)."""
    configuration = client.Configuration()
    configuration.host = url
    configuration.retries = False  # an unreachable server fails fast; the caller retries
    api_client = client.ApiClient(configuration)
    closing.callback(api_client.close)
    return KubernetesGateway(api_client)


def wait_for(condition: Callable[[], bool], timeout: float = 15, step: float = 0.02) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def tor_configmap(nodes: int, per_tor: int) -> Obj:
    """``kube-system/basic-tor-node-cm`` for the simulated nodes (node-i has InternalIP
    192.168.0.<i+1>): ``per_tor`` consecutive nodes under each ToR."""
    servers = [
        {
            "tor_id": t,
            "tor_ip": f"1.0.0.{t}",
            "server": [
                {"server_ip": f"192.168.0.{i + 1}", "npu_count": 8, "slice_id": i - t * per_tor}
                for i in range(t * per_tor, min(nodes, (t + 1) * per_tor))
            ],
        }
        for t in range((nodes + per_tor - 1) // per_tor)
    ]
    info = {"version": "1.0", "tor_count": per_tor, "server_list": servers}
    return {
        "metadata": {"namespace": "kube-system", "name": "basic-tor-node-cm"},
        "data": {"tor_info": json.dumps(info)},
    }


@contextmanager
def simulated_cluster(
    nodes: int,
    policy: str = "huawei",
    unhealthy: dict[str, frozenset[int]] | None = None,
    every_kubelet_random: bool = False,
    *,
    super_pods: Mapping[str, int] | None = None,
    graceful: bool = False,
    grace_over: float = GRACE_OVER_TIME,
    vnpu_nodes: int = 0,
    vnpu_910b_nodes: int = 0,
    hardware: Sequence[tuple[Hardware, int]] = (),
    serve: bool = True,
    access: Access = OPEN,
    npu_map: bool = False,
    noded: bool = False,
) -> Iterator[SimulatedCluster]:
    """``every_kubelet_random``: no kubelet asks for the preferred allocation (by default
    every second one does not); ``super_pods``: node → its SuperPoD (such a node is an 8-chip
    server of an Atlas 9000 A3 SuperPoD); ``graceful``: pods
    deleted with a grace period stay until forced (containers that ignore SIGTERM);
    ``grace_over``: the scheduler's grace-over-time; ``vnpu_nodes``: 310P nodes
    (``infer-00`` …) serving dynamic vNPUs beside the 910 servers; ``vnpu_910b_nodes``: 910B3
    servers (``vnpu-910b-00`` …) serving them too; ``hardware``: servers of
    other products beside them, so many of each (``simulation.hardware``, named
    ``<prefix>-00`` …); ``serve``: the scheduler service answers here (without, its replicas
    run elsewhere and ``service`` only reads);
    ``access``: who may call its verbs (default: anyone, as ``--insecure``); ``npu_map``: it
    serves the NPU map (``--npu-map``); ``noded``: it reads NodeD's reports (``--noded``)."""
    root = Path(tempfile.mkdtemp(prefix="sim", dir="/tmp"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        store = MemoryCluster(graceful=graceful)
        api = LoopbackApiServer(store)
        api.start()
        stack.callback(api.stop)
        service = SchedulerService(
            loopback_gateway(api.url, stack),
            Extender(
                loopback_gateway(api.url, stack),
                policy_by_name(policy),
                grace_over=grace_over,
                profiles=frozenset(SERVICE_PROFILES),
            ),
            refresh_period=0.5,
            npu_map=npu_map,
            noded=noded,
        )
        cluster = SimulatedCluster(store, api, {}, service, "", stack)
        for i in range(nodes):
            name = f"node-{i:02d}"
            node_obj = node_object(i)
            if name in (super_pods or {}):
                node_obj["metadata"]["labels"][ACCELERATOR_TYPE_LABEL] = A3_SUPER_POD_X8_TYPE
            state = state_file(
                (unhealthy or {}).get(name, frozenset()), super_pod=(super_pods or {}).get(name)
            )
            prefers = not every_kubelet_random and i % 2 == 0
            _host(cluster, root, node_obj, state, use_preferred=prefers, seed=i)
        for i in range(vnpu_nodes):
            labels = {"accelerator": f"huawei-{ASCEND310P.name}", "host-arch": "huawei-arm"}
            node_obj = {"metadata": {"name": f"infer-{i:02d}", "labels": labels}, "status": {}}
            _host(cluster, root, node_obj, vnpu_state_file(), seed=100 + i, dynamic_vnpu=True)
        for i in range(vnpu_910b_nodes):
            labels = {**ASCEND910_LABELS, "accelerator-type": "module-910b-8"}
            node_obj = {"metadata": {"name": f"vnpu-910b-{i:02d}", "labels": labels}, "status": {}}
            state = vnpu_910b_state_file()
            _host(cluster, root, node_obj, state, seed=200 + i, dynamic_vnpu=True)
        for subnet, (kind, count) in enumerate(hardware, start=1):
            for i in range(count):
                node_obj, state = kind.node_object(i, subnet), kind.state(i, subnet)
                _host(cluster, root, node_obj, state, seed=100 * subnet + i)
        # Every node up before the cluster is handed out: a test that began on a node still
        # starting would read a state nobody had written yet.
        if not wait_for(lambda: all(map(_offers, cluster.nodes.values())), timeout=STARTUP):
            silent = sorted(n for n, node in cluster.nodes.items() if not _offers(node))
            raise RuntimeError(f"no device offered to its kubelet after {STARTUP} s: {silent}")
        cluster.sync_node_status()
        if serve:
            cluster.url = service.start(access=access)
            stack.callback(service.stop)
        if not cluster.wait_published(timeout=STARTUP):
            silent = sorted(n for n, node in cluster.nodes.items() if not _writes(node))
            raise RuntimeError(f"no DeviceInfo published after {STARTUP} s: {silent}")
        yield cluster


@contextmanager
def serving(store: MemoryCluster) -> Iterator[SimulatedCluster]:
    """The scheduler service over HTTP on ``store`` behind a loopback API server, refreshed,
    without simulated nodes (the store's Nodes and DeviceInfo are the cluster)."""
    with ExitStack() as stack:
        api = LoopbackApiServer(store)
        api.start()
        stack.callback(api.stop)
        service = SchedulerService(store, Extender(store), refresh_period=60)
        url = service.start()
        stack.callback(service.stop)
        service.refresh()
        yield SimulatedCluster(store, api, {}, service, url, stack)


def _host(
    cluster: SimulatedCluster,
    root: Path,
    node_obj: Obj,
    state: str,
    *,
    seed: int,
    use_preferred: bool = False,
    dynamic_vnpu: bool = False,
) -> None:
    """One simulated node: its Node object, its fake driver's state file under ``root``, its
    kubelet and agent, stopped with the cluster."""
    name = node_obj["metadata"]["name"]
    home = root / name
    home.mkdir()
    cluster.store.put("Node", node_obj)
    (home / "state.yaml").write_text(state)
    node = cluster.start_node(name, home, use_preferred, seed, dynamic_vnpu=dynamic_vnpu)
    cluster.stack.callback(_stop_node, node)


def _stop_node(node: SimNode) -> None:
    node.stop_agent()
    node.kubelet.close()


def _offers(node: SimNode) -> bool:
    """Its kubelet has healthy devices of some resource."""
    return any(node.kubelet.allocatable(r) > 0 for r in node.kubelet.resources())


def _writes(node: SimNode) -> int:
    publisher = node.agent.publisher
    return 0 if publisher is None else publisher.writes
