"""One node agent, wired from a typed configuration: the CLI and the simulated cluster both
build it here, so what the tests run is what a node runs.

Without the Kubernetes API the device plugin serves the kubelet's own choice. With it: the
node's pod cache, the annotation handshake (``volcano_type``) or the kubelet's choice with
PodResources as the record, the DeviceInfo publisher, the repair loop, the node labels
``servertype`` and ``node.kubernetes.io/npu.chip.name`` and Huawei's node annotations
(agent/node_annotations.py). Collaborators are passed in at construction; nothing is attached
afterwards.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from socket import gethostname
from typing import TYPE_CHECKING

from agent.allocation.base import Allocator
from agent.allocation.cores import CoreHandshake
from agent.allocation.handshake import COMPONENT, WAIT_FOR_POD, ChipHandshake
from agent.allocation.handshake_rules import held_chips
from agent.device_plugin import DevicePlugin
from agent.deviceinfo_publisher import HEARTBEAT, DeviceInfoPublisher
from agent.faults.pipeline import FaultPipeline
from agent.hot_reset import IDLE_SECONDS
from agent.metrics import AgentMetrics, ChipReadings
from agent.node_annotations import annotate_node
from agent.npu_exporter import ExporterReadings, collect
from agent.pod_cache import PodCache
from agent.repair import POD_RESOURCES_SOCKET, RepairLoop, kubelet_devices
from agent.reset_files import ConfigMapFiles, Mirror
from agent.upkeep import HotReset, Upkeep
from chip_drivers.chips import DriverError, NodeChips
from chip_drivers.fake import NpuDriver
from chip_drivers.state import DeviceState
from chip_topology.routing import PRODUCTS
from contract.annotations import SERVER_TYPE_LABEL
from contract.dra import DEFAULT_DRIVER, DRA_NODE_LABEL, SLICE_KIND, slice_name
from contract.objects import node_address
from contract.vnpu import CHIP_NAME_LABEL
from infra.events import EventRecorder, pod_ref
from infra.kube.port import KubeError, KubeGateway, NotFound

if TYPE_CHECKING:
    from infra.http import ProbeServer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """The agent's Kubernetes side."""

    node_name: str
    volcano_type: bool  # containers get the scheduler's chips (the annotation handshake)
    pod_resources_socket: Path = POD_RESOURCES_SOCKET
    wait_for_pod: float = WAIT_FOR_POD
    heartbeat: float = HEARTBEAT  # seconds: DeviceInfo written at least this often
    # Fault codes that make a healthy chip sub-healthy (MindCluster's SubHealthFaultCodes).
    sub_health_codes: frozenset[str] = frozenset()
    # The agent's own pod (namespace, name: the downward API's POD_NAMESPACE, POD_NAME), on
    # which fault Events are recorded; None: no fault Events.
    pod: tuple[str, str] | None = None
    dra_driver: str = DEFAULT_DRIVER  # the DRA driver whose slice of this node rules us out


@dataclass(frozen=True, slots=True)
class AgentConfig:
    plugin_dir: Path
    ascend_runtime: bool  # answer with ASCEND_VISIBLE_DEVICES instead of device nodes
    period: float  # seconds: health polls, DeviceInfo looked at again, repairs
    kube: KubeSettings | None = None  # None: no Kubernetes API, the kubelet's IDs are chips
    metrics_listen: tuple[str, int] | None = None  # HOST, PORT of /metrics, /healthz, /readyz
    preset_virtual: bool = True  # False: dynamic vNPU (310P, npu-core, needs the handshake)
    hot_reset: bool = False  # -hotReset 0 or 2: reset faulty chips by group once idle
    third_party_scan_delay: float = 300.0  # seconds a third party has after a failed reset
    # Seconds a reset group must stay idle before its reset: upstream's fixed 60 s (no flag);
    # only tests shorten it.
    hot_reset_idle: float = IDLE_SECONDS
    # The jobs' reset-config / data-trace ConfigMaps mirrored into host folders
    # (agent/reset_files.py); none: not mirrored.
    reset_mirrors: tuple[Mirror, ...] = ()
    npu_exporter_series: bool = False  # npu-exporter's series too (agent/npu_exporter.py)


@dataclass
class NodeAgent:
    """A running node agent."""

    plugin: DevicePlugin
    metrics: AgentMetrics
    cache: PodCache | None = None
    publisher: DeviceInfoPublisher | None = None
    repair: RepairLoop | None = None
    metrics_server: ProbeServer | None = None
    upkeep: Upkeep | None = None
    cores: CoreHandshake | None = None
    files: ConfigMapFiles | None = None

    def stop(self) -> None:
        if self.files is not None:
            self.files.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.upkeep is not None:
            self.upkeep.stop()
        if self.repair is not None:
            self.repair.stop()
        if self.publisher is not None:
            self.publisher.stop()
        self.plugin.stop()
        if self.cache is not None:
            self.cache.stop()


def check_not_published_by_dra(gateway: KubeGateway, node: str, driver: str) -> None:
    """DriverError when the DRA driver publishes this node's chips: the device plugin must
    not hand them out too. A cluster without DRA's API (before 1.34) has no slice."""
    try:
        published = gateway.get_object(SLICE_KIND, "", slice_name(node, driver))
    except NotFound:
        return
    except KubeError as failed:
        log.warning("could not check for a DRA driver's ResourceSlice of %s: %s", node, failed)
        return
    if (published.get("spec") or {}).get("devices"):
        raise DriverError(
            f"the DRA driver {driver} publishes the chips of node {node} (ResourceSlice "
            f"{slice_name(node, driver)}): run either the device plugin or the DRA driver on "
            f"a node; the label {DRA_NODE_LABEL}=true gives the node to the DRA driver"
        )


def start_node_agent(
    config: AgentConfig, driver: NpuDriver, gateway: KubeGateway | None = None
) -> NodeAgent:
    """Start every part in order; DriverError when the driver cannot be read (nothing is
    left running then)."""
    metrics = AgentMetrics()
    kube = config.kube
    if not config.preset_virtual:
        _check_dynamic(config, driver)
    if kube is not None and gateway is not None:
        check_not_published_by_dra(gateway, kube.node_name, kube.dra_driver)
    if kube is None or gateway is None:
        plugin = DevicePlugin(driver, config.plugin_dir, config.ascend_runtime, metrics=metrics)
        # No pods to read: who holds a chip is not known, only its health.
        metrics.read(ChipReadings(gethostname(), _chips_of(plugin), None, vnpu=False))
        _exporter_series(config, metrics, driver, _chips_of(plugin), None)
        served = _metrics_server(config, plugin)
        _start(plugin, served)
        return NodeAgent(plugin, metrics, metrics_server=served)
    deviceinfo_due = threading.Event()
    files_due = threading.Event()
    cache = PodCache(
        gateway,
        kube.node_name,
        on_change=(deviceinfo_due.set, files_due.set),
        on_api_error=metrics.api_error,
        on_loop_error=metrics.loop_error,
    )
    cache.start()
    host_ip = NodeAddress(gateway, kube.node_name)
    events = EventRecorder(gateway, COMPONENT, kube.node_name)
    allocator: Allocator | None = (
        ChipHandshake(gateway, cache, host_ip, kube.wait_for_pod, events)
        if kube.volcano_type
        else None
    )
    cores = (
        None
        if config.preset_virtual
        else CoreHandshake(gateway, cache, driver, kube.wait_for_pod, events)
    )
    plugin = DevicePlugin(
        driver,
        config.plugin_dir,
        config.ascend_runtime,
        allocator,
        metrics=metrics,
        on_chips_change=(deviceinfo_due.set,),
        cores=cores,
    )
    metrics.read(
        ChipReadings(
            kube.node_name,
            _chips_of(plugin),
            lambda: held_chips(cache.pods()),
            vnpu=not config.preset_virtual,
        )
    )
    _exporter_series(config, metrics, driver, _chips_of(plugin), lambda: held_chips(cache.pods()))
    served = _metrics_server(config, plugin)
    try:
        _start(plugin, served)
    except Exception:
        cache.stop()
        raise
    state = plugin.state
    assert state is not None, "a started device plugin has read its chips"
    label_node(gateway, kube.node_name, state.node)
    annotate_node(gateway, kube.node_name, state.node)
    repair = RepairLoop(
        gateway,
        cache,
        node=lambda: state.node,
        host_ip=host_ip,
        socket=kube.pod_resources_socket,
        period=config.period,
        on_loop_error=metrics.loop_error,
    )
    repair.start()
    faults = FaultPipeline(
        gateway,
        sub_health_codes=kube.sub_health_codes,
        events=events,
        pod=None if kube.pod is None else pod_ref(*kube.pod),
        node=kube.node_name,
    )
    socket, resource = kube.pod_resources_socket, state.node.kind.resource
    reset = (
        HotReset(
            driver,
            cache,
            levels=faults.levels,  # as the publisher's last poll escalated them
            kubelet_devices=lambda: [
                d for ids in kubelet_devices(socket, resource).values() for d in ids
            ],
            gateway=gateway,
            node_name=kube.node_name,
            third_party_scan_delay=config.third_party_scan_delay,
            on_change=deviceinfo_due.set,
            idle_seconds=config.hot_reset_idle,
            events=events,
        )
        if config.hot_reset
        else None
    )
    publisher = DeviceInfoPublisher(
        gateway,
        kube.node_name,
        state=state,
        cache=cache,
        period=config.period,
        heartbeat=kube.heartbeat,
        faults=faults,
        # With the kubelet's choice, its PodResources are the only record of fresh allocations.
        extra_held=None if kube.volcano_type else _kubelet_held(kube.pod_resources_socket, state),
        recovering=(lambda: ()) if reset is None else reset.recovering,
        wake=deviceinfo_due,
        on_api_error=metrics.api_error,
        on_loop_error=metrics.loop_error,
    )
    publisher.start()
    upkeep = None
    if cores is not None or reset is not None:
        upkeep = Upkeep(cores, reset, period=config.period, on_loop_error=metrics.loop_error)
        upkeep.start()
    files = None
    if config.reset_mirrors:
        files = ConfigMapFiles(
            gateway,
            cache,
            config.reset_mirrors,
            period=config.period,
            due=files_due,
            on_api_error=metrics.api_error,
            on_loop_error=metrics.loop_error,
        )
        files.start()
    return NodeAgent(
        plugin, metrics, cache, publisher, repair, served, upkeep=upkeep, cores=cores, files=files
    )


def _exporter_series(
    config: AgentConfig,
    metrics: AgentMetrics,
    driver: NpuDriver,
    chips: Callable[[], NodeChips | None],
    holders: Callable[[], Mapping[int, str]] | None,
) -> None:
    """npu-exporter's series (``--npu-exporter-series``): npu-smi's readings where the
    driver has them (chip_drivers/npu_smi_driver.py ``readings``), else health alone."""
    if config.npu_exporter_series:
        readings = getattr(driver, "readings", None)
        source = ExporterReadings(chips, readings, holders)
        metrics.registry.register(lambda: collect(source))


DYNAMIC_910 = ("Ascend910B-", "Ascend910A3-")  # servertype of the 910s with dynamic vNPU


def _check_dynamic(config: AgentConfig, driver: NpuDriver) -> None:
    """Upstream's start-up refusals of dynamic vNPU (DriverError names the reason)."""
    node = driver.read()
    # 910B (A2) and A3 cut vNPUs too (Ascend/mind-cluster component/ascend-device-plugin
    # pkg/server/manager.go setAscendManager); their servertype says which 910 they are.
    cuts = node.resource == "Ascend310P" or (node.server_type or "").startswith(DYNAMIC_910)
    if not cuts:
        raise DriverError("only 310p, 910a2 and 910a3 support to set presetVirtualDevice false")
    product = PRODUCTS.get(node.product or "")
    if product is not None and product.duo:
        raise DriverError("Atlas 300I Duo is not supported to dynamic virtual instance")
    if config.kube is None or not config.kube.volcano_type:
        raise DriverError("presetVirtualDevice is false, volcanoType should be true")
    if node.ai_cores <= 0:
        raise DriverError("dynamic vNPU: the driver reports no AI-core count per chip")


def _start(plugin: DevicePlugin, served: ProbeServer | None) -> None:
    """Start the plugin (its health endpoints already answer: not ready until registered)."""
    try:
        plugin.start()
    except Exception:
        if served is not None:
            served.stop()
        raise


def _chips_of(plugin: DevicePlugin) -> Callable[[], NodeChips | None]:
    """The chips the driver reported last (None before the plugin has read them)."""
    return lambda: None if plugin.state is None else plugin.state.node


def _metrics_server(config: AgentConfig, plugin: DevicePlugin) -> ProbeServer | None:
    if config.metrics_listen is None:
        return None
    # An HTTP server (http.server, email, html: 1 MiB) only for an agent that serves these
    # endpoints.
    from infra.http import ProbeServer  # noqa: PLC0415

    server = ProbeServer(plugin.metrics.text, lambda: None if plugin.ready() else "not registered")
    server.start(*config.metrics_listen)
    return server


def _kubelet_held(socket: Path, state: DeviceState) -> Callable[[], set[int]]:
    """The chips the kubelet gave to pods (its PodResources), as physical ids."""

    def held() -> set[int]:
        by_device = state.node.by_device_id()
        return {
            by_device[d].id
            for ids in kubelet_devices(socket).values()
            for d in ids
            if d in by_device
        }

    return held


class NodeAddress:
    """The node's InternalIP for the rank table, asked of the API server until it has one: an
    agent started while the API server was away (or before the node had its address) would
    otherwise write rank tables without a host IP for its whole life."""

    def __init__(self, gateway: KubeGateway, node: str) -> None:
        self._gateway = gateway
        self._node = node
        self._address = ""

    def __call__(self) -> str:
        if not self._address:
            try:
                self._address = node_address(self._gateway.get_node(self._node))
            except KubeError as failed:
                log.warning(
                    "node %s: no InternalIP for the rank table yet (%s)", self._node, failed
                )
        return self._address


def node_labels(chips: NodeChips) -> dict[str, str]:
    """The node labels the driver's report gives, as Huawei's device plugin writes them
    (Ascend/mind-cluster component/ascend-device-plugin pkg/server/manager.go
    getNewNodeLabel): ``servertype`` and the chip name ``node.kubernetes.io/npu.chip.name``
    (``910B3``: the scheduler picks a 910B node's vNPU templates by it)."""
    labels = {SERVER_TYPE_LABEL: chips.server_type, CHIP_NAME_LABEL: chips.chip_name}
    return {key: value for key, value in labels.items() if value is not None}


def label_node(gateway: KubeGateway, node: str, chips: NodeChips) -> bool:
    """Set the labels of ``node_labels`` the node lacks (never overwrite an admin's value;
    upstream's plugin rewrites the chip name every time, ours leaves a set one alone as it
    does ``servertype``). True when a label was written."""
    wanted = node_labels(chips)
    if not wanted:
        return False
    try:
        labels = gateway.get_node(node).get("metadata", {}).get("labels") or {}
        missing = {key: value for key, value in wanted.items() if key not in labels}
        if not missing:
            return False
        gateway.patch_node_labels(node, missing)
    except KubeError as failed:
        log.warning("node %s: labels %s not set (%s)", node, ", ".join(sorted(wanted)), failed)
        return False
    return True
