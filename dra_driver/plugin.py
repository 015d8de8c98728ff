"""The kubelet plugin: the DRA service and the registration, each on its own unix socket.

As the Go helper (``k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go``) and
``shared/reference/dra.md`` §2.2–§2.6 describe it:

- the DRA socket ``<plugins>/<driver>/dra.sock`` serves ``DRAPlugin`` of ``dra/v1`` and of
  ``dra/v1beta1`` (kubelets 1.32 and 1.33) from one ``Preparer``, and the health service
  ``v1alpha1.DRAResourceHealth``, streaming every chip's health on each change;
- the registration socket ``<plugins_registry>/<driver>-reg.sock`` is started after it (the
  kubelet dials the endpoint at once) and answers ``GetInfo`` with the services in the order
  the kubelet should pick them (it takes the first it knows: v1 first);
- removing the registration socket is deregistering: ``stop`` removes both, registration
  first. A registration the kubelet reports failed is logged and served again afresh.

A health stream waits for the next change of the chips, the resend interval, its end by the
kubelet or the plugin's stop, whichever comes first: an open stream never holds a stopping
driver (its thread would keep the process alive until the interval ran out).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from chip_drivers.state import DeviceState
from deviceplugin_api.dra.v1 import api_pb2 as v1
from deviceplugin_api.dra.v1 import api_pb2_grpc as v1_grpc
from deviceplugin_api.dra.v1beta1 import api_pb2 as v1beta1
from deviceplugin_api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from deviceplugin_api.dra_health.v1alpha1 import api_pb2 as health
from deviceplugin_api.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from deviceplugin_api.pluginregistration.v1 import api_pb2 as reg
from deviceplugin_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.claims import ClaimRef
from dra_driver.metrics import DraMetrics
from dra_driver.preparer import Outcome, Preparer
from dra_driver.slices import device_name

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
HEALTH_RESEND = 60.0  # seconds: the whole list again even without a change
REREGISTER_AFTER = 5.0  # seconds before a refused registration is offered again
STOP_GRACE = 0.2  # seconds calls in flight may finish when the plugin stops
MAX_MESSAGE = 16 * 1024 * 1024


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in claims]


def _fill(answer: Any, outcome: Outcome) -> None:
    """One claim's entry of a prepare response (either version's message)."""
    answer.error = outcome.error
    for device in outcome.devices:
        answer.devices.add(
            request_names=[device.request],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=list(device.cdi_ids),
        )


class Counted:
    """The preparer, each claim's result counted."""

    def __init__(self, preparer: Preparer, metrics: DraMetrics) -> None:
        self._preparer = preparer
        self._metrics = metrics

    def prepare(self, claims: Any) -> dict[str, Outcome]:
        outcomes = self._preparer.prepare(_refs(claims))
        self._metrics.prepared(o.reason if o.error else "" for o in outcomes.values())
        return outcomes

    def unprepare(self, claims: Any) -> dict[str, str]:
        errors = self._preparer.unprepare(_refs(claims))
        self._metrics.unprepared(errors.values())
        return errors


class DraV1(v1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Counted) -> None:
        self._preparer = preparer

    def NodePrepareResources(  # noqa: N802
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        response = v1.NodePrepareResourcesResponse()
        for uid, outcome in self._preparer.prepare(request.claims).items():
            _fill(response.claims[uid], outcome)
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in self._preparer.unprepare(request.claims).items():
            response.claims[uid].error = error
        return response


class DraV1beta1(v1beta1_grpc.DRAPluginServicer):
    """The same service for kubelets 1.32 and 1.33 (no ``share_id``)."""

    def __init__(self, preparer: Counted) -> None:
        self._preparer = preparer

    def NodePrepareResources(  # noqa: N802
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        response = v1beta1.NodePrepareResourcesResponse()
        for uid, outcome in self._preparer.prepare(request.claims).items():
            _fill(response.claims[uid], outcome)
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        response = v1beta1.NodeUnprepareResourcesResponse()
        for uid, error in self._preparer.unprepare(request.claims).items():
            response.claims[uid].error = error
        return response


class Health(health_grpc.DRAResourceHealthServicer):
    """Every chip's health, the whole list at once, again on each change (the kubelet marks
    a device missing from the list Unknown after a timeout)."""

    def __init__(self, state: DeviceState, pool: str) -> None:
        self._state = state
        self._pool = pool
        # Its own condition, not the DeviceState's: a wait there ends only on a change of
        # the chips or its timeout, and a stop or a stream's end must end it too.
        self._changed = threading.Condition()
        self._version = 0
        self._stopped = False

    def chips_changed(self) -> None:
        """The chips changed (a listener of the DeviceState): every stream sends again."""
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def snapshot(self) -> health.NodeWatchResourcesResponse:
        now = int(time.time())
        answer = health.NodeWatchResourcesResponse()
        for chip in self._state.node.chips:
            codes = ",".join(chip.fault_codes)
            answer.devices.add(
                device=health.DeviceIdentifier(
                    pool_name=self._pool, device_name=device_name(chip.id)
                ),
                health=health.HEALTHY if chip.healthy else health.UNHEALTHY,
                last_updated_time=now,
                message=f"fault codes {codes}"[:1024] if codes else "",
            )
        return answer

    def NodeWatchResources(  # noqa: N802
        self, request: health.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health.NodeWatchResourcesResponse]:
        context.add_callback(self._wake)  # the kubelet hung up, or the server cancelled it
        seen: int | None
        with self._changed:
            seen = self._version
        while seen is not None:
            yield self.snapshot()
            seen = self._next(seen, context)

    def _next(self, seen: int, context: grpc.ServicerContext) -> int | None:
        """The version after a change or the resend interval; None when the stream ends."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._stopped or self._version != seen or not context.is_active(),
                timeout=HEALTH_RESEND,
            )
            return None if self._stopped or not context.is_active() else self._version


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: Path, on_status: Any) -> None:
        self._info = reg.PluginInfo(
            type=PLUGIN_TYPE, name=driver, endpoint=str(endpoint), supported_versions=SERVICES
        )
        self._on_status = on_status

    def GetInfo(  # noqa: N802
        self, request: reg.InfoRequest, context: grpc.ServicerContext
    ) -> reg.PluginInfo:
        return self._info

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self._on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()


def _serve(socket: Path, name: str, add: Any) -> grpc.Server:
    """A gRPC server on a fresh unix socket (a stale file removed first), mode 0600."""
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix=name),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
    )
    add(server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    os.chmod(socket, 0o600)
    return server


class KubeletPlugin:
    def __init__(
        self,
        driver: str,
        *,
        plugins_dir: Path,
        registry_dir: Path,
        preparer: Preparer,
        state: DeviceState,
        pool: str,
        metrics: DraMetrics,
    ) -> None:
        self.driver = driver
        self.dra_socket = plugins_dir / driver / "dra.sock"
        self.registration_socket = registry_dir / f"{driver}-reg.sock"
        self._preparer = Counted(preparer, metrics)
        self._health = Health(state, pool)
        self._dra: grpc.Server | None = None
        self._registration: grpc.Server | None = None
        self.registered = threading.Event()
        self.last_status = ""
        self.refusals = 0
        self._stopping = threading.Event()

    def start(self) -> None:
        """The DRA socket first, then the registration socket the kubelet watches for."""
        preparer, health_service = self._preparer, self._health

        def add_dra(server: grpc.Server) -> None:
            v1_grpc.add_DRAPluginServicer_to_server(DraV1(preparer), server)
            v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1(preparer), server)
            health_grpc.add_DRAResourceHealthServicer_to_server(health_service, server)

        self._dra = _serve(self.dra_socket, "dra", add_dra)
        self._serve_registration()

    def chips_changed(self) -> None:
        self._health.chips_changed()

    def _serve_registration(self) -> None:
        registration = Registration(self.driver, self.dra_socket, self._status)
        self._registration = _serve(
            self.registration_socket,
            "registration",
            lambda server: reg_grpc.add_RegistrationServicer_to_server(registration, server),
        )

    def _status(self, registered: bool, error: str) -> None:
        self.last_status = error
        if registered:
            log.info("registered with the kubelet as %s", self.driver)
            self.registered.set()
            return
        log.error("the kubelet refused the registration of %s: %s", self.driver, error)
        self.refusals += 1
        self.registered.clear()
        threading.Thread(target=self._reregister, name="reregister", daemon=True).start()

    def _reregister(self) -> None:
        """Served again afresh after a while: the kubelet's plugin watcher sees a new socket
        and tries again (at once would be a loop as fast as the kubelet refuses)."""
        if self._stopping.wait(REREGISTER_AFTER) or self._registration is None:
            return
        self._registration.stop(grace=0.1).wait()
        if not self._stopping.is_set():
            self._serve_registration()

    def stop(self) -> None:
        """Deregister (the registration socket goes), then stop serving: both servers given
        the same ``STOP_GRACE`` for the calls in flight (the health streams end at once)."""
        self._stopping.set()
        self._health.stop()
        stopped = []
        for server, socket in (
            (self._registration, self.registration_socket),
            (self._dra, self.dra_socket),
        ):
            if server is not None:
                stopped.append(server.stop(grace=STOP_GRACE))
                socket.unlink(missing_ok=True)
        for done in stopped:
            done.wait()
        self._registration = self._dra = None
