"""The device plugin of a node: driver → device state → plugin server ↔ kubelet.

It keeps the plugin registered across kubelet restarts. Two signals trigger a re-serve and
re-register: a new ``kubelet.sock`` in the plugin directory (seen with watchdog), and a
ListAndWatch stream that the kubelet closed. One worker thread does the restarts, so bursts
of signals coalesce and a restart never races another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from agent.allocation.base import Allocator
from agent.allocation.kubelet_requests import KubeletChoice
from agent.metrics import AgentMetrics
from agent.plugin_server import KUBELET_SOCKET, PluginServer
from agent.resources import CoreAllocator, plan
from chip_drivers.chips import NodeChips
from chip_drivers.fake import NpuDriver
from chip_drivers.state import DeviceState

log = logging.getLogger(__name__)

FIRST_RETRY = 0.02
MAX_RETRY = 0.5  # keeps re-registration within 1 s of the kubelet coming back


class _KubeletSocketEvents(FileSystemEventHandler):
    def __init__(self, socket: Path, on_created: Any) -> None:
        self._socket = str(socket)
        self._on_created = on_created

    def on_any_event(self, event: FileSystemEvent) -> None:
        created = event.event_type == "created" and str(event.src_path) == self._socket
        moved = event.event_type == "moved" and str(getattr(event, "dest_path", "")) == self._socket
        if created or moved:
            self._on_created()


class DevicePlugin:
    def __init__(
        self,
        driver: NpuDriver,
        plugin_dir: Path,
        ascend_runtime: bool,
        allocator: Allocator | None = None,
        *,
        metrics: AgentMetrics | None = None,
        on_chips_change: Sequence[Callable[[], None]] = (),
        cores: CoreAllocator | None = None,
    ) -> None:
        self.driver = driver
        self._cores = cores  # dynamic vNPU: serve npu-core instead of chips
        self.metrics = metrics or AgentMetrics()
        self._on_chips_change = tuple(on_chips_change)
        self.plugin_dir = plugin_dir
        self.state: DeviceState | None = None
        self.servers: list[PluginServer] = []
        self.registrations = 0
        self._ascend_runtime = ascend_runtime
        self._allocator = allocator or KubeletChoice()
        self._restart = threading.Event()
        self._stopping = threading.Event()
        self._registered = threading.Event()
        self._worker: threading.Thread | None = None
        self._observer: Any = None

    def start(self) -> None:
        node = self.driver.read()
        self._count_chips(node)
        self.state = DeviceState(node, self._on_chips_change)
        # The resources are fixed at start, as upstream's plugin servers are: a vNPU type
        # created later is served after a restart of the agent.
        self.servers = [
            PluginServer(
                self.plugin_dir,
                devices.resource,
                state=self.state,
                devices=devices,
                on_stream_closed=self.request_restart,
                metrics=self.metrics,
            )
            for devices in plan(
                node,
                chips=self._allocator,
                ascend_runtime=self._ascend_runtime,
                cores=self._cores,
            )
        ]
        self.driver.watch(self._on_driver_change)
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        observer = Observer()
        observer.schedule(
            _KubeletSocketEvents(self.plugin_dir / KUBELET_SOCKET, self.request_restart),
            str(self.plugin_dir),
        )
        observer.daemon = True
        observer.start()
        self._observer = observer
        self._restart.set()
        self._worker = threading.Thread(target=self._run, name="agent-register", daemon=True)
        self._worker.start()

    def _count_chips(self, node: NodeChips) -> None:
        healthy = sum(c.healthy for c in node.chips)
        self.metrics.chips_changed(healthy, len(node.chips) - healthy)

    def ready(self) -> bool:
        return self._registered.is_set()

    def _on_driver_change(self, node: NodeChips) -> None:
        if self.state is not None:
            log.info(
                "chips changed: unhealthy %s",
                [node.device_id(c) for c in node.chips if not c.healthy] or "none",
            )
            self._count_chips(node)
            self.state.update(node)

    def request_restart(self) -> None:
        if not self._stopping.is_set():
            self._registered.clear()
            self._restart.set()

    def wait_registered(self, timeout: float) -> bool:
        return self._registered.wait(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._restart.wait()
            if self._stopping.is_set():
                return
            self._restart.clear()
            try:
                self._serve_and_register()
            except Exception:
                self.metrics.loop_error("registration")
                log.exception("serving or registering failed; trying again in %.1f s", MAX_RETRY)
                self._stopping.wait(MAX_RETRY)
                self._restart.set()

    def _serve_and_register(self) -> None:
        for server in self.servers:
            server.serve()
        waiting = list(self.servers)
        delay = FIRST_RETRY
        while waiting and not self._stopping.is_set() and not self._restart.is_set():
            server = waiting[0]
            try:
                server.register()
            except grpc.RpcError as failed:
                log.debug("kubelet not ready (%s), retrying in %.2f s", failed.code(), delay)
                if self._restart.wait(delay) or self._stopping.is_set():
                    return
                delay = min(delay * 2, MAX_RETRY)
                if not server.socket.exists():  # the kubelet wiped it: serve again
                    server.serve()
                continue
            waiting.pop(0)
            self.registrations += 1
            log.info("registered %s with the kubelet", server.resource_name)
        if not waiting:
            self._registered.set()

    def stop(self) -> None:
        """Clean shutdown: stop watching, stop serving, remove our socket."""
        self._stopping.set()
        self._restart.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._worker is not None:
            self._worker.join(timeout=5)
        for server in self.servers:
            server.stop()
        self.driver.close()
