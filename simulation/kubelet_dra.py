"""The kubelet's DRA side, for tests and the demo: registration of DRA plugins, prepare before
a pod's sandbox, unprepare after its containers, the wipe of a node's ResourceSlices, and a
CRI stub that applies the CDI specs the plugin wrote. Real gRPC over unix sockets.

Written from Kubernetes 1.35's kubelet (``pkg/kubelet/pluginmanager/operationexecutor/
operation_generator.go``, ``pkg/kubelet/cm/dra/manager.go``, ``plugin/dra_plugin_manager.go``,
``plugin/dra_plugin.go``) as ``shared/reference/dra.md`` §2.2–§2.5 and §8 describe them:

- a socket appearing in ``plugins_registry`` is dialled (10 s), asked ``GetInfo`` (1 s); a
  type other than ``DRAPlugin``, an endpoint already registered or no DRA service the
  kubelet knows (it takes the first of the plugin's list among ``v1.DRAPlugin``,
  ``v1beta1.DRAPlugin``) is answered ``NotifyRegistrationStatus(false, why)``, else true;
  the socket removed is the plugin deregistered;
- at start, every ResourceSlice of the node is deleted; a driver with no plugin registered
  for ``wipe_delay`` (30 s) loses its slices;
- prepare: each of the pod's claims read from the API server (a template's through
  ``pod.status.resourceClaimStatuses``), the pod checked in ``reservedFor``, each driver's
  plugin registered, the claims recorded before the call, one ``NodePrepareResources`` per
  driver with every claim of the pod not prepared yet (45 s), an answer missing a claim or
  carrying an error failing the pod's start; the devices recorded;
- a container gets the CDI IDs of the devices whose ``request_names`` are empty or name the
  request it lists; the CRI stub resolves them in the spec files and fails on an unknown ID,
  an unknown version or field;
- unprepare once no pod on the node uses the claim.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from contract.dra import CLAIM_KIND, SLICE_KIND
from contract.objects import Obj
from deviceplugin_api.dra.v1 import api_pb2 as v1
from deviceplugin_api.dra.v1 import api_pb2_grpc as v1_grpc
from deviceplugin_api.dra.v1beta1 import api_pb2 as v1beta1
from deviceplugin_api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from deviceplugin_api.pluginregistration.v1 import api_pb2 as reg
from deviceplugin_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from infra.kube.port import NotFound, Selection

log = logging.getLogger(__name__)

KNOWN_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # servicesSupportedByKubelet
DIAL_TIMEOUT, INFO_TIMEOUT, NOTIFY_TIMEOUT, CALL_TIMEOUT = 10.0, 1.0, 5.0, 45.0
WIPE_DELAY = 30.0
CDI_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
CDI_EDIT_FIELDS = frozenset({"env", "deviceNodes", "mounts", "hooks", "additionalGIDs"})


class ClaimStore(Protocol):
    """What the kubelet's DRA side reads and deletes: the in-memory cluster, or a real API
    server (``testbed.dra.ApiStore``)."""

    def get_object(self, kind: str, namespace: str, name: str) -> Obj: ...

    def delete_collection(self, what: Selection) -> int: ...


class PrepareFailed(RuntimeError):
    """What the kubelet reports as ``FailedPrepareDynamicResources`` (the pod does not start)."""


@dataclass
class Plugin:
    driver: str
    endpoint: str
    service: str
    channel: grpc.Channel


@dataclass
class ClaimInfo:
    """The kubelet's record of one claim (its ``dra_manager_state``)."""

    namespace: str
    name: str
    uid: str
    driver: str
    pods: set[str] = field(default_factory=set)
    prepared: bool = False
    devices: list[tuple[tuple[str, ...], str]] = field(default_factory=list)  # (requests, CDI ID)


@dataclass(frozen=True, slots=True)
class Container:
    """What the runtime gives a container from its CDI devices."""

    cdi_ids: tuple[str, ...]
    env: Mapping[str, str]
    device_nodes: tuple[str, ...]  # container paths
    mounts: tuple[Obj, ...] = ()  # the CDI mounts: hostPath, containerPath, type, options


class _Registry(FileSystemEventHandler):
    def __init__(self, kubelet: KubeletDra) -> None:
        self._kubelet = kubelet

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = Path(str(getattr(event, "dest_path", "") or event.src_path))
        if event.event_type in ("created", "moved") and path.name.endswith(".sock"):
            self._kubelet.socket_appeared(path)
        elif event.event_type == "deleted" and str(event.src_path).endswith(".sock"):
            self._kubelet.socket_gone(Path(str(event.src_path)))


class KubeletDra:
    def __init__(
        self,
        node: str,
        registry_dir: Path,
        store: ClaimStore,
        cdi_root: Path,
        *,
        wipe_delay: float = WIPE_DELAY,
        services: tuple[str, ...] = KNOWN_SERVICES,
    ) -> None:
        self.node = node
        self.services = services  # a 1.33 kubelet knows v1beta1.DRAPlugin only
        self.registry_dir = registry_dir
        self.store = store
        self.cdi_root = cdi_root
        self.wipe_delay = wipe_delay
        self._lock = threading.RLock()
        self.plugins: dict[str, Plugin] = {}  # registration socket → plugin
        self.refused: dict[str, str] = {}  # registration socket → why
        self.claims: dict[str, ClaimInfo] = {}  # claim UID → its record (kept over restarts)
        self.wiped = 0
        self._observer: Any = None
        self._wipes: dict[str, threading.Timer] = {}

    # ---- life ------------------------------------------------------------------------

    def start(self) -> None:
        """Start as the kubelet does: the node's slices wiped, the registry watched, the
        sockets already there registered."""
        self.wiped += self.store.delete_collection(
            Selection(SLICE_KIND, fields=f"spec.nodeName={self.node}")
        )
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        observer = Observer()
        observer.schedule(_Registry(self), str(self.registry_dir))
        observer.daemon = True
        observer.start()
        self._observer = observer
        for socket in sorted(self.registry_dir.glob("*.sock")):
            self.socket_appeared(socket)

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
        with self._lock:
            for timer in self._wipes.values():
                timer.cancel()
            self._wipes.clear()
            for plugin in self.plugins.values():
                plugin.channel.close()
            self.plugins.clear()

    def restart(self) -> None:
        """The kubelet restarts: its claim records stay (a checkpoint), its plugins register
        again, the node's slices are wiped."""
        self.stop()
        self.start()

    # ---- registration ----------------------------------------------------------------

    def socket_appeared(self, socket: Path) -> None:
        with self._lock:
            if str(socket) in self.plugins:
                return
            try:
                plugin = self._register(socket)
            except (grpc.RpcError, RegistrationRefused) as failed:
                self.refused[str(socket)] = str(failed)
                log.warning("plugin %s not registered: %s", socket, failed)
                return
            self.plugins[str(socket)] = plugin
            self.refused.pop(str(socket), None)
            timer = self._wipes.pop(plugin.driver, None)
            if timer is not None:
                timer.cancel()

    def _register(self, socket: Path) -> Plugin:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT)
            stub = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(reg.InfoRequest(), timeout=INFO_TIMEOUT)
            why = self._validate(info)
            stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=not why, error=why),
                timeout=NOTIFY_TIMEOUT,
            )
        if why:
            raise RegistrationRefused(why)
        endpoint = info.endpoint or str(socket)
        service = next(s for s in info.supported_versions if s in self.services)
        return Plugin(info.name, endpoint, service, grpc.insecure_channel(f"unix://{endpoint}"))

    def _validate(self, info: reg.PluginInfo) -> str:
        if info.type != "DRAPlugin":
            return f"plugin type {info.type!r} is not handled here"
        if not any(s in self.services for s in info.supported_versions):
            return f"none of {list(info.supported_versions)} is a DRA service this kubelet knows"
        endpoint = info.endpoint
        if any(p.endpoint == endpoint for p in self.plugins.values()):
            return f"endpoint {endpoint} is registered already"
        return ""

    def socket_gone(self, socket: Path) -> None:
        """The registration socket removed: the plugin deregistered; its driver's slices
        go when no plugin of it comes back within the wipe delay."""
        with self._lock:
            plugin = self.plugins.pop(str(socket), None)
            if plugin is None:
                return
            plugin.channel.close()
            if any(p.driver == plugin.driver for p in self.plugins.values()):
                return
            timer = threading.Timer(self.wipe_delay, self._wipe_driver, (plugin.driver,))
            timer.daemon = True
            self._wipes[plugin.driver] = timer
            timer.start()

    def _wipe_driver(self, driver: str) -> None:
        with self._lock:
            self._wipes.pop(driver, None)
            if any(p.driver == driver for p in self.plugins.values()):
                return
        self.wiped += self.store.delete_collection(
            Selection(SLICE_KIND, fields=f"spec.nodeName={self.node},spec.driver={driver}")
        )

    def plugin(self, driver: str) -> Plugin | None:
        with self._lock:
            return next((p for p in reversed(self.plugins.values()) if p.driver == driver), None)

    # ---- pods ------------------------------------------------------------------------

    def prepare(self, pod: Obj) -> dict[str, Container]:
        """Before the pod's sandbox: its claims prepared; each container's CDI devices as
        the runtime applies them. PrepareFailed says why the pod cannot start."""
        meta = pod["metadata"]
        key, pod_uid = f"{meta['namespace']}/{meta['name']}", meta["uid"]
        infos = {}
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = self._claim_name(pod, entry)
            try:
                claim = self.store.get_object(CLAIM_KIND, meta["namespace"], name)
            except NotFound:
                raise PrepareFailed(f"{key}: ResourceClaim {name} not found") from None
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not any(r.get("uid") == pod_uid for r in reserved):
                raise PrepareFailed(f"pod {key} is not allowed to use ResourceClaim {name}")
            results = claim["status"]["allocation"]["devices"]["results"]
            for driver in sorted({r["driver"] for r in results}):
                if self.plugin(driver) is None:
                    raise PrepareFailed(f"DRA driver {driver} is not registered")
                with self._lock:
                    info = self.claims.setdefault(
                        claim["metadata"]["uid"],
                        ClaimInfo(meta["namespace"], name, claim["metadata"]["uid"], driver),
                    )
                    info.pods.add(pod_uid)  # recorded before the plugin is called
                infos[entry["name"]] = info
        by_driver: dict[str, list[ClaimInfo]] = {}
        for info in infos.values():
            if not info.prepared:
                by_driver.setdefault(info.driver, []).append(info)
        for driver, claims in sorted(by_driver.items()):
            self._call_prepare(driver, claims)
        return {
            c["name"]: self._container(c, infos)
            for c in (pod.get("spec") or {}).get("containers") or []
        }

    @staticmethod
    def _claim_name(pod: Obj, entry: Obj) -> str:
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("name") == entry["name"] and status.get("resourceClaimName"):
                return str(status["resourceClaimName"])
        raise PrepareFailed(f"claim {entry['name']} of the pod has no ResourceClaim yet")

    def _service(self, driver: str) -> tuple[Any, Any]:
        """The messages and the stub of the DRA service version the driver registered."""
        plugin = self.plugin(driver)
        if plugin is None:
            raise PrepareFailed(f"DRA driver {driver} is not registered")
        if plugin.service == "v1.DRAPlugin":
            return v1, v1_grpc.DRAPluginStub(plugin.channel)
        return v1beta1, v1beta1_grpc.DRAPluginStub(plugin.channel)

    def _call_prepare(self, driver: str, claims: list[ClaimInfo]) -> None:
        api, stub = self._service(driver)
        request = api.NodePrepareResourcesRequest(claims=_claims(api, claims))
        try:
            response = stub.NodePrepareResources(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as failed:
            raise PrepareFailed(f"NodePrepareResources of {driver}: {failed.details()}") from None
        asked = {c.uid for c in claims}
        if unknown := set(response.claims) - asked:
            raise PrepareFailed(f"{driver} answered for claims it was not asked: {sorted(unknown)}")
        for info in claims:
            if info.uid not in response.claims:
                raise PrepareFailed(f"{driver} did not answer for claim {info.name}")
            answer = response.claims[info.uid]
            if answer.error:
                raise PrepareFailed(f"claim {info.namespace}/{info.name}: {answer.error}")
            with self._lock:
                info.devices = [
                    (tuple(d.request_names), cdi)
                    for d in answer.devices
                    for cdi in d.cdi_device_ids
                ]
                info.prepared = True

    def _container(self, container: Obj, infos: Mapping[str, ClaimInfo]) -> Container:
        ids: list[str] = []
        for wanted in (container.get("resources") or {}).get("claims") or []:
            info = infos.get(wanted["name"])
            if info is None:
                raise PrepareFailed(f"container {container['name']}: no claim {wanted['name']}")
            request = wanted.get("request")
            ids += [i for names, i in info.devices if not names or request in (None, *names)]
        env: dict[str, str] = {}
        nodes: list[str] = []
        mounts: dict[str, Obj] = {}  # by container path: a spec's common edits come once
        for edits in cdi_edits(self.cdi_root, ids):
            for item in edits.get("env") or []:
                name, _, value = item.partition("=")
                env[name] = value
            nodes += [d["path"] for d in edits.get("deviceNodes") or []]
            mounts.update((m["containerPath"], m) for m in edits.get("mounts") or [])
        return Container(tuple(ids), env, tuple(dict.fromkeys(nodes)), tuple(mounts.values()))

    def unprepare(self, pod: Obj) -> None:
        """After the pod's containers stopped: its claims unprepared where no other pod on
        the node uses them."""
        pod_uid = pod["metadata"]["uid"]
        by_driver: dict[str, list[ClaimInfo]] = {}
        with self._lock:
            for info in self.claims.values():
                if pod_uid in info.pods:
                    info.pods.discard(pod_uid)
                    if not info.pods:
                        by_driver.setdefault(info.driver, []).append(info)
        for driver, claims in sorted(by_driver.items()):
            api, stub = self._service(driver)
            request = api.NodeUnprepareResourcesRequest(claims=_claims(api, claims))
            response = stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT)
            for info in claims:
                entry = response.claims.get(info.uid)
                if entry is None or entry.error:
                    why = "no answer" if entry is None else entry.error
                    raise PrepareFailed(f"unprepare of claim {info.name}: {why}")
                with self._lock:
                    self.claims.pop(info.uid, None)


class RegistrationRefused(RuntimeError):
    pass


def _claims(api: Any, claims: list[ClaimInfo]) -> list[Any]:
    return [api.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


def cdi_edits(root: Path, device_ids: list[str]) -> list[Obj]:
    """The container edits of each CDI device (its spec's common edits first), as the
    runtime's CDI cache resolves fully qualified IDs ``vendor/class=name`` in the spec files
    of ``root``; PrepareFailed on an unknown ID or a spec it cannot load."""
    specs: dict[str, list[Obj]] = {}
    if root.is_dir():
        for path in sorted(root.glob("*.json")):
            spec = json.loads(path.read_text())
            if spec.get("cdiVersion") not in CDI_VERSIONS:
                raise PrepareFailed(f"{path.name}: cdiVersion {spec.get('cdiVersion')!r}")
            specs.setdefault(spec["kind"], []).append(spec)
    edits: list[Obj] = []
    for device_id in device_ids:
        kind, _, name = device_id.partition("=")
        found = [
            (spec, device)
            for spec in specs.get(kind, [])
            for device in spec.get("devices") or []
            if device.get("name") == name
        ]
        if not found:
            raise PrepareFailed(f"unresolvable CDI device {device_id}")
        spec, device = found[0]
        for candidate in (spec.get("containerEdits") or {}, device.get("containerEdits") or {}):
            if unknown := set(candidate) - CDI_EDIT_FIELDS:
                raise PrepareFailed(f"CDI device {device_id}: unknown fields {sorted(unknown)}")
            edits.append(candidate)
    return edits
