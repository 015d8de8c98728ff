"""The DRA overlay on the real control plane, with simulated 910 nodes given to the DRA driver.

- The overlay is rendered by the real kustomize and applied server-side, but for its
  workloads (DaemonSets, the Deployment): no kubelet runs their pods here. The DRA driver runs
  instead as a process per node, the commands its DaemonSet's pod runs (the init step
  ``python -m dra_driver.host_paths`` on the node's host tree, then ``python -m dra_driver
  serve --host-paths``) on the fake chips, under a token of its ServiceAccount bound to a pod
  on its node (the node's name is in the token, which the ``ascend-npu-dra-slices`` policy
  checks).
- Each node is registered, reported Ready and heartbeated (``simulation.node_status``), and
  has the project's kubelet DRA simulator (``simulation.kubelet_dra``): it wipes the node's
  slices at start, registers the driver's plugin and prepares claims over the driver's gRPC.
- kube-scheduler (the pinned binary, a default profile) allocates the claims; the
  resourceclaim controller of kube-controller-manager makes them from the templates.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from contract.dra import DEFAULT_DRIVER, DRA_NODE_LABEL, slice_name
from infra.kube.client import api_client
from infra.kube.port import NotFound, Selection
from simulation.cluster import state_file
from simulation.dra_cluster import HOST_PATHS_FILE, driver_command, host_paths_command
from simulation.kubelet_dra import Container, KubeletDra
from simulation.node_host import running_status
from simulation.node_status import NodeRegistration, RegisteredNode
from testbed.cluster import apply, bound_token
from testbed.control_plane import ControlPlane, Process, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj, Rest, RestError

OVERLAY = MANIFESTS / "overlays" / "dra"
NAMESPACE = "kube-system"
DRA_ACCOUNT = "ascend-npu-dra-driver"
NODE_LABELS = {"accelerator": "huawei-Ascend910", DRA_NODE_LABEL: "true"}
WORKLOADS = frozenset({"DaemonSet", "Deployment"})
RESOURCE = "/apis/resource.k8s.io/v1"
STARTUP = 90.0  # seconds for a driver to register and publish on a loaded machine
INIT_STEP = 60.0  # seconds for the host-paths init step (a Python start on a loaded machine)

SCHEDULER_CONFIGURATION: Obj = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": False},
    # The default profile: its DynamicResources plugin allocates the claims.
    "profiles": [{"schedulerName": "default-scheduler"}],
}


def dra_documents() -> list[Obj]:
    """The DRA overlay as kustomize renders it, without its workloads."""
    return [d for d in kustomize(OVERLAY) if d["kind"] not in WORKLOADS]


class ApiStore:
    """The kubelet DRA simulator's view of a real API server (as the admin)."""

    def __init__(self, rest: Rest) -> None:
        self._rest = rest

    def get_object(self, kind: str, namespace: str, name: str) -> Obj:
        resource, version = kind.split("/", 1)
        plural, group = resource.split(".", 1)
        where = f"/namespaces/{namespace}" if namespace else ""
        try:
            return self._rest.get(f"/apis/{group}/{version}{where}/{plural}/{name}")
        except RestError as failed:
            if failed.status == 404:
                raise NotFound(str(failed)) from None
            raise

    def delete_collection(self, what: Selection) -> int:
        """The kubelet's DeleteCollection of a node's slices (``fieldSelector``)."""
        resource, version = what.kind.split("/", 1)
        plural, group = resource.split(".", 1)
        query = {"fieldSelector": what.fields} if what.fields else None
        answer = self._rest.request("DELETE", f"/apis/{group}/{version}/{plural}", query=query)
        return len(answer.get("items") or [])


def bound_driver_token(plane: ControlPlane, node: str) -> str:
    return bound_token(plane, DRA_ACCOUNT, node)


@dataclass
class DraHost:
    """One simulated node: its registration, its kubelet's DRA side and its driver."""

    name: str
    home: Path
    registration: NodeRegistration
    kubelet: KubeletDra
    driver: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class DraTestbed:
    plane: ControlPlane
    hosts: dict[str, DraHost]
    scheduler: Process
    running: dict[str, dict[str, Container]] = field(default_factory=dict)

    @property
    def admin(self) -> Rest:
        return self.plane.rest()

    def slice_of(self, node: str) -> Obj | None:
        try:
            return self.admin.get(f"{RESOURCE}/resourceslices/{slice_name(node, DEFAULT_DRIVER)}")
        except RestError as missing:
            if missing.status == 404:
                return None
            raise

    def submit_on(self, namespace: str, node: str, name: str, claim: str) -> None:
        """A pod on ``node`` whose one container uses the existing ResourceClaim ``claim``."""
        self.admin.create(
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "resourceClaims": [{"name": "npus", "resourceClaimName": claim}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "job",
                            "resources": {"claims": [{"name": "npus"}]},
                        }
                    ],
                },
            },
        )

    def allocated_ids(self, namespace: str, claim: str, prefix: str) -> list[int]:
        """The chip ids allocated to ``claim`` (device names ``<prefix><id>``)."""
        path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim}"
        results = self.admin.get(path)["status"]["allocation"]["devices"]["results"]
        return sorted(int(r["device"].removeprefix(prefix)) for r in results)

    def bound(self, namespace: str, name: str, timeout: float = 120) -> Obj:
        """The pod once kube-scheduler bound it."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        found: Obj = {}

        def scheduled() -> bool:
            nonlocal found
            found = self.admin.get(path)
            return bool(found["spec"].get("nodeName"))

        wait_until(scheduled, timeout, f"pod {namespace}/{name} bound")
        return found

    def start(self, pod: Obj) -> dict[str, Container]:
        """What the pod's kubelet does once it is bound: its claims prepared through the
        driver's gRPC, its containers given their CDI devices, then the phase Running."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        containers = self.hosts[pod["spec"]["nodeName"]].kubelet.prepare(pod)
        self.admin.patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {"status": running_status()},
        )
        self.running[key] = containers
        return containers

    def end(self, namespace: str, name: str) -> None:
        """The pod's containers stopped: the kubelet unprepares its claims and removes the
        pod (the resourceclaim controller then deletes the claims made for it)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        pod = self.admin.get(path)
        self.hosts[pod["spec"]["nodeName"]].kubelet.unprepare(pod)
        self.running.pop(f"{namespace}/{name}", None)
        self.admin.request(
            "DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        )


def _host(
    plane: ControlPlane, root: Path, name: str, index: int, *, state: str, labels: Mapping[str, str]
) -> DraHost:
    home = root / name
    (home / "dev").mkdir(parents=True, exist_ok=True)
    (home / "state.yaml").write_text(state)
    registration = NodeRegistration(
        api_client(plane.admin),
        RegisteredNode(name, {**NODE_LABELS, **labels}, f"192.168.0.{index + 1}"),
        dict,  # no device plugin's resource: the driver refuses a node reporting one
    )
    registration.start()
    kubelet = KubeletDra(name, home / "registry", ApiStore(plane.rest()), home / "cdi")
    kubelet.start()
    kubeconfig = plane.token_kubeconfig(bound_driver_token(plane, name), f"dra-{name}")
    log = home / "driver.log"
    # As the DaemonSet's pod: the init step checks the host tree (home) once, then the
    # driver reads the set it wrote.
    with log.open("ab") as out:
        subprocess.run(
            host_paths_command(home),
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=INIT_STEP,
        )
        driver = subprocess.Popen(
            driver_command(
                name,
                home,
                kubeconfig_file=kubeconfig,
                policies_installed=True,
                host_paths=home / HOST_PATHS_FILE,
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return DraHost(name, home, registration, kubelet, driver, log)


def _stop_host(host: DraHost) -> None:
    if host.driver.poll() is None:
        host.driver.terminate()
        try:
            host.driver.wait(20)
        except subprocess.TimeoutExpired:
            host.driver.kill()
            host.driver.wait()
    host.kubelet.stop()
    host.registration.stop()


@contextmanager
def dra_testbed(
    plane: ControlPlane,
    root: Path,
    nodes: list[str],
    states: Mapping[str, str] | None = None,
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[DraTestbed]:
    """The DRA overlay applied, ``nodes`` 8-chip 910 servers (or the fake-driver state
    ``states`` gives a node, with the labels ``labels`` gives it over the 910 ones) each with
    its driver's slice published and its plugin registered, kube-scheduler running; stops
    what it started."""
    # The claim templates and the tests' pods live in `default`, whose ServiceAccount the
    # controller manager makes asynchronously (a pod before it is refused: seen under load).
    plane.rest().ensure_namespace("default")
    apply(plane, dra_documents())
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        hosts: dict[str, DraHost] = {}
        for index, name in enumerate(nodes):
            state = (states or {}).get(name) or state_file(frozenset())
            extra = (labels or {}).get(name, {})
            host = hosts[name] = _host(plane, root, name, index, state=state, labels=extra)
            stack.callback(_stop_host, host)
        scheduler = plane.start_scheduler(SCHEDULER_CONFIGURATION, name="kube-scheduler-dra")
        stack.callback(plane.processes.pop, scheduler.name, None)
        stack.callback(scheduler.stop)
        bed = DraTestbed(plane, hosts, scheduler)
        for host in hosts.values():

            def ready(host: DraHost = host) -> bool:
                if host.driver.poll() is not None:
                    raise RuntimeError(f"the DRA driver of {host.name} exited:\n{host.tail()}")
                return (
                    host.kubelet.plugin(DEFAULT_DRIVER) is not None
                    and bed.slice_of(host.name) is not None
                )

            try:
                wait_until(ready, STARTUP, f"the DRA driver of {host.name} ready")
            except TimeoutError as late:
                raise TimeoutError(f"{late}\n{host.tail()}") from None
        yield bed
