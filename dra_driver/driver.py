"""The DRA driver of one node, assembled: chips from the agent's drivers (the fake state file
or npu-smi), the claims' record, the CDI specs, the node's ResourceSlice and the kubelet
plugin, started in that order and stopped in the reverse.

A node runs the device plugin or this driver for its chips, never both (both would hand the
same chip out): the driver refuses to start on a node whose kubelet reports the device
plugin's resource (``huawei.com/Ascend910`` in its capacity), and the agent refuses to serve
a node with a ResourceSlice of this driver (``agent.builder``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from chip_drivers.fake import NpuDriver
from chip_drivers.state import DeviceState
from contract.chip_names import NPU, RESOURCE_DOMAIN
from contract.dra import CLAIM_KIND, DEFAULT_DRIVER, DRA_NODE_LABEL
from contract.objects import Obj
from dra_driver.cdi import NOTHING_FOUND, CdiWriter, HostPaths
from dra_driver.checkpoint import Checkpoint
from dra_driver.metrics import DraMetrics, Readings
from dra_driver.plugin import KubeletPlugin
from dra_driver.preparer import Preparer
from dra_driver.publisher import SlicePublisher
from dra_driver.topology import TorAddress
from infra.http import ProbeServer
from infra.kube.port import KubeGateway

log = logging.getLogger(__name__)


class ServedTwice(RuntimeError):
    """The node's chips are served by the device plugin already (or by this driver, for the
    agent): the message says which and how to choose."""


PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
CDI_ROOT = Path("/var/run/cdi")  # the dynamic specs' directory (/etc/cdi: static ones)


@dataclass(frozen=True, slots=True)
class DraConfig:
    node: str
    driver: str = DEFAULT_DRIVER
    plugins_dir: Path = PLUGINS_DIR
    registry_dir: Path = REGISTRY_DIR
    cdi_root: Path = CDI_ROOT
    ascend_runtime: bool = False  # CDI env edits for the Ascend runtime, else device nodes
    host: HostPaths = NOTHING_FOUND  # what of the paths the CDI specs may name the host has
    ring_free_hint: bool = True  # publish ringFree (the exact-fit ladder's hint)
    metrics_listen: tuple[str, int] | None = None  # HOST, PORT of /metrics, /healthz, /readyz


@dataclass(frozen=True, slots=True)
class Status:
    """What readiness is decided on."""

    registered: bool  # the kubelet accepted the plugin's registration
    published: bool  # the node's ResourceSlice is stored as it should be
    watch_failing_for: float  # seconds the slice watch has failed (0: it is well)


def why_not_ready(status: Status) -> str | None:
    """Ready: the kubelet knows the plugin (it can prepare claims), the scheduler sees the
    node's chips (its slice is published) and the driver sees what happens to that slice
    (its watch is well: a slice the kubelet deletes is published again). None when ready."""
    if not status.registered:
        return "not registered with the kubelet"
    if status.watch_failing_for > 0:
        return f"the ResourceSlice watch has failed for {status.watch_failing_for:.0f} s"
    if not status.published:
        return "the ResourceSlice is not published"
    return None


@dataclass
class DraDriver:
    config: DraConfig
    chips: NpuDriver
    state: DeviceState
    preparer: Preparer
    publisher: SlicePublisher
    plugin: KubeletPlugin
    tor: TorAddress
    metrics: DraMetrics
    metrics_server: ProbeServer | None = None
    metrics_url: str = ""  # where /metrics is served ("" when it is not)

    def status(self) -> Status:
        return Status(
            self.plugin.registered.is_set(),
            self.publisher.published,
            self.publisher.slices.failing_for(),
        )

    def why_not_ready(self) -> str | None:
        return why_not_ready(self.status())

    def stop(self) -> None:
        """Everything stopped, the kubelet plugin first (deregistered, its streams ended);
        bounded: nothing waits for a watch (``SlicePublisher.stop``)."""
        self.plugin.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.tor.stop()
        self.publisher.stop()
        self.chips.close()


def check_not_served_by_the_device_plugin(node_obj: Obj, node: str, resource: str) -> None:
    capacity = (node_obj.get("status") or {}).get("capacity") or {}
    served = f"{RESOURCE_DOMAIN}{resource}"
    if str(capacity.get(served, "0")) not in ("", "0"):
        raise ServedTwice(
            f"node {node} reports {served}: the device plugin serves its chips. Run either the "
            f"device plugin or the DRA driver on a node (the label {DRA_NODE_LABEL}=true picks "
            "the DRA driver's DaemonSet), then restart the kubelet so it forgets the resource."
        )


def start_dra_driver(config: DraConfig, chips: NpuDriver, gateway: KubeGateway) -> DraDriver:
    """Every part started; DriverError when the chips cannot be read, ServedTwice when the
    device plugin serves this node, OSError (``infra.cli.ListenError``) when the metrics
    address cannot be bound (nothing is left running then)."""
    first = chips.read()
    node = gateway.get_node(config.node)
    check_not_served_by_the_device_plugin(node, config.node, first.resource)
    # The node's product comes from its labels when the chip driver names none (a 950 node:
    # the device plugin's accelerator-type, set once from the hardware).
    labels = dict(node.get("metadata", {}).get("labels") or {})
    home = config.plugins_dir / config.driver
    cdi = CdiWriter(
        config.cdi_root,
        config.driver,
        config.ascend_runtime,
        config.host,
        npu_950=first.resource == NPU.name,
    )
    metrics = DraMetrics()

    def republish() -> None:  # the chips or the claims prepared changed (called once started)
        publisher.wake()

    def chips_changed() -> None:  # (called once started)
        plugin.chips_changed()

    preparer = Preparer(
        config.driver,
        config.node,
        read_claim=lambda namespace, name: gateway.get_object(CLAIM_KIND, namespace, name),
        chips=lambda: state.node,
        checkpoint=Checkpoint(home / "checkpoint.json"),
        cdi=cdi,
        labels=labels,
        on_change=republish,
    )
    state = DeviceState(first, on_change=(republish, chips_changed))
    tor = TorAddress(gateway, lambda: publisher.address, republish)
    publisher = SlicePublisher(
        gateway,
        config.driver,
        config.node,
        lambda: state.node,
        preparer.prepared_chips,
        ring_free_hint=config.ring_free_hint,
        tor_ip=tor.tor_ip,
        labels=labels,
        on_watch_error=metrics.watch_failed,
        on_loop_error=metrics.loop_failed,
    )
    plugin = KubeletPlugin(
        config.driver,
        plugins_dir=config.plugins_dir,
        registry_dir=config.registry_dir,
        preparer=preparer,
        state=state,
        pool=config.node,
        metrics=metrics,
    )
    metrics.read(
        Readings(
            chips=lambda: state.node,
            prepared_claims=lambda: len(preparer.prepared()),
            published_devices=publisher.published_devices,
            slice_writes=lambda: publisher.writes,
            slice_write_failures=lambda: publisher.failures,
            registration_refusals=lambda: plugin.refusals,
        )
    )
    driver = DraDriver(config, chips, state, preparer, publisher, plugin, tor, metrics)
    if config.metrics_listen is not None:  # first: an address in use leaves nothing running
        server = ProbeServer(metrics.text, driver.why_not_ready)
        try:
            driver.metrics_url = server.start(*config.metrics_listen)
        except OSError:
            chips.close()
            raise
        driver.metrics_server = server
    chips.watch(state.update)
    publisher.start()
    tor.start()
    try:
        plugin.start()
    except Exception:
        driver.stop()
        raise
    log.info(
        "DRA driver %s on %s: %d chips (%s), %d claims prepared%s",
        config.driver,
        config.node,
        len(first.chips),
        first.product,
        len(preparer.prepared()),
        f"; /metrics, /healthz, /readyz at {driver.metrics_url}" if driver.metrics_url else "",
    )
    return driver
