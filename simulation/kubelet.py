"""A kubelet simulator for tests and the demo: it behaves like the kubelet's device manager.

It serves ``Registration`` on ``<dir>/kubelet.sock``, validates a registration as the
kubelet does, dials the plugin, reads its options with ``GetDevicePluginOptions``, keeps
``ListAndWatch`` open and tracks healthy/unhealthy devices, allocates per container (random
free IDs, or ``GetPreferredAllocation`` first when the plugin advertises it), calls
``Allocate`` with one container request, and restarts the way the kubelet does (every
socket in the directory removed, ``kubelet.sock`` recreated). It also serves PodResources
``List`` from what it allocated. Real gRPC over unix sockets throughout.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from deviceplugin_api.podresources.v1 import api_pb2 as pr
from deviceplugin_api.podresources.v1 import api_pb2_grpc as pr_grpc
from deviceplugin_api.v1beta1 import api_pb2 as dp
from deviceplugin_api.v1beta1 import api_pb2_grpc as dp_grpc

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
DIAL_TIMEOUT = 10.0


class KubeletError(RuntimeError):
    """What the kubelet would report: admission or registration failures."""


@dataclass
class Allocation:
    pod: str  # namespace/name
    container: str
    resource: str
    device_ids: tuple[str, ...]
    response: dp.ContainerAllocateResponse


@dataclass
class Endpoint:
    """The kubelet's view of one registered resource."""

    resource: str
    socket: str
    options: dp.DevicePluginOptions
    channel: grpc.Channel
    stub: dp_grpc.DevicePluginStub
    devices: dict[str, str] = field(default_factory=dict)
    updates: int = 0
    connected: bool = True


class KubeletSimulator:
    def __init__(
        self,
        plugin_dir: Path,
        pod_resources_socket: Path | None = None,
        use_preferred: bool = True,
        seed: int = 0,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.pod_resources_socket = pod_resources_socket
        # False: never ask GetPreferredAllocation, as a kubelet without that call would not.
        self.use_preferred = use_preferred
        self.registrations: list[str] = []
        self.rejections: list[str] = []
        self.allocations: list[Allocation] = []
        self._endpoints: dict[str, Endpoint] = {}
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None
        self._pod_resources: grpc.Server | None = None
        self._rng = random.Random(seed)

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start as the kubelet does: wipe every socket in the directory, serve kubelet.sock."""
        self.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        for path in self.plugin_dir.iterdir():
            if path.is_socket():
                # The agent may remove its own socket between the look and the unlink (its
                # watch of this directory sees kubelet.sock go): gone is what was wanted.
                path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.plugin_dir / KUBELET_SOCKET}")
        server.start()
        self._server = server
        if self.pod_resources_socket is not None and self._pod_resources is None:
            lister = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), lister)
            lister.add_insecure_port(f"unix://{self.pod_resources_socket}")
            lister.start()
            self._pod_resources = lister

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        with self._changed:
            for endpoint in self._endpoints.values():
                endpoint.connected = False
                endpoint.channel.close()
            self._changed.notify_all()

    def restart(self) -> None:
        """A kubelet restart: streams break, capacity drops to 0, sockets are wiped."""
        self.stop()
        with self._changed:
            for endpoint in self._endpoints.values():
                endpoint.devices = {}
        self.start()

    def close(self) -> None:
        self.stop()
        if self._pod_resources is not None:
            self._pod_resources.stop(grace=None).wait()
            self._pod_resources = None

    # ---- registration (called by the Registration servicer) ---------------------------

    def register(self, request: dp.RegisterRequest) -> None:
        if request.version != VERSION:
            raise KubeletError(f"version {request.version!r} is not supported ({VERSION})")
        domain, _, name = request.resource_name.partition("/")
        if not name or "." not in domain or domain.endswith("kubernetes.io"):
            raise KubeletError(f"{request.resource_name!r} is not an extended resource name")
        socket = self.plugin_dir / request.endpoint
        channel = grpc.insecure_channel(f"unix://{socket}")
        try:
            grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT)
            stub = dp_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(dp.Empty(), timeout=DIAL_TIMEOUT)
        except (grpc.FutureTimeoutError, grpc.RpcError) as failed:
            channel.close()
            raise KubeletError(f"cannot dial {socket}: {failed}") from None
        endpoint = Endpoint(request.resource_name, str(socket), options, channel, stub)
        with self._changed:
            old = self._endpoints.get(request.resource_name)
            if old is not None:  # the newest registration wins
                old.connected = False
                old.channel.close()
            self._endpoints[request.resource_name] = endpoint
            self.registrations.append(request.resource_name)
            self._changed.notify_all()
        threading.Thread(target=self._watch, args=(endpoint,), daemon=True).start()

    def _watch(self, endpoint: Endpoint) -> None:
        try:
            for update in endpoint.stub.ListAndWatch(dp.Empty()):
                with self._changed:
                    endpoint.devices = {d.ID: d.health for d in update.devices}
                    endpoint.updates += 1
                    self._changed.notify_all()
        except (grpc.RpcError, ValueError):
            pass  # ValueError: a restart closed the channel before the stream was opened
        with self._changed:
            # A plugin that disconnects keeps its capacity but no allocatable devices.
            endpoint.connected = False
            endpoint.devices = dict.fromkeys(endpoint.devices, "Unhealthy")
            self._changed.notify_all()

    # ---- what the kubelet knows ------------------------------------------------------

    def endpoint(self, resource: str) -> Endpoint | None:
        with self._changed:
            return self._endpoints.get(resource)

    def resources(self) -> list[str]:
        with self._changed:
            return sorted(self._endpoints)

    def devices(self, resource: str) -> dict[str, str]:
        with self._changed:
            endpoint = self._endpoints.get(resource)
            return dict(endpoint.devices) if endpoint is not None else {}

    def allocatable(self, resource: str) -> int:
        return sum(1 for h in self.devices(resource).values() if h == HEALTHY)

    def free(self, resource: str) -> int:
        """Healthy devices no admitted container holds: what the kubelet can still give."""
        with self._changed:
            held = {d for a in self.allocations if a.resource == resource for d in a.device_ids}
            endpoint = self._endpoints.get(resource)
            devices = endpoint.devices if endpoint is not None else {}
            return sum(1 for d, h in devices.items() if h == HEALTHY and d not in held)

    def wait_for(self, check: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Block until ``check()`` holds (re-evaluated on every kubelet-side change, so the
        condition must be the kubelet's own state); the deadline leaves room for a loaded
        machine."""
        with self._changed:
            return self._changed.wait_for(check, timeout=timeout)

    # ---- admission -------------------------------------------------------------------

    def allocate(self, pod: str, container: str, resource: str, count: int) -> Allocation:
        """Admit one container: choose device IDs like the device manager, call Allocate."""
        with self._changed:
            endpoint = self._endpoints.get(resource)
            if endpoint is None or not endpoint.connected:
                raise KubeletError(f"{resource}: no device plugin registered")
            holders = {
                d: a.pod for a in self.allocations if a.resource == resource for d in a.device_ids
            }
            free = sorted(
                d for d, h in endpoint.devices.items() if h == HEALTHY and d not in holders
            )
            if len(free) < count:
                # The kubelet's words (pkg/kubelet/cm/devicemanager/manager.go,
                # devicesToAllocate), then what a test needs to tell a late release from a
                # plugin that re-registered (its new stream not yet listed) or sick chips.
                unhealthy = sorted(d for d, h in endpoint.devices.items() if h != HEALTHY)
                raise KubeletError(
                    f"requested number of devices unavailable for {resource}. Requested: "
                    f"{count}, Available: {len(free)} (listed {len(endpoint.devices)}, "
                    f"unhealthy {unhealthy}, held by {sorted(set(holders.values()))}, "
                    f"registrations {len(self.registrations)}, stream updates {endpoint.updates})"
                )
        chosen: list[str] = []
        if self.use_preferred and endpoint.options.get_preferred_allocation_available:
            preference = dp.PreferredAllocationRequest(
                container_requests=[
                    dp.ContainerPreferredAllocationRequest(
                        available_deviceIDs=free, allocation_size=count
                    )
                ]
            )
            try:
                answer = endpoint.stub.GetPreferredAllocation(preference, timeout=DIAL_TIMEOUT)
            except grpc.RpcError as failed:
                raise KubeletError(f"GetPreferredAllocation failed: {failed.details()}") from None
            for device in (
                answer.container_responses[0].deviceIDs if answer.container_responses else []
            ):
                if device in free and device not in chosen and len(chosen) < count:
                    chosen.append(device)
        rest = [d for d in free if d not in chosen]
        self._rng.shuffle(rest)  # the kubelet fills from a Go set: effectively random
        chosen += rest[: count - len(chosen)]
        request = dp.AllocateRequest(
            container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)]
        )
        try:
            response = endpoint.stub.Allocate(request, timeout=DIAL_TIMEOUT)
        except grpc.RpcError as failed:
            raise KubeletError(f"UnexpectedAdmissionError: {failed.details()}") from None
        if not response.container_responses:
            raise KubeletError("no containers return in allocation response")
        allocation = Allocation(
            pod, container, resource, tuple(chosen), response.container_responses[0]
        )
        with self._changed:
            self.allocations.append(allocation)
            self._changed.notify_all()
        return allocation

    def release(self, pod: str) -> None:
        with self._changed:
            self.allocations = [a for a in self.allocations if a.pod != pod]
            self._changed.notify_all()

    def pod_resources(self) -> pr.ListPodResourcesResponse:
        by_pod: dict[str, dict[str, list[Allocation]]] = {}
        with self._changed:
            for a in self.allocations:
                by_pod.setdefault(a.pod, {}).setdefault(a.container, []).append(a)
        answer = pr.ListPodResourcesResponse()
        for pod, containers in by_pod.items():
            namespace, _, name = pod.partition("/")
            resources = answer.pod_resources.add(name=name, namespace=namespace)
            for container, allocations in containers.items():
                entry = resources.containers.add(name=container)
                for a in allocations:
                    entry.devices.add(resource_name=a.resource, device_ids=list(a.device_ids))
        return answer


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletSimulator) -> None:
        self._kubelet = kubelet

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:  # noqa: N802
        try:
            self._kubelet.register(request)
        except KubeletError as refused:
            self._kubelet.rejections.append(str(refused))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(refused))
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: KubeletSimulator) -> None:
        self._kubelet = kubelet

    def List(  # noqa: N802
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        return self._kubelet.pod_resources()

    def Get(  # noqa: N802
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        for pod in self._kubelet.pod_resources().pod_resources:
            if (pod.name, pod.namespace) == (request.pod_name, request.pod_namespace):
                return pr.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name}")

    def GetAllocatableResources(  # noqa: N802
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        answer = pr.AllocatableResourcesResponse()
        for resource in self._kubelet.resources():
            healthy = [d for d, h in self._kubelet.devices(resource).items() if h == HEALTHY]
            answer.devices.add(resource_name=resource, device_ids=sorted(healthy))
        return answer
