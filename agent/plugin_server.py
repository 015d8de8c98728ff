"""The device-plugin gRPC server of one resource, and its registration with the kubelet.

The servicer never talks to a driver: it reads ``DeviceState`` (fed by the driver's
change callback) and asks an ``Allocator`` which chips a container really gets, so the
annotation handshake can replace the kubelet's choice without touching this module.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Generator
from concurrent import futures
from pathlib import Path

import grpc

from agent.allocation.base import AllocationFailed, InvalidRequest
from agent.metrics import AgentMetrics
from agent.resources import Devices
from chip_drivers.state import DeviceState
from contract.chip_names import RESOURCE_DOMAIN
from deviceplugin_api.v1beta1 import api_pb2 as dp
from deviceplugin_api.v1beta1 import api_pb2_grpc as dp_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
MAX_MESSAGE = 4 * 1024 * 1024  # Huawei's plugin: max receive 4 MiB
STOP_GRACE = 0.05  # lets an in-flight Allocate answer; a restart must stay well under 1 s


class DevicePluginService(dp_grpc.DevicePluginServicer):
    def __init__(
        self,
        state: DeviceState,
        devices: Devices,
        on_stream_closed: Callable[[], None],
        metrics: AgentMetrics | None = None,
    ) -> None:
        self._state = state
        self._devices = devices
        self._on_stream_closed = on_stream_closed
        self._metrics = metrics or AgentMetrics()
        self._stopping = threading.Event()
        self._allocate_lock = threading.Lock()

    def stop(self) -> None:
        self._stopping.set()
        self._state.wake()

    def GetDevicePluginOptions(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Generator[dp.ListAndWatchResponse, None, None]:
        # The first list is inside the try: grpc drops the generator at the yield whose send
        # found the caller gone (grpcio's grpc/_server.py,
        # _send_message_callback_to_blocking_iterator_adapter), so a kubelet gone right after
        # its first list is noticed only if that yield too is covered.
        try:
            version, node = self._state.wait_change(-1, timeout=0)
            yield dp.ListAndWatchResponse(devices=self._devices.listed(node))
            while context.is_active() and not self._stopping.is_set():
                new_version, node = self._state.wait_change(version, timeout=0.5)
                if new_version != version and not self._stopping.is_set():
                    version = new_version
                    yield dp.ListAndWatchResponse(devices=self._devices.listed(node))
        finally:
            if not self._stopping.is_set():
                log.info("ListAndWatch stream closed by the kubelet")
                self._on_stream_closed()

    def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        node = self._state.node
        answer = dp.PreferredAllocationResponse()
        try:
            for i, c in enumerate(request.container_requests):
                what = f"preferred allocation request {i}"
                if not 0 < c.allocation_size <= len(c.available_deviceIDs):
                    raise InvalidRequest(
                        f"{what}: allocation_size {c.allocation_size} with "
                        f"{len(c.available_deviceIDs)} available devices"
                    )
                chosen = self._devices.preferred(
                    node,
                    list(c.available_deviceIDs),
                    list(c.must_include_deviceIDs),
                    c.allocation_size,
                )
                answer.container_responses.add(deviceIDs=chosen)
        except InvalidRequest as bad:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(bad))
        return answer

    def Allocate(  # noqa: N802
        self, request: dp.AllocateRequest, context: grpc.ServicerContext
    ) -> dp.AllocateResponse:
        node = self._state.node
        answer = dp.AllocateResponse()
        start = time.perf_counter()
        try:
            with self._allocate_lock:  # one decision at a time per resource on this node
                answer = self._devices.answer(request, node)
        except (InvalidRequest, AllocationFailed) as failed:
            log.warning("Allocate failed: %s", failed, extra={"reason": failed.reason.value})
            self._metrics.failed(failed.reason, time.perf_counter() - start)
            code = (
                grpc.StatusCode.INVALID_ARGUMENT
                if isinstance(failed, InvalidRequest)
                else grpc.StatusCode.FAILED_PRECONDITION
            )
            context.abort(code, str(failed))
        self._metrics.allocated(time.perf_counter() - start)
        return answer

    def PreStartContainer(  # noqa: N802
        self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()


class PluginServer:
    """Serves one resource on ``<plugin_dir>/<resource>.sock`` and registers it."""

    def __init__(
        self,
        plugin_dir: Path,
        resource: str,
        *,
        state: DeviceState,
        devices: Devices,
        on_stream_closed: Callable[[], None],
        metrics: AgentMetrics | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self._metrics = metrics
        self.resource = resource
        self.socket = plugin_dir / f"{resource}.sock"
        self._state = state
        self._devices = devices
        self._on_stream_closed = on_stream_closed
        self._server: grpc.Server | None = None
        self._service: DevicePluginService | None = None

    @property
    def resource_name(self) -> str:
        return f"{RESOURCE_DOMAIN}{self.resource}"

    def serve(self) -> None:
        """Serve on a fresh socket (an old file is removed first), mode 0600. The old server
        stops at once: its kubelet is gone and so is any caller it could still answer."""
        self.stop(grace=None)
        self.socket.unlink(missing_ok=True)
        self._service = DevicePluginService(
            self._state,
            self._devices,
            self._on_stream_closed,
            self._metrics,
        )
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix=self.resource),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
        )
        dp_grpc.add_DevicePluginServicer_to_server(self._service, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        os.chmod(self.socket, 0o600)
        self._server = server

    def register(self, timeout: float = 5.0) -> None:
        """One Register call; grpc.RpcError when the kubelet is not there or refuses."""
        with grpc.insecure_channel(f"unix://{self.plugin_dir / KUBELET_SOCKET}") as channel:
            dp_grpc.RegistrationStub(channel).Register(
                dp.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource_name,
                    options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=timeout,
                wait_for_ready=False,
            )

    def stop(self, grace: float | None = STOP_GRACE) -> None:
        if self._service is not None:
            self._service.stop()
        if self._server is not None:
            self._server.stop(grace=grace).wait()
            self._server = None
            self.socket.unlink(missing_ok=True)
