"""The project deployed on the real control plane as an admin deploys it, with simulated nodes.

- The overlay is rendered by the real kustomize and applied server-side, as ``kubectl apply
  --server-side -k`` does: RBAC, admission policies, ConfigMaps, DaemonSets and Deployments.
- The scheduler service runs under its ServiceAccount's token, kube-scheduler under its own
  (the overlay's) with the KubeSchedulerConfiguration the overlay ships (only its extender's
  address rewritten to where the service listens here, its client certificate's files to
  ones made here as the certs Job makes them, its client connection to this API server); the
  service serves the verbs over HTTPS to that certificate alone, as config/scheduler.yaml.
- The nodes (``python -m simulation.node_host --kubeconfig``): per node the agent on the fake
  driver and the project's kubelet simulator, which registers the Node, reports its devices and
  heartbeats its Lease. Each agent runs under a token of the agent's ServiceAccount bound to the
  agent DaemonSet's pod on its node, as the kubelet mounts it (the node's name is in the token,
  which the agent's admission policy checks).
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from contract.chip_names import RESOURCE_NAME
from scheduler_core.certs import CLIENT_NAME, VALIDITY, Bundle, issue
from simulation.processes import Part, free_port, ready, service_command_with
from testbed.build import PLUGIN_SCHEDULER
from testbed.certs import KeyPair
from testbed.control_plane import ControlPlane, Process, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj, Rest, RestError

NAMESPACE = "kube-system"
SCHEDULER_ACCOUNT = "ascend-npu-scheduler"
KUBE_SCHEDULER_ACCOUNT = "ascend-npu-kube-scheduler"
AGENT_ACCOUNT = "ascend-npu-agent"
FIELD_MANAGER = "testbed"
NODE_LABELS = {"accelerator": "huawei-Ascend910"}
SCHEDULER_PROFILE = "ascend-npu-scheduler"  # the overlay's kube-scheduler profile


def apply(plane: ControlPlane, documents: list[Obj]) -> None:
    """Server-side apply of each document (``kubectl apply --server-side``): the API server's
    own validation, defaulting and admission decide."""
    admin = plane.rest()
    for document in documents:
        admin.apply(document)


def npu_pod(chips: int, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Obj:
    """A pod (or a controller's pod template) asking ``chips`` 910 chips of the extender's
    profile (``schedulerName: ascend-npu-scheduler``, as the overlay ships it)."""
    return {
        "metadata": {"labels": labels, "annotations": annotations or {}},
        "spec": {
            "schedulerName": SCHEDULER_PROFILE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "ascend-training:latest",
                    "resources": {
                        "requests": {RESOURCE_NAME: str(chips)},
                        "limits": {RESOURCE_NAME: str(chips)},
                    },
                }
            ],
        },
    }


def shipped_kube_scheduler_configuration(overlay: str = "kube-scheduler") -> dict[str, Any]:
    """The KubeSchedulerConfiguration a kube-scheduler overlay ships (its ConfigMap)."""
    rendered = kustomize(MANIFESTS / "overlays" / overlay)
    (configmap,) = [
        d
        for d in rendered
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ascend-npu-kube-scheduler-config"
    ]
    configuration: dict[str, Any] = yaml.safe_load(configmap["data"]["kube-scheduler.yaml"])
    return configuration


@dataclass(frozen=True)
class ExtenderTls:
    """The scheduler service's certificates and token as files, made as the certs Job makes
    them (``scheduler_core.certs.issue``), its serving certificate for 127.0.0.1."""

    ca: Path
    server: KeyPair
    client: KeyPair  # kube-scheduler's (CN ascend-npu-kube-scheduler)
    token: Path

    @staticmethod
    def make(directory: Path) -> ExtenderTls:
        now = datetime.datetime.now(datetime.UTC)
        return ExtenderTls.write(directory, issue(["127.0.0.1"], CLIENT_NAME, now, VALIDITY))

    @staticmethod
    def write(directory: Path, made: Bundle) -> ExtenderTls:
        """``made``'s files in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        files = {
            "ca.crt": made.ca,
            "tls.crt": made.server.cert,
            "tls.key": made.server.key,
            "client.crt": made.client.cert,
            "client.key": made.client.key,
            "token": made.token.encode(),
        }
        for name, content in files.items():
            (directory / name).write_bytes(content)
        return ExtenderTls(
            directory / "ca.crt",
            KeyPair(directory / "tls.crt", directory / "tls.key"),
            KeyPair(directory / "client.crt", directory / "client.key"),
            directory / "token",
        )

    def service_flags(self) -> tuple[str, ...]:
        """The service's flags, as the shipped config/scheduler.yaml sets them."""
        return (
            f"--tls-cert-file={self.server.cert}",
            f"--tls-private-key-file={self.server.key}",
            f"--client-ca-file={self.ca}",
            f"--client-allowed-names={CLIENT_NAME}",
            f"--token-file={self.token}",
        )


def extender_configuration(
    url: str,
    *,
    tls: ExtenderTls | None = None,
    node_cache: bool | None = None,
    leader_elect: bool | None = None,
) -> dict[str, Any]:
    """The shipped configuration with its extender at ``url``: over HTTPS with ``tls``'s
    client certificate (the shipped paths replaced by these files), or, without ``tls``, a
    test's plain-HTTP extender (``--insecure``). ``node_cache``: override
    ``nodeCacheCapable``; ``leader_elect``: override its leader election."""
    configuration = copy.deepcopy(shipped_kube_scheduler_configuration())
    (extender,) = configuration["extenders"]
    extender["urlPrefix"] = url
    if tls is None:
        del extender["enableHTTPS"], extender["tlsConfig"]
    else:
        extender["tlsConfig"] = {
            "caFile": str(tls.ca),
            "certFile": str(tls.client.cert),
            "keyFile": str(tls.client.key),
        }
    if node_cache is not None:
        extender["nodeCacheCapable"] = node_cache
    if leader_elect is not None:
        configuration["leaderElection"]["leaderElect"] = leader_elect
    return configuration


PLUGIN = "AscendNPU"  # kube_scheduler_plugin/'s name in a profile
PLUGIN_OVERLAY = "kube-scheduler-plugin"


def plugin_configuration(
    url: str, *, tls: ExtenderTls | None = None, leader_elect: bool | None = None
) -> dict[str, Any]:
    """The configuration the kube-scheduler-plugin overlay ships for ``kube-scheduler-ascend``
    (the AscendNPU plugin in the extender's place) with the plugin calling the service at
    ``url``: over HTTPS with ``tls``'s client certificate (the shipped paths replaced by these
    files), or plain HTTP without ``tls`` (``--insecure``)."""
    configuration = copy.deepcopy(shipped_kube_scheduler_configuration(PLUGIN_OVERLAY))
    (profile,) = configuration["profiles"]
    (entry,) = [c for c in profile["pluginConfig"] if c["name"] == PLUGIN]
    args = entry["args"]
    args["urlPrefix"] = url
    for key in ("caFile", "certFile", "keyFile"):
        del args[key]
    if tls is not None:
        args |= {"caFile": str(tls.ca), "certFile": str(tls.client.cert)}
        args["keyFile"] = str(tls.client.key)
    if leader_elect is not None:
        configuration["leaderElection"]["leaderElect"] = leader_elect
    return configuration


def bound_token(plane: ControlPlane, account: str, node: str) -> str:
    """A token of ServiceAccount ``kube-system/<account>`` bound to a pod of it on ``node``
    (the node's name in the token, as the kubelet's projected token for a DaemonSet's pod
    carries it, and as the admission policies of the agent and the DRA driver check)."""
    admin = plane.rest()
    name = f"{account}-{node}"
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    pod = {
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": f"testbed-{account}"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "main", "image": "ascend-npu-k8s:testbed"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    try:
        created = admin.create(pods, pod)
    except RestError as exists:
        if exists.status != 409:
            raise
        created = admin.get(f"{pods}/{name}")
    return plane.token(NAMESPACE, account, bound_to=created)


def bound_agent_token(plane: ControlPlane, node: str) -> str:
    return bound_token(plane, AGENT_ACCOUNT, node)


@dataclass
class Deployed:
    plane: ControlPlane
    nodes: Part
    service: Process
    service_url: str  # https: the verbs, for kube-scheduler's client certificate
    scheduler_kubeconfig: Path
    kube_scheduler: Process | None
    metrics_url: str  # http: the probes and /metrics
    tls: ExtenderTls

    def start_service(self) -> None:
        """Start the scheduler service again (same port, same flags) and wait until it is
        ready."""
        self.service.start()
        self.service.wait_healthy(lambda: ready(self.metrics_url))


def node_names(count: int) -> list[str]:
    return [f"node-{i:02d}" for i in range(count)]


def node_host(plane: ControlPlane, root: Path, nodes: int, *extra: str) -> Part:
    """``nodes`` simulated 910 nodes registered (each agent's token bound to a pod on its
    node, so the node must exist first; its kubelet simulator then reports its status), and
    the command of the process that runs their agents and kubelets under ``root``."""
    admin = plane.rest()
    for name in node_names(nodes):
        try:
            admin.create("/api/v1/nodes", {"metadata": {"name": name, "labels": NODE_LABELS}})
        except RestError as exists:
            if exists.status != 409:
                raise
        (root / name).mkdir(parents=True, exist_ok=True)
        agent = plane.token_kubeconfig(bound_agent_token(plane, name), f"agent-{name}")
        agent.replace(root / name / "agent.kubeconfig")
    return Part(
        "simulation.node_host",
        *("--kubeconfig", str(plane.admin), "--agent-kubeconfigs"),
        *("--root", str(root), "--nodes", str(nodes), *extra),
    )


@contextmanager
def deployed(
    plane: ControlPlane,
    workdir: Path,
    nodes: int,
    *,
    overlay: str = "kube-scheduler",
    node_cache: bool | None = None,
    service_flags: tuple[str, ...] = (),
) -> Iterator[Deployed]:
    """The overlay applied, ``nodes`` simulated 910 nodes, the scheduler service and (for
    the kube-scheduler overlay) kube-scheduler as shipped (for kube-scheduler-plugin,
    kube-scheduler-ascend with the overlay's plugin); stops what it started."""
    apply(plane, kustomize(MANIFESTS / "overlays" / overlay))
    scheduler_kubeconfig = plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT)
    root = workdir / "nodes"
    host = node_host(plane, root, nodes)
    port, metrics_port = free_port(), free_port()
    tls = ExtenderTls.make(workdir / "extender-tls")
    command = service_command_with(
        scheduler_kubeconfig,
        port,
        "--refresh-period",
        "0.5",
        f"--metrics-listen=127.0.0.1:{metrics_port}",
        *tls.service_flags(),
        *service_flags,
        insecure=False,
        policies_installed=True,
    )
    service = Process("scheduler-service", command, workdir)
    kube_scheduler: Process | None = None
    try:
        running = Deployed(
            plane,
            host,
            service,
            f"https://127.0.0.1:{port}",
            scheduler_kubeconfig,
            None,
            f"http://127.0.0.1:{metrics_port}",
            tls,
        )
        service.wait_healthy(lambda: ready(running.metrics_url))
        if overlay in ("kube-scheduler", PLUGIN_OVERLAY):
            plugin = overlay == PLUGIN_OVERLAY
            configuration = (
                plugin_configuration(running.service_url, tls=tls)
                if plugin
                else extender_configuration(running.service_url, tls=tls, node_cache=node_cache)
            )
            running.kube_scheduler = kube_scheduler = plane.start_scheduler(
                configuration,
                kubeconfig=plane.service_account(NAMESPACE, KUBE_SCHEDULER_ACCOUNT),
                program=PLUGIN_SCHEDULER if plugin else "kube-scheduler",
            )
        yield running
    finally:
        if kube_scheduler is not None:
            kube_scheduler.stop()
            del plane.processes[kube_scheduler.name]
        service.stop()
        host.stop()


def wait_pods(
    plane: ControlPlane, namespace: str, selector: str, count: int, timeout: float = 120
) -> list[Obj]:
    """The pods of ``selector`` once ``count`` of them run."""
    admin = plane.rest()
    found: list[Obj] = []

    def running() -> bool:
        nonlocal found
        listed = admin.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)
        found = [p for p in listed["items"] if p["status"].get("phase") == "Running"]
        return len(found) >= count

    try:
        wait_until(running, timeout, f"{count} running pods of {selector}")
    except TimeoutError as timed_out:
        raise TimeoutError(f"{timed_out}; {pods_state(admin, namespace, selector)}") from None
    return found


def pods_state(admin: Rest, namespace: str, selector: str) -> str:
    """Where each pod of ``selector`` stands and the last event about it: what a timed-out
    wait says, so that a failure on a loaded machine explains itself."""
    pods = admin.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    events = admin.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    last: dict[str, str] = {}
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or ""):
        last[event["involvedObject"]["name"]] = f"{event['reason']}: {event['message']}"
    states = []
    for pod in pods:
        name = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName") or "unbound"
        phase = pod["status"].get("phase", "?")
        if phase == "Failed":
            phase += f" ({pod['status'].get('message', '')})"
        states.append(f"{name} {phase} on {node} ({last.get(name, 'no event')})")
    tainted = [
        f"{n['metadata']['name']} {', '.join(t['key'] for t in n['spec']['taints'])}"
        for n in admin.get("/api/v1/nodes")["items"]
        if n["spec"].get("taints")
    ]
    return "; ".join(states or ["no pod matches"]) + f"; tainted nodes: {tainted or 'none'}"
