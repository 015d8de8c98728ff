"""The per-chip, per-node and cluster series of issue 36, over the registries: the values
a known state gives, the label caps, and the names every component exposes."""

from __future__ import annotations

from agent.metrics import AgentMetrics, ChipReadings
from chip_drivers.chips import Chip, NodeChips, VirtualDevice
from dra_driver.metrics import DraMetrics
from infra.metrics import LABEL_CAP, exposition, registry, sample_names
from scheduler_core.engine import locality
from scheduler_core.engine.session import Session
from scheduler_core.service.state.fault_restarts import FaultRestarts
from scheduler_core.service.state.gang_pods import GangPods
from scheduler_core.service.state.gangs import Gangs, NotReserved
from scheduler_core.service.state.holds import WAIT_CLASSES
from scheduler_core.service.views.metrics import (
    ClusterView,
    Metrics,
    NpuNode,
    exclusion_class,
)
from testbed.metric_names import series_names
from tests.unit.helpers import metric, node
from tests.unit.test_fault_restarts import member
from tests.unit.test_gang_holds import FULL, request, wait_for_rest

EIGHT = tuple(Chip(i, i, healthy=i != 3) for i in range(8))


def agent_text(holders: dict[int, str] | None, node: NodeChips, vnpu: bool = False) -> str:
    metrics = AgentMetrics()
    metrics.read(
        ChipReadings("n1", lambda: node, None if holders is None else lambda: holders, vnpu)
    )
    return metrics.text()


def test_each_chip_shows_its_health_whether_it_is_held_and_by_which_pod() -> None:
    node = NodeChips("Ascend910", "module910x8", EIGHT)
    text = agent_text({0: "team-a/train-0", 1: "team-a/train-0"}, node)
    assert metric(text, "ascend_agent_chip_healthy", node="n1", chip="Ascend910-3") == 0
    assert metric(text, "ascend_agent_chip_healthy", node="n1", chip="Ascend910-4") == 1
    assert metric(text, "ascend_agent_chip_allocated", node="n1", chip="Ascend910-1") == 1
    assert metric(text, "ascend_agent_chip_allocated", node="n1", chip="Ascend910-2") == 0
    held = {"node": "n1", "chip": "Ascend910-0", "namespace": "team-a", "pod": "train-0"}
    assert metric(text, "ascend_agent_chip_pod_info", **held) == 1
    assert text.count("ascend_agent_chip_pod_info{") == 2  # one series per held chip
    assert metric(text, "ascend_npu_build_info", component="agent", version="0.1.0") == 1


def test_a_pod_name_is_capped_and_cannot_break_the_exposition() -> None:
    node = NodeChips("Ascend910", "module910x8", EIGHT)
    hostile = 'x"} 1\nevil_metric{a="' + "p" * 400
    text = agent_text({5: f"ns/{hostile}"}, node)
    # The parser reads it back as one label value, cut at the cap: no new series, no markup.
    pods = [line for line in text.splitlines() if line.startswith("ascend_agent_chip_pod_info")]
    assert len(pods) == 1
    assert metric(
        text,
        "ascend_agent_chip_pod_info",
        node="n1",
        chip="Ascend910-5",
        namespace="ns",
        pod=hostile[:LABEL_CAP],
    )
    assert not any(line.startswith("evil_metric") for line in text.splitlines())


def test_without_the_kubernetes_api_only_health_is_shown() -> None:
    text = agent_text(None, NodeChips("Ascend910", "module910x8", EIGHT))
    assert metric(text, "ascend_agent_chip_healthy", node="n1", chip="Ascend910-0") == 1
    assert "ascend_agent_chip_allocated" not in text


def test_a_vnpu_node_shows_the_ai_cores_cut_from_each_chip() -> None:
    chips = tuple(Chip(i, i) for i in range(2))
    cut = (VirtualDevice(100, 0, "vir04"), VirtualDevice(101, 0, "vir02_1c"))
    node = NodeChips("Ascend310P", None, chips, ai_cores=8, vnpus=cut)
    text = agent_text({}, node, vnpu=True)
    cores = "ascend_agent_vnpu_aicores"
    assert metric(text, cores, node="n1", chip="Ascend310P-0", state="allocated") == 6
    assert metric(text, cores, node="n1", chip="Ascend310P-0", state="free") == 2
    assert metric(text, cores, node="n1", chip="Ascend310P-1", state="free") == 8
    assert cores not in agent_text({}, NodeChips("Ascend910", "module910x8", EIGHT))


def scheduler_text(view: ClusterView) -> Metrics:
    metrics = Metrics(lambda: 0, lambda: len(view.nodes))
    metrics.read(lambda: view, 60.0)
    return metrics


def test_the_scheduler_counts_chips_per_node_and_fragmentation_per_product() -> None:
    nodes = [
        NpuNode("whole", "module910x8", tuple(range(8)), frozenset()),
        # 4 held, one unhealthy: its 3 free chips cannot take an 8-chip pod
        NpuNode("part", "module910x8", (0, 1, 2), frozenset({7})),
    ]
    waiting = dict.fromkeys(WAIT_CLASSES, 0) | {"members_missing": 2}
    left_out = {
        "old": "old: DeviceInfo is stale (UpdateTime 1, over 60 s ago)",
        "none": "none: no mindx-dl-deviceinfo-none ConfigMap",
        "down": "down: NodeD reports UnHealthy (CPU 0 00000011 SeparateFault)",
    }
    view = ClusterView(True, nodes, left_out, waiting, 42.5, {"gang_restart": 3})
    text = scheduler_text(view).text()
    chips = "ascend_scheduler_node_chips"
    assert metric(text, chips, node="part", product="module910x8", state="free") == 3
    assert metric(text, chips, node="part", product="module910x8", state="held") == 4
    assert metric(text, chips, node="part", product="module910x8", state="unhealthy") == 1
    assert metric(text, chips, node="whole", product="module910x8", state="free") == 8
    ratio = metric(text, "ascend_scheduler_fragmentation_ratio", product="module910x8")
    assert ratio == 3 / 11
    assert metric(text, "ascend_scheduler_leader") == 1
    assert metric(text, "ascend_scheduler_waiting_gangs", reason="members_missing") == 2
    assert metric(text, "ascend_scheduler_waiting_gangs", reason="network") == 0
    assert metric(text, "ascend_scheduler_oldest_gang_wait_seconds") == 42.5
    assert metric(text, "ascend_scheduler_gang_ttl_seconds") == 60
    excluded = "ascend_scheduler_nodes_excluded"
    assert metric(text, excluded, reason="deviceinfo_stale") == 2
    assert metric(text, excluded, reason="noded") == 1
    assert metric(text, excluded, reason="other") == 0
    restarts = "ascend_scheduler_fault_restarts_total"
    assert metric(text, restarts, kind="gang_restart") == 3
    assert metric(text, restarts, kind="vnpu") == 0
    assert metric(text, "ascend_npu_build_info", component="scheduler", version="0.1.0") == 1


def test_a_decision_is_timed_by_verb_and_kind() -> None:
    metrics = scheduler_text(ClusterView(False, [], {}, {}, 0.0, {}))
    metrics.record("filter", 0.003, False, "gang")
    metrics.vnpu_restarted()
    text = metrics.text()
    assert metric(text, "ascend_scheduler_decision_seconds_count", verb="filter", kind="gang") == 1
    assert metric(text, "ascend_scheduler_fault_restarts_total", kind="vnpu") == 1
    assert metric(text, "ascend_scheduler_leader") == 0


def test_a_left_out_node_is_classed_by_its_reason() -> None:
    assert exclusion_class("n: DeviceInfo ignored: bad CheckCode") == "deviceinfo_malformed"
    assert exclusion_class("n: its DeviceInfo lists Ascend310 chips, …") == "deviceinfo_malformed"
    assert exclusion_class("n: DeviceInfo UpdateTime 9 is over 60 s in the future") == (
        "deviceinfo_stale"
    )
    assert exclusion_class("n's huawei.com/Ascend910 not stable: 8 listed free, 4 idle") == (
        "unready"
    )
    assert exclusion_class("something new") == "other"


def test_dra_failures_are_counted_by_bounded_reason() -> None:
    metrics = DraMetrics()
    metrics.prepared(["", "unhealthy", "taken"])
    text = metrics.text()
    assert metric(text, "ascend_dra_driver_prepares_total", result="error") == 2
    assert metric(text, "ascend_dra_driver_prepare_failures_total", reason="unhealthy") == 1
    assert metric(text, "ascend_dra_driver_prepare_failures_total", reason="checkpoint") == 0


def test_every_component_lists_its_series_names_with_build_info() -> None:
    names = series_names()
    for component in ("agent", "scheduler", "dra-driver"):
        assert "ascend_npu_build_info" in names[component]
    assert {
        "ascend_agent_chip_healthy",
        "ascend_agent_chip_allocated",
        "ascend_agent_chip_pod_info",
        "ascend_agent_vnpu_aicores",
    } <= names["agent"]
    assert {
        "ascend_scheduler_leader",
        "ascend_scheduler_node_chips",
        "ascend_scheduler_decision_seconds_bucket",
        "ascend_scheduler_fault_restarts_total",
    } <= names["scheduler"]
    assert "ascend_dra_driver_prepare_failures_total" in names["dra-driver"]
    # What is listed is what is written: an empty registry lists only the process metrics.
    empty = registry()
    assert all(n.startswith("process_") for n in sample_names(empty))
    assert "process_cpu_seconds_total" in exposition(empty)


def test_a_waiting_gang_is_classed_by_why_it_waits_and_the_oldest_wait_is_kept() -> None:
    gangs = Gangs(ttl=60, hold_limit=100, hold_share=1)
    session = Session([node(f"n{i}", FULL) for i in range(2)])
    wait_for_rest(gangs, session, request("g1", 8, 2, stated=True), now=0)  # 1 of 2 pods
    assert gangs.wait_classes(now=10) == (
        dict.fromkeys(WAIT_CLASSES, 0) | {"members_missing": 1},
        10.0,
    )
    big = request("big", 8, 3, stated=True, namespace="other")  # 3 nodes wanted, 2 exist
    pods = GangPods(pending={big.gang_key: ["big-0", "big-1", "big-2"]})
    network, settings = locality.Network(), locality.Settings()
    answer = gangs.reserve(
        big,
        session=session,
        network=network,
        settings=settings,
        pods=pods,
        fault=None,
        excluded=(),
        now=5,
    )
    assert isinstance(answer, NotReserved)
    counts, oldest = gangs.wait_classes(now=20)
    assert (counts["members_missing"], counts["no_room"], oldest) == (1, 1, 20.0)
    # The namespace's hold ends unused (its limit passed): it backs off, and a gang of it
    # without room then waits as backed off.
    gangs.held_nodes(session, {}, now=21)
    gangs.expire(session, {"ns/g1": ["g1-0"]}, now=150, partial=())  # "other" went
    crowded = request("crowded", 8, 3, stated=True)  # "ns", 3 nodes wanted, 2 exist
    pods = GangPods(pending={crowded.gang_key: ["crowded-0", "crowded-1", "crowded-2"]})
    gangs.reserve(
        crowded,
        session=session,
        network=network,
        settings=settings,
        pods=pods,
        fault=None,
        excluded=(),
        now=151,
    )
    counts, _ = gangs.wait_classes(now=152)
    assert (counts["members_missing"], counts["backoff"], counts["no_room"]) == (1, 1, 0)


def test_restarts_are_counted_by_kind_once_per_job() -> None:
    restarts = FaultRestarts(hold_limit=60, grace_over=900)
    failed = {p.key: p for p in (member(0, "Failed"), member(1, "Failed"))}
    assert len(restarts.retry(failed, lambda job: [], now=1.0)) == 2
    assert restarts.restarted == {"fault_scheduling": 0, "fault_retry": 1}
