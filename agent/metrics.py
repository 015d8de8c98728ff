"""The agent's Prometheus metrics and health endpoints (``--metrics-listen HOST:PORT``).

``/metrics``: allocations, allocation failures by reason, chips by health, Kubernetes API
errors, and an Allocate latency histogram; per chip (``chip_families``, read at each
scrape from the chips the driver reported last and the pods of the node's pod cache, so a
scrape costs O(chips + the node's pods), at most 16 chips): its health, whether a pod holds it
and which (``ascend_agent_chip_pod_info``, as DCGM's exporter labels a GPU's pod), and on vNPU
nodes the AI cores cut from it. ``/healthz``: the process answers. ``/readyz``: registered
with the kubelet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agent.allocation.base import FailureReason
from chip_drivers.chips import NodeChips
from contract.vnpu import CORE_SPECS
from infra.metrics import (
    LATENCY_BUCKETS,
    Counter,
    Family,
    Gauge,
    Histogram,
    build_info,
    capped,
    exposition,
    registry,
)

COMPONENT = "agent"


@dataclass(frozen=True, slots=True)
class ChipReadings:
    """What the per-chip series are read from at each scrape: the node's name, its chips as
    the driver reported them last, chip id → the key (``namespace/name``) of the pod holding
    it (None: not known, an agent without the Kubernetes API), and whether the node cuts vNPUs
    from its chips on demand (dynamic vNPU; a node whose driver reports vNPUs shows them too)."""

    node: str
    chips: Callable[[], NodeChips | None]
    holders: Callable[[], Mapping[int, str]] | None
    vnpu: bool


def _cores(template: str) -> int:
    """A vNPU template's AI cores (``vir04`` → ``4c`` → 4)."""
    return int(CORE_SPECS[template].split(".")[0].removesuffix("c"))


def chip_families(
    node_name: str, node: NodeChips | None, holders: Mapping[int, str] | None, vnpu: bool
) -> Iterable[Family]:
    """The per-chip series of one node: ``chip`` is the device's name (``Ascend910-3``)."""
    named = (
        []
        if node is None
        else [(chip, (("node", node_name), ("chip", node.device_id(chip)))) for chip in node.chips]
    )
    yield Family(
        "ascend_agent_chip_healthy",
        "gauge",
        "1 while the chip is healthy, 0 while the driver reports it unhealthy.",
        [("", labels, float(chip.healthy)) for chip, labels in named],
    )
    if holders is not None:
        yield Family(
            "ascend_agent_chip_allocated",
            "gauge",
            "1 while a pod holds the chip, 0 while it is free.",
            [("", labels, float(chip.id in holders)) for chip, labels in named],
        )
        info = []
        for chip, labels in named:
            if chip.id in holders:
                namespace, _, pod = holders[chip.id].partition("/")
                info.append(
                    ("", (*labels, ("namespace", capped(namespace)), ("pod", capped(pod))), 1.0)
                )
        yield Family(
            "ascend_agent_chip_pod_info",
            "gauge",
            "1 for each chip a pod holds, the pod and its namespace as labels.",
            info,
        )
    if node is not None and (vnpu or node.vnpus):
        cut: dict[int, int] = {}
        for device in node.vnpus:
            cut[device.phy] = cut.get(device.phy, 0) + _cores(device.template)
        samples = []
        for chip, labels in named:
            allocated = min(cut.get(chip.id, 0), node.ai_cores)
            samples.append(("", (*labels, ("state", "allocated")), float(allocated)))
            samples.append(("", (*labels, ("state", "free")), float(node.ai_cores - allocated)))
        yield Family(
            "ascend_agent_vnpu_aicores",
            "gauge",
            "AI cores of each chip cut into vNPUs (allocated) and left (free).",
            samples,
        )


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = registry()
        build_info(self.registry, COMPONENT)
        self._allocations = Counter(
            "ascend_agent_allocations", "Allocate calls answered.", registry=self.registry
        )
        self._failures = Counter(
            "ascend_agent_allocation_failures",
            "Allocate calls refused, by reason.",
            ["reason"],
            registry=self.registry,
        )
        for reason in FailureReason:  # every reason shows, at 0 until it happens
            self._failures.labels(reason.value)
        self._api_errors = Counter(
            "ascend_agent_api_errors",
            "Kubernetes API calls of the agent's loops that failed.",
            registry=self.registry,
        )
        self._loop_errors = Counter(
            "ascend_agent_loop_errors",
            "Unexpected failures a background loop survived, by loop.",
            ["loop"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "ascend_agent_allocate_seconds",
            "Time to answer an Allocate call.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._chips = Gauge(
            "ascend_agent_chips",
            "Chips of this node by health.",
            ["health"],
            registry=self.registry,
        )

    def allocated(self, seconds: float) -> None:
        self._allocations.inc()
        self._latency.observe(seconds)

    def failed(self, reason: FailureReason, seconds: float) -> None:
        self._failures.labels(reason.value).inc()
        self._latency.observe(seconds)

    def read(self, readings: ChipReadings) -> None:
        """Report the per-chip series (once the chips can be read)."""
        self.registry.register(
            lambda: chip_families(
                readings.node,
                readings.chips(),
                None if readings.holders is None else readings.holders(),
                readings.vnpu,
            )
        )

    def chips_changed(self, healthy: int, unhealthy: int) -> None:
        self._chips.labels("Healthy").set(healthy)
        self._chips.labels("Unhealthy").set(unhealthy)

    def api_error(self) -> None:
        self._api_errors.inc()

    def loop_error(self, loop: str) -> None:
        self._loop_errors.labels(loop).inc()

    def text(self) -> str:
        return exposition(self.registry)
