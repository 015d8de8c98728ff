"""Every series name each component exposes, for the checks of what reads them (the alert
rules, the dashboard): each component's metrics object built as its process builds it, with
readings that make every family appear, its registry's names listed (``sample_names``: a
counter's ``_total``, a histogram's ``_bucket``/``_count``/``_sum``)."""

from __future__ import annotations

from agent.metrics import AgentMetrics, ChipReadings
from chip_drivers.chips import Chip, NodeChips, VirtualDevice
from dra_driver.metrics import DraMetrics, Readings
from infra.kube import policies
from infra.metrics import Registry, sample_names
from scheduler_core.service.views.metrics import ClusterView, Metrics, NpuNode

COMPONENTS = ("agent", "scheduler", "dra-driver")


def _agent() -> Registry:
    metrics = AgentMetrics()
    chips = NodeChips(
        "Ascend310P", None, (Chip(0, 0),), ai_cores=8, vnpus=(VirtualDevice(100, 0, "vir04"),)
    )
    metrics.read(ChipReadings("node", lambda: chips, lambda: {0: "ns/pod"}, vnpu=True))
    policies.report(metrics.registry, "ascend_agent", ())
    return metrics.registry


def _scheduler() -> Registry:
    metrics = Metrics(lambda: 0, lambda: 0)
    node = NpuNode("node", "module910x8", (0, 1), frozenset({2}))
    metrics.read(lambda: ClusterView(True, [node], {}, {}, 0.0, {}), 60.0)
    policies.report(metrics.registry, "ascend_scheduler", ())
    return metrics.registry


def _dra_driver() -> Registry:
    metrics = DraMetrics()
    chips = NodeChips("Ascend910", "module910x8", (Chip(0, 0),))
    metrics.read(Readings(lambda: chips, *(lambda: 0,) * 5))
    policies.report(metrics.registry, "ascend_dra_driver", ())
    return metrics.registry


def series_names() -> dict[str, frozenset[str]]:
    """Component (``COMPONENTS``) → the series names a query may use of it."""
    return {
        "agent": sample_names(_agent()),
        "scheduler": sample_names(_scheduler()),
        "dra-driver": sample_names(_dra_driver()),
    }
