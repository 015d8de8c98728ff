"""Simulated nodes as a process of their own, as a cluster's nodes run beside its API server
and its scheduler: per node the agent (on the fake driver) and a kubelet simulator over real
gRPC unix sockets, reaching the API server over HTTP only.

Each kubelet watches the pods bound to its node (``fieldSelector=spec.nodeName=<node>``, as
the kubelet's pod source does), and admits them one at a time in the order their bindings
arrive: Allocate over gRPC, then the pod's phase Running through a status patch (Failed with
``UnexpectedAdmissionError`` when Allocate fails, as the kubelet does).

Pods matching ``--run-elsewhere`` are not theirs: the test bed's pod runner
(``testbed/pod_runner.py``) runs those as processes on the same nodes, and writes their status.

``python -m simulation.node_host --api URL --root DIR --nodes N`` prints ``ready`` once every
agent has published its DeviceInfo, then runs until stdin closes.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.builder import NodeAgent
from contract.objects import Obj, npu_request
from infra.kube.client import KubernetesGateway, api_client
from infra.kube.port import KubeError, NotFound, Selection
from infra.kube.reflector import Change, Reflector, stop_all
from simulation.cluster import bound_in, start_agent, state_file, wait_for
from simulation.kubelet import KubeletError, KubeletSimulator
from simulation.node_status import NodeRegistration, RegisteredNode
from simulation.selectors import Selector

AGENT_SEES_BINDING = 5.0  # seconds a kubelet waits for its agent's watch to catch up


def running_status() -> Obj:
    """A started pod's status as the kubelet writes it: Running, its containers ready (the
    StatefulSet and Deployment controllers count a pod only once it is Ready)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "phase": "Running",
        "startTime": now,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        ],
    }


@dataclass
class HostedNode:
    name: str
    kubelet: KubeletSimulator
    agent: NodeAgent
    pods: Reflector[Obj]
    arrivals: queue.Queue[str | None] = field(default_factory=queue.Queue)
    seen: set[str] = field(default_factory=set)


class NodeHost:
    """The nodes of one process; ``admitted`` counts the pods their kubelets started."""

    def __init__(
        self,
        api: client.ApiClient,
        root: Path,
        names: list[str],
        *,
        register: bool = False,
        agent_kubeconfigs: bool = False,
        run_elsewhere: str = "",
    ) -> None:
        """``register``: each kubelet registers its Node, reports its devices and heartbeats
        its Lease, as on a real API server (the loopback one holds its nodes already).
        ``agent_kubeconfigs``: each agent talks to the API server as ``<root>/<node>/
        agent.kubeconfig`` says (its ServiceAccount's token, as in its pod), not as ``api``.
        ``run_elsewhere``: a label selector of pods these kubelets leave alone (neither
        started nor ended here: another runner runs them)."""
        self._elsewhere = Selector.parse(run_elsewhere, "") if run_elsewhere else None
        self._gateway = KubernetesGateway(api)
        self._core = client.CoreV1Api(api)
        self._lock = threading.Lock()
        self.admitted = 0
        self.refused = 0
        self.nodes: dict[str, HostedNode] = {}
        self.registrations: list[NodeRegistration] = []
        self._workers: list[threading.Thread] = []
        for i, name in enumerate(names):
            home = root / name
            home.mkdir(parents=True, exist_ok=True)
            (home / "state.yaml").write_text(state_file())
            kubelet = KubeletSimulator(home / "plugins", home / "podres.sock", i % 2 == 0, i)
            kubelet.start()
            if register:
                registration = NodeRegistration(
                    api,
                    RegisteredNode(name, {"accelerator": "huawei-Ascend910"}, f"192.168.0.{i + 1}"),
                    functools.partial(_devices, kubelet),
                )
                registration.start()
                self.registrations.append(registration)
            gateway = self._gateway
            if agent_kubeconfigs:
                gateway = KubernetesGateway.from_environment(home / "agent.kubeconfig")
            agent = start_agent(name, home, gateway)
            self.nodes[name] = self._watch(name, kubelet, agent)

    def _watch(self, name: str, kubelet: KubeletSimulator, agent: NodeAgent) -> HostedNode:
        arrivals: queue.Queue[str | None] = queue.Queue()

        def changed(changes: list[Change[Obj]]) -> None:
            for change in changes:
                if change.new is None:
                    kubelet.release(change.key)  # its containers end: the devices are free
                elif (
                    change.new["metadata"].get("deletionTimestamp")
                    or change.new["status"].get("phase") == "Pending"
                ):
                    arrivals.put(change.key)

        pods = Reflector(
            self._gateway,
            Selection("Pod", fields=f"spec.nodeName={name}"),
            self._ours,
            on_change=changed,
            name=f"kubelet {name}",
        )
        node = HostedNode(name, kubelet, agent, pods, arrivals)
        pods.start()
        worker = threading.Thread(target=self._admit_loop, args=(node,), daemon=True)
        worker.start()
        self._workers.append(worker)
        return node

    def _ours(self, pod: Obj) -> Obj | None:
        """The pod, when these kubelets run it (None: another runner does)."""
        return None if self._elsewhere is not None and self._elsewhere.matches(pod) else pod

    def _admit_loop(self, node: HostedNode) -> None:
        while (key := node.arrivals.get()) is not None:
            pod = node.pods.get(key)
            if pod is None:
                continue
            uid = pod["metadata"].get("uid", key)  # a pod made again under its name is new
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(node, key, pod)
            elif uid not in node.seen and pod["status"].get("phase") == "Pending":
                node.seen.add(uid)
                self._admit(node, key, pod)

    def _terminate(self, node: HostedNode, key: str, pod: Obj) -> None:
        """A pod being deleted gracefully: its containers stop, then the kubelet removes the
        object for good (grace 0, on the pod's UID), as the kubelet's status manager does
        (pkg/kubelet/status/status_manager.go, canBeDeleted and the Delete after it); on a
        real API server a bound pod stays until its kubelet does this."""
        node.kubelet.release(key)
        namespace, name = key.split("/", 1)
        body: Any = {"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}}
        try:
            self._core.delete_namespaced_pod(name, namespace, body=body, _preload_content=False)
        except client.ApiException:
            return  # gone already, or made again under its name (another UID)

    def _admit(self, node: HostedNode, key: str, pod: Obj) -> None:
        # The agent's own watch of the same pods delivers the binding as quickly on a real
        # node; its handshake needs it (the pod's annotated chips).
        cache = node.agent.cache
        if cache is not None:
            wait_for(lambda: bound_in(cache, key, node.name), AGENT_SEES_BINDING)
        namespace, name = key.split("/", 1)
        if not self._admissible(node, key, pod):
            # Deleted while it waited: the kubelet admits no pod whose removal it was asked
            # (pkg/kubelet/kubelet.go HandlePodAdditions skips a pod whose termination was
            # requested). Its Allocate would have matched the next pod of its chip count,
            # which the device plugin would then give this dead pod's container.
            return
        resource, count = npu_request(pod)
        status: Obj = running_status()
        if count:
            try:
                node.kubelet.allocate(key, "main", resource, count)
                if not _same_pod(node.pods.get(key), pod):
                    # Deleted while it was admitted (its deletion's release came first): the
                    # kubelet's device manager drops the devices of a pod no longer active
                    # (pkg/kubelet/cm/devicemanager/manager.go, UpdateAllocatedDevices).
                    node.kubelet.release(key)
                    return
            except KubeletError as failed:
                status = {
                    "phase": "Failed",
                    "reason": "UnexpectedAdmissionError",
                    "message": f"Allocate failed due to {failed}, which is unexpected",
                }
        try:
            self._core.patch_namespaced_pod_status(
                name, namespace, {"status": status}, _preload_content=False
            )
        except client.ApiException:
            return
        with self._lock:
            if status["phase"] == "Running":
                self.admitted += 1
            else:
                self.refused += 1

    def _admissible(self, node: HostedNode, key: str, pod: Obj) -> bool:
        """The pod is still there and not being deleted: in this process's watch, and, since
        that watch may lag seconds behind on a loaded machine where a real kubelet's would
        not, in a read of the pod itself."""
        current = node.pods.get(key)
        if not _same_pod(current, pod) or (current or {})["metadata"].get("deletionTimestamp"):
            return False
        namespace, name = key.split("/", 1)
        try:
            read = self._gateway.get_pod(namespace, name)
        except NotFound:
            return False
        except KubeError:  # unread: the watch's word stands, as a kubelet has no other
            return True
        return _same_pod(read, pod) and not read["metadata"].get("deletionTimestamp")

    def visible(self) -> dict[str, str]:
        """``ASCEND_VISIBLE_DEVICES`` of each container the kubelets started, by pod key."""
        return {
            allocation.pod: allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", "")
            for node in self.nodes.values()
            for allocation in node.kubelet.allocations
        }

    def published(self) -> bool:
        """Every agent has written its DeviceInfo at least once."""
        return all(
            n.agent.publisher is not None and n.agent.publisher.writes for n in self.nodes.values()
        )

    def stop(self) -> None:
        for registration in self.registrations:
            registration.stop()
        for node in self.nodes.values():
            node.arrivals.put(None)
        stop_all(n.pods for n in self.nodes.values())
        with ThreadPoolExecutor(len(self.nodes) or 1) as pool:  # nodes stop side by side
            list(pool.map(_stop_node, self.nodes.values()))


def _same_pod(now: Obj | None, admitted: Obj) -> bool:
    """``now`` (the watch's pod under the admitted one's name) is still the admitted pod."""
    return now is not None and now["metadata"].get("uid") == admitted["metadata"].get("uid")


def _devices(kubelet: KubeletSimulator) -> dict[str, int]:
    """The healthy devices the node's device plugins registered, by resource."""
    return {resource: kubelet.allocatable(resource) for resource in kubelet.resources()}


def _stop_node(node: HostedNode) -> None:
    node.agent.stop()
    node.kubelet.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--api", help="a plain-HTTP API server's URL (the loopback one)")
    where.add_argument(
        "--kubeconfig",
        type=Path,
        help="a real API server: each kubelet registers its node and heartbeats its Lease",
    )
    parser.add_argument(
        "--agent-kubeconfigs",
        action="store_true",
        help="each agent as <root>/<node>/agent.kubeconfig says (with --kubeconfig)",
    )
    parser.add_argument("--root", type=Path, required=True, help="a directory for the nodes")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument(
        "--run-elsewhere",
        default="",
        metavar="SELECTOR",
        help="a label selector of pods another runner runs on these nodes (left alone here)",
    )
    args = parser.parse_args()
    names = [f"node-{i:02d}" for i in range(args.nodes)]
    if args.kubeconfig is not None:
        host = NodeHost(
            api_client(args.kubeconfig),
            args.root,
            names,
            register=True,
            agent_kubeconfigs=args.agent_kubeconfigs,
            run_elsewhere=args.run_elsewhere,
        )
    else:
        configuration = client.Configuration()
        configuration.host = args.api
        configuration.retries = False  # as KubernetesGateway.for_url: fail fast, retry above
        host = NodeHost(client.ApiClient(configuration), args.root, names)
    if not wait_for(host.published, 60):
        raise SystemExit("the agents did not publish their DeviceInfo")
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "count":  # how many pods the kubelets admitted
            print(json.dumps({"admitted": host.admitted, "refused": host.refused}), flush=True)
        elif line.strip() == "visible":  # what each container sees: ASCEND_VISIBLE_DEVICES
            print(json.dumps(host.visible()), flush=True)
    host.stop()


if __name__ == "__main__":
    main()
