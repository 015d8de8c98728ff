"""A simulated DRA cluster: the loopback API server serving ``resource.k8s.io/v1``, 910 nodes
each with a real DRA driver (its kubelet plugin over unix sockets, its slice through the
official client over HTTP, chips from a fake-driver state file) and a kubelet DRA simulator,
and kube-scheduler's DRA side as a stand-in (``DraScheduler``): the resourceclaim
controller's claims from templates, allocation on the node that scores best, binding; the
kubelet's prepare and start; the pod's end, unprepare and the claim's release.

The DeviceClass and claim templates are the deployed ones (``daemonset/overlays/dra``).
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chip_drivers.fake import FakeDriver
from contract.dra import CLAIM_KIND, DRA_NODE_LABEL, SLICE_KIND
from contract.objects import Obj
from dra_driver.cdi import HostPaths
from dra_driver.driver import DraConfig, DraDriver, start_dra_driver
from infra.kube.port import Selection
from simulation.cluster import STARTUP, loopback_gateway, set_health, state_file, wait_for
from simulation.dra_allocator import Allocator, allocation, in_use, node_devices, score
from simulation.kubelet_dra import KNOWN_SERVICES, Container, KubeletDra, PrepareFailed
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster

OVERLAY = Path(__file__).parents[1] / "daemonset" / "overlays" / "dra"
CLASS_KIND = "deviceclasses.resource.k8s.io/v1"
TEMPLATE_KIND = "resourceclaimtemplates.resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
HOST_PATHS_FILE = "host-paths.json"  # what host_paths_command writes in a node's home


def deployed(kind: str) -> list[Obj]:
    """The overlay's objects of a kind (``DeviceClass``, ``ResourceClaimTemplate``)."""
    return [
        d
        for path in sorted(OVERLAY.glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == kind
    ]


@dataclass
class DraNode:
    name: str
    home: Path
    kubelet: KubeletDra
    driver: DraDriver
    # The driver's API client, closed once that driver has stopped (``stop_driver``).
    client: ExitStack = field(default_factory=ExitStack)

    def set_health(self, unhealthy: frozenset[int]) -> None:
        set_health(self.home / "state.yaml", unhealthy)

    def stop_driver(self) -> None:
        """The driver stops, then its API client closes."""
        self.driver.stop()
        self.client.close()


def pod_with_claim(namespace: str, name: str, template: str) -> Obj:
    """A pod whose container uses one claim made from ``template``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}"},
        "spec": {
            "resourceClaims": [{"name": "npus", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "npus"}]}}],
        },
        "status": {"phase": "Pending"},
    }


@dataclass
class DraScheduler:
    """kube-scheduler's ``DynamicResources`` and the resourceclaim controller, for pods with
    claims (nothing else is scheduled here): each pending pod in turn, on the feasible node
    of the highest score (the first by name on a tie, for repeatable tests: kube-scheduler
    takes one of the tied nodes at random, ``pkg/scheduler/schedule_one.go``'s node heap)."""

    store: MemoryCluster
    allocator: Allocator = field(init=False)
    reasons: dict[str, str] = field(default_factory=dict)
    _suffix: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        classes = self.store.list_page(Selection(CLASS_KIND), 0).items
        self.allocator = Allocator({c["metadata"]["name"]: c for c in classes})

    def cycle(self) -> list[str]:
        """One pass over the pending pods; the keys of those bound."""
        pods = [
            p
            for p in self.store.list_pods(None)[0]
            if not (p.get("spec") or {}).get("nodeName")
            and (p.get("spec") or {}).get("resourceClaims")
        ]
        placed = []
        for pod in pods:
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            claims = self._claims_of(pod)
            node = self._place(claims)
            if node is None:
                self.reasons[key] = "no node has devices for all of its claims"
                continue
            self.reasons.pop(key, None)
            placed.append(key)
        return placed

    def _claims_of(self, pod: Obj) -> list[tuple[Obj, Obj]]:
        """The pod's claims, made from their templates when missing (as the resourceclaim
        controller makes them: named after the pod, owned by it, recorded in its status)."""
        meta = pod["metadata"]
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        made = {s["name"]: s["resourceClaimName"] for s in statuses}
        claims = []
        for entry in pod["spec"]["resourceClaims"]:
            name = entry.get("resourceClaimName") or made.get(entry["name"])
            if name is None:
                template = self.store.get_object(
                    TEMPLATE_KIND, meta["namespace"], entry["resourceClaimTemplateName"]
                )
                name = f"{meta['name']}-{entry['name']}-{next(self._suffix):05d}"
                self.store.create_object(
                    CLAIM_KIND,
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {
                            "namespace": meta["namespace"],
                            "name": name,
                            "uid": f"claim-{name}",
                            "ownerReferences": [
                                {"kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
                            ],
                        },
                        "spec": template["spec"]["spec"],
                    },
                )
                statuses.append({"name": entry["name"], "resourceClaimName": name})
                self.store.patch_pod_status(
                    meta["namespace"], meta["name"], {"resourceClaimStatuses": statuses}
                )
            claims.append((pod, self.store.get_object(CLAIM_KIND, meta["namespace"], name)))
        return claims

    def _place(self, claims: list[tuple[Obj, Obj]]) -> str | None:
        slices = self.store.list_page(Selection(SLICE_KIND), 0).items
        all_claims = self.store.list_page(Selection(CLAIM_KIND), 0).items
        used = in_use(all_claims)
        self.allocator.selectors.forget()
        best: tuple[int, str, list[Any]] | None = None
        for node in sorted(n["metadata"]["name"] for n in self.store.list_nodes()):
            devices = node_devices(slices, node)
            taken = set(used)
            chosen = []
            for _, claim in claims:
                choice = self.allocator.allocate(claim, devices, taken)
                if choice is None:
                    break
                chosen.append(choice)
                taken |= {d.key for c in choice for d in c.devices}
            else:
                mark = score(chosen)
                if best is None or mark > best[0]:
                    best = (mark, node, chosen)
        if best is None:
            return None
        _, node, chosen = best
        meta = claims[0][0]["metadata"]
        for (_, claim), choice in zip(claims, chosen, strict=True):
            claim["metadata"].setdefault("finalizers", []).append(FINALIZER)
            claim["status"] = {
                "allocation": allocation(node, choice),
                "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
            }
            self.store.replace_object(CLAIM_KIND, claim)
        self.store.bind_pod(meta["namespace"], meta["name"], meta["uid"], node, {})
        return node

    def release(self, pod: Obj) -> None:
        """The pod is gone: the resourceclaim controller deletes the claims made for it."""
        namespace = pod["metadata"]["namespace"]
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            self.store.delete_object(CLAIM_KIND, namespace, status["resourceClaimName"])


@dataclass
class DraCluster:
    store: MemoryCluster
    api: LoopbackApiServer
    nodes: dict[str, DraNode]
    scheduler: DraScheduler
    stack: ExitStack
    running: dict[str, dict[str, Container]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def start_driver(self, name: str, home: Path, client: ExitStack) -> DraDriver:
        """The node's driver, its API client closed with ``client``."""
        gateway = loopback_gateway(self.api.url, client)
        return start_dra_driver(dra_config(name, home), FakeDriver(home / "state.yaml"), gateway)

    def restart_driver(self, name: str) -> None:
        node = self.nodes[name]
        node.stop_driver()
        node.client = ExitStack()
        node.driver = self.start_driver(name, node.home, node.client)

    def run(self) -> list[str]:
        """Schedule, and each kubelet prepares and starts the pods bound to it."""
        self.scheduler.cycle()
        started = []
        for pod in self.store.list_pods(None)[0]:
            meta, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
            key = f"{meta['namespace']}/{meta['name']}"
            if not node or key in self.running or key in self.failed:
                continue
            try:
                self.running[key] = self.nodes[node].kubelet.prepare(pod)
            except PrepareFailed as failed:
                self.failed[key] = str(failed)
                continue
            self.store.patch_pod_status(meta["namespace"], meta["name"], {"phase": "Running"})
            started.append(key)
        return started

    def end(self, key: str) -> None:
        """The pod's containers stop: the kubelet unprepares, the pod and its claims go."""
        namespace, name = key.split("/")
        pod = self.store.get_pod(namespace, name)
        node = pod["spec"]["nodeName"]
        self.nodes[node].kubelet.unprepare(pod)
        self.running.pop(key, None)
        self.store.delete("Pod", namespace, name)
        self.scheduler.release(pod)

    def slice_of(self, node: str) -> Obj | None:
        items = self.store.list_page(Selection(SLICE_KIND, fields=f"spec.nodeName={node}"), 0)
        return items.items[0] if items.items else None


def _stop_driver(node: DraNode) -> None:
    node.stop_driver()  # the one running at the end (restarts replace it)


def dra_node_object(name: str, i: int) -> Obj:
    """A 910 server given to the DRA driver: labelled so, no device plugin's resource."""
    return {
        "metadata": {
            "name": name,
            "uid": f"node-uid-{i}",
            "labels": {"accelerator": "huawei-Ascend910", DRA_NODE_LABEL: "true"},
        },
        "status": {"addresses": [{"type": "InternalIP", "address": f"192.168.0.{i + 1}"}]},
    }


def host_paths_command(home: Path) -> list[str]:
    """``python -m dra_driver.host_paths`` as the DaemonSet's init container runs it, on the
    host tree ``home`` (its ``dev`` the node's devices): writes ``home/host-paths.json``."""
    return [
        sys.executable,
        "-m",
        "dra_driver.host_paths",
        f"--host-root={home}",
        f"--out={home / HOST_PATHS_FILE}",
    ]


def driver_command(
    name: str,
    home: Path,
    *,
    kubeconfig_file: Path,
    policies_installed: bool = False,
    host_paths: Path | None = None,
) -> list[str]:
    """``python -m dra_driver serve`` as the DaemonSet runs it, on the fake chips of
    ``home``, the kubelet's directories under it, the API server of a kubeconfig;
    ``policies_installed``: the chart's DRA admission policies are on the API server (else
    the driver is told to start without them); ``host_paths``: the file the init step wrote
    (``host_paths_command``; else the driver checks this machine's ``/`` itself)."""
    return [
        sys.executable,
        "-m",
        "dra_driver",
        "serve",
        f"--node-name={name}",
        "--driver=fake",
        f"--fake-state={home / 'state.yaml'}",
        f"--plugins-dir={home / 'plugins'}",
        f"--registry-dir={home / 'registry'}",
        f"--cdi-root={home / 'cdi'}",
        "--kube=kubeconfig",
        f"--kubeconfig={kubeconfig_file}",
        "--log-level=warning",
        *([] if policies_installed else ["--allow-missing-policies"]),
        *([] if host_paths is None else [f"--host-paths={host_paths}"]),
    ]


def dra_config(name: str, home: Path) -> DraConfig:
    return DraConfig(
        name,
        plugins_dir=home / "plugins",
        registry_dir=home / "registry",
        cdi_root=home / "cdi",
        host=HostPaths.scan(home),  # home is the node's host tree (home/dev its devices)
    )


@contextmanager
def dra_cluster(
    nodes: int, *, wipe_delay: float = 30.0, kubelet_services: tuple[str, ...] = KNOWN_SERVICES
) -> Iterator[DraCluster]:
    """``nodes`` 8-chip 910 servers (``node-00`` …), each running the DRA driver, their
    slices published; the deployed DeviceClass and claim templates (in ``default``)."""
    root = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        store = MemoryCluster()
        api = LoopbackApiServer(store)
        api.start()
        stack.callback(api.stop)
        for kind, objects in (
            (CLASS_KIND, deployed("DeviceClass")),
            (TEMPLATE_KIND, deployed("ResourceClaimTemplate")),
        ):
            for obj in objects:
                store.create_object(kind, obj)
        cluster = DraCluster(store, api, {}, DraScheduler(store), stack)
        for i in range(nodes):
            name = f"node-{i:02d}"
            home = root / name
            (home / "dev").mkdir(parents=True)
            store.put("Node", dra_node_object(name, i))
            (home / "state.yaml").write_text(state_file(frozenset()))
            kubelet = KubeletDra(
                name,
                home / "registry",
                store,
                home / "cdi",
                wipe_delay=wipe_delay,
                services=kubelet_services,
            )
            kubelet.start()
            stack.callback(kubelet.stop)
            client = ExitStack()
            node = DraNode(name, home, kubelet, cluster.start_driver(name, home, client), client)
            cluster.nodes[name] = node
            stack.callback(_stop_driver, node)

        # Every driver registered (or refused) and its slice published before the cluster is
        # handed out: a claim allocated earlier would find no devices.
        def up(n: DraNode) -> bool:
            registered = n.kubelet.plugin(n.driver.config.driver) or n.kubelet.refused
            return bool(registered) and cluster.slice_of(n.name) is not None

        if not wait_for(lambda: all(map(up, cluster.nodes.values())), timeout=STARTUP):
            down = sorted(n.name for n in cluster.nodes.values() if not up(n))
            raise RuntimeError(f"DRA drivers not registered or published after {STARTUP} s: {down}")
        yield cluster
