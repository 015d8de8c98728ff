"""The extender's verbs as kube-scheduler calls them, against the in-memory store."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent.deviceinfo_publisher import configmap
from contract.annotations import PREDICATE_TIME
from contract.deviceinfo import ChipFault, DeviceInfo
from contract.pods import pod_view
from infra.kube.port import KubeError
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.state import live_view
from scheduler_core.service.state.cluster_view import NodeView
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.wire import ExtenderFilterResult, HostPriority, normalize
from simulation.memory import MemoryCluster, pod_object


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def add_node(
    api: MemoryCluster,
    name: str,
    unhealthy: frozenset[int] = frozenset(),
    *,
    address: str = "",
    super_pod: int | None = None,
) -> None:
    healthy = str(8 - len(unhealthy))
    api.put(
        "Node",
        {
            "metadata": {"name": name, "labels": {}},
            "status": {
                "capacity": {"huawei.com/Ascend910": "8"},
                "allocatable": {"huawei.com/Ascend910": healthy},
                "addresses": [{"type": "InternalIP", "address": address}] if address else [],
            },
        },
    )
    info = DeviceInfo(
        frozenset(range(8)) - unhealthy,
        unhealthy,
        frozenset(),
        update_time=1_700_000_000,
        super_pod_id=super_pod,
    )
    api.put("ConfigMap", configmap(name, info))


def pending(
    api: MemoryCluster, name: str, npu: int, gang: str | None = None, size: int = 0
) -> dict[str, Any]:
    pod = pod_object("ns", name, None, npu)
    if gang:
        pod["metadata"]["labels"] = {"ascend.npu/gang": gang}
        pod["metadata"]["annotations"]["ascend.npu/gang-size"] = str(size)
    api.put("Pod", pod)
    return api.get_pod("ns", name)


def schedule(extender: Extender, pod: dict[str, Any], names: list[str]) -> str | None:
    """kube-scheduler's part: filter, prioritize, the best node, bind."""
    passing = extender.filter({"Pod": pod, "NodeNames": names}).NodeNames
    if not passing:
        return None
    scores = extender.prioritize({"Pod": pod, "NodeNames": passing})
    best = str(max(scores, key=lambda s: s.Score).Host)
    meta = pod["metadata"]
    answer = extender.bind(
        {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": best,
        }
    )
    assert answer.Error == "", answer
    return best


class Harness:
    def __init__(self, nodes: int, **kw: float) -> None:
        self.api = MemoryCluster()
        self.clock = Clock()
        for i in range(nodes):
            add_node(self.api, f"n{i}")
        self.extender = Extender(self.api, clock=self.clock, **kw)  # type: ignore[arg-type]
        self.service = SchedulerService(self.api, self.extender, clock=self.clock)
        self.service.refresh()
        self.names = [f"n{i}" for i in range(nodes)]

    def filter(self, pod: dict[str, Any]) -> ExtenderFilterResult:
        return self.extender.filter({"Pod": pod, "NodeNames": self.names})

    def schedule(self, pod: dict[str, Any]) -> str | None:
        return schedule(self.extender, pod, self.names)

    def chips(self, name: str) -> str:
        return str(self.api.get_pod("ns", name)["metadata"]["annotations"]["huawei.com/Ascend910"])


def test_bind_writes_the_scheduler_annotations_with_the_node() -> None:
    h = Harness(2)
    pod = pending(h.api, "p", 2)
    node = h.schedule(pod)
    bound = h.api.get_pod("ns", "p")
    assert bound["spec"]["nodeName"] == node
    assert bound["metadata"]["annotations"]["huawei.com/Ascend910"] == "Ascend910-0,Ascend910-1"
    assert bound["metadata"]["annotations"]["predicate-time"].isdigit()


def test_two_pods_never_get_the_same_chips_before_the_state_catches_up() -> None:
    h = Harness(1)
    for i in range(8):
        h.schedule(pending(h.api, f"p{i}", 1))
    chips = [h.chips(f"p{i}") for i in range(8)]
    assert len(set(chips)) == 8
    answer = h.filter(pending(h.api, "ninth", 1))
    assert answer.NodeNames == []
    # no chip idle: MindCluster's framework's words (plugin/job.go checkNodeNum)
    assert answer.FailedNodes["n0"] == (
        "NPUResourceShortage: huawei.com/Ascend910, task requires 1 NPU cards but node idle is 0"
    )


def test_filter_explains_every_rejected_node_and_which_can_never_host_the_pod() -> None:
    # kube-scheduler preempts only on FailedNodes: a node in FailedAndUnresolvableNodes is
    # never emptied for a pod it can never host (pkg/scheduler/extender.go).
    h = Harness(2)
    h.api.put("Node", {"metadata": {"name": "cpu-node"}, "status": {}})
    h.names.append("cpu-node")
    h.names.append("ghost")
    answer = h.filter(pending(h.api, "p", 3))
    assert answer.NodeNames == [] and answer.FailedNodes == {}
    assert "not in map[3:{} 5:{} 6:{} 7:{}]" in answer.FailedAndUnresolvableNodes["n0"]
    answer = h.filter(pending(h.api, "q", 2))
    assert answer.NodeNames == ["n0", "n1"]
    assert answer.FailedAndUnresolvableNodes == {
        "cpu-node": "cpu-node is not an Ascend NPU node",
        "ghost": "ghost is not an Ascend NPU node",
    }
    for i in range(4):
        h.schedule(pending(h.api, f"full{i}", 8 if i < 2 else 1))
    answer = h.filter(pending(h.api, "r", 8))
    assert set(answer.FailedNodes) >= {"n0", "n1"}, "full now: evicting could free them"


def test_prioritize_maps_the_policy_scores_onto_zero_to_ten() -> None:
    assert normalize({"a": 263.0, "b": 236.0, "c": None}) == [
        HostPriority("a", 10),
        HostPriority("b", 0),
        HostPriority("c", 0),
    ]
    assert normalize({"a": 5.0, "b": 5.0}) == [
        HostPriority("a", 10),
        HostPriority("b", 10),
    ]


def test_the_filter_for_kube_scheduler_passes_only_the_best_scored_nodes() -> None:
    """``--filter-answers best`` (the shipped configuration names no prioritizeVerb): the
    nodes prioritize would score highest, and no other; ``all``: every fitting node."""
    h = Harness(3)
    h.schedule(pending(h.api, "half", 4))  # one server has a ring of four taken
    h.service.refresh()
    pod = pending(h.api, "p", 4)
    scores = {e.Host: e.Score for e in h.extender.prioritize({"Pod": pod, "NodeNames": h.names})}
    top = max(scores.values())
    assert sorted(set(scores.values())) != [top], f"the nodes must score apart: {scores}"
    every = h.extender.filter({"Pod": pod, "NodeNames": h.names})
    assert sorted(every.NodeNames or []) == h.names
    best = h.extender.filter({"Pod": pod, "NodeNames": h.names}, best=True)
    assert best.NodeNames == [n for n in h.names if scores[n] == top]
    assert best.FailedNodes == {} and best.FailedAndUnresolvableNodes == {}
    # The route answers as the service was started.
    h.extender.filter_best = True
    routed = h.service.routes.handle("filter", {"Pod": pod, "NodeNames": h.names})
    assert routed.NodeNames == best.NodeNames


def test_a_gang_is_reserved_whole_only_when_all_its_pods_exist_then_binds_into_it() -> None:
    h = Harness(3)
    first = pending(h.api, "g-0", 8, gang="g", size=2)
    h.service.refresh()
    answer = h.filter(first)
    assert answer.NodeNames == []
    assert "1 of 2 pods exist" in answer.FailedNodes["n0"]
    h.extender.state.events.flush()
    (waiting,) = h.api.events
    assert (waiting["reason"], waiting["involvedObject"]["name"]) == ("NPUGangWaiting", "g-0")
    assert waiting["message"] == answer.FailedNodes["n0"]
    second = pending(h.api, "g-1", 8, gang="g", size=2)
    h.service.refresh()
    nodes = {h.schedule(first), h.schedule(second)}
    assert len(nodes) == 2 and None not in nodes
    small = pending(h.api, "small", 8)
    assert h.schedule(small) == ({"n0", "n1", "n2"} - nodes).pop()


def test_a_gang_of_two_four_chip_pods_on_910_x8_servers_is_reserved_a_ring_each() -> None:
    # MindCluster v26.1.0 checks each pod of a module910x8 job alike (1, 2, 4 or 8 chips;
    # internal/npu/base/frame.go ValidNPUJob): no 8-per-pod rule for a job of several pods.
    # The gang's members go to distinct nodes, each taking a whole ring: our reservation holds
    # one member per node. A deliberate difference: Huawei's per-task allocation would put both
    # on one server, a ring each (as ``place`` does: tests/unit/test_module910x8.py), unless the
    # pods' required anti-affinity forbids it, which Huawei's own samples state (workers apart
    # by hostname) and which our reservation, made before kube-scheduler or Volcano checks it,
    # cannot see: co-located, such a gang would never bind.
    h = Harness(3)
    gang = [pending(h.api, f"g-{i}", 4, gang="g", size=2) for i in range(2)]
    h.service.refresh()
    nodes = {h.schedule(gang[0]), h.schedule(gang[1])}
    assert len(nodes) == 2 and None not in nodes
    rings = {h.chips("g-0"), h.chips("g-1")}
    assert rings <= {
        "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3",
        "Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7",
    }


def test_a_reservation_expires_when_the_gang_never_binds() -> None:
    h = Harness(2, gang_ttl=30)
    gang = [pending(h.api, f"g-{i}", 8, gang="g", size=2) for i in range(2)]
    h.service.refresh()
    assert len(h.filter(gang[0]).passing) == 2
    assert h.filter(pending(h.api, "other", 8)).NodeNames == [], "the nodes are reserved"
    h.clock.now += 31
    h.api.delete("Pod", "ns", "g-0")
    h.api.delete("Pod", "ns", "g-1")
    h.service.refresh()
    assert len(h.filter(h.api.get_pod("ns", "other")).passing) == 2


def test_a_bind_that_the_api_server_refuses_gives_its_chips_back() -> None:
    h = Harness(1)
    pod = pending(h.api, "p", 8)
    h.api.delete("Pod", "ns", "p")
    answer = h.extender.bind(
        {"PodName": "p", "PodNamespace": "ns", "PodUID": pod["metadata"]["uid"], "Node": "n0"}
    )
    assert "not found" in answer.Error
    assert h.filter(pending(h.api, "q", 8)).NodeNames == ["n0"]


def bind_args(pod: dict[str, Any], node: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": "ns", "PodUID": meta["uid"], "Node": node}


def test_a_binding_the_api_server_refuses_gives_its_chips_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(1)
    pod = pending(h.api, "p", 8)

    def refuse(*args: object) -> None:
        raise KubeError("create binding: the API server is unreachable")

    monkeypatch.setattr(h.api, "bind_pod", refuse)
    assert h.filter(pod).NodeNames == ["n0"]  # kube-scheduler's filter before its bind
    assert "unreachable" in h.extender.bind(bind_args(pod, "n0")).Error
    assert h.filter(pending(h.api, "q", 8)).NodeNames == ["n0"]
    h.extender.state.events.flush()
    (refused,) = h.api.events
    assert (refused["type"], refused["reason"]) == ("Warning", "NPUBindRefused")
    assert "the API server is unreachable" in refused["message"]


def test_while_a_binding_is_written_the_lock_is_free_and_its_chips_stay_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(1)
    pod, other = pending(h.api, "p", 8), pending(h.api, "q", 8)
    bind = h.api.bind_pod
    seen: list[ExtenderFilterResult] = []

    def bind_slowly(*args: Any) -> None:
        # Another verb and a refresh run while this Binding is on its way (a view listed
        # before it lands): neither waits for it, and neither offers its chips.
        def meanwhile() -> None:
            h.service.refresh()
            seen.append(h.filter(other))

        worker = threading.Thread(target=meanwhile)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), "the extender's lock is held during the API call"
        bind(*args)

    monkeypatch.setattr(h.api, "bind_pod", bind_slowly)
    assert h.filter(pod).NodeNames == ["n0"]
    assert h.extender.bind(bind_args(pod, "n0")).Error == ""
    assert seen[0].NodeNames == [], seen
    h.service.refresh()
    assert h.filter(other).NodeNames == []


def test_binds_to_one_node_land_in_the_order_of_their_predicate_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kubelet admits pods in the order their bindings arrive, and the device plugin
    # hands each the chips of the oldest pending pod of its size: a later-stamped binding
    # landing first would run each pod on the chips the other records.
    h = Harness(1)
    first, second = pending(h.api, "a", 1), pending(h.api, "b", 1)
    bind = h.api.bind_pod
    racing: list[threading.Thread] = []

    def bind_while_another_starts(*args: Any) -> None:
        if not racing:  # the first binding is on its way: a second bind to the node starts
            racing.append(threading.Thread(target=h.extender.bind, args=(bind_args(second, "n0"),)))
            racing[0].start()
            racing[0].join(timeout=1)  # it must wait for this write (it would land before)
        bind(*args)

    monkeypatch.setattr(h.api, "bind_pod", bind_while_another_starts)
    assert h.filter(first).NodeNames == h.filter(second).NodeNames == ["n0"]
    assert h.extender.bind(bind_args(first, "n0")).Error == ""
    racing[0].join(timeout=10)
    landed = sorted(
        (h.api.get_pod("ns", name) for name in ("a", "b")),
        key=lambda p: int(p["metadata"]["resourceVersion"]),
    )
    stamps = [int(p["metadata"]["annotations"][PREDICATE_TIME]) for p in landed]
    assert [p["spec"].get("nodeName") for p in landed] == ["n0", "n0"]
    assert stamps == sorted(stamps), "bindings landed in the order of their predicate-times"


def test_the_last_rank_of_a_gang_whose_binding_fails_can_bind_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(2)
    pods = [pending(h.api, f"g-{i}", 8, gang="g", size=2) for i in range(2)]
    h.service.refresh()
    first = h.schedule(pods[0])
    assert first is not None
    last = next(n for n in h.names if n != first)
    bind = h.api.bind_pod

    def unavailable(*args: object) -> None:
        raise KubeError("create binding: 503")

    monkeypatch.setattr(h.api, "bind_pod", unavailable)
    assert last in (h.filter(pods[1]).NodeNames or [])
    assert "503" in h.extender.bind(bind_args(pods[1], last)).Error
    monkeypatch.setattr(h.api, "bind_pod", bind)
    assert h.extender.bind(bind_args(pods[1], last)).Error == ""


@pytest.mark.parametrize("size", ["x", "0"])
def test_a_malformed_gang_size_is_refused_with_the_reason(size: str) -> None:
    h = Harness(1)
    pod = pending(h.api, "p", 8, gang="g", size=1)
    pod["metadata"]["annotations"]["ascend.npu/gang-size"] = size
    h.api.put("Pod", pod)  # the cluster's pod says it: the filter reads that one
    answer = h.filter(pod)
    assert answer.NodeNames == []
    assert "ascend.npu/gang-size" in answer.FailedAndUnresolvableNodes["n0"]


def test_changes_from_before_a_bind_landed_do_not_offer_that_binds_chips_again() -> None:
    h = Harness(1)
    stale = live_view.build(h.api.list_nodes(), h.api.list_configmaps("kube-system"), [], h.clock())
    first = pending(h.api, "first", 8)
    h.schedule(first)
    # The watches deliver what changed before the Binding: the node all free, the pod pending.
    h.extender.state.update(
        views={"n0": NodeView("n0", stale.nodes[0])}, pods={"ns/first": pod_view(first)}
    )
    assert h.filter(pending(h.api, "second", 1)).NodeNames == []


def preemption(pod: dict[str, Any], victims: dict[str, list[str]]) -> dict[str, Any]:
    """kube-scheduler's ExtenderPreemptionArgs with the node cache: victims by UID."""
    return {
        "Pod": pod,
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": 0}
            for node, uids in victims.items()
        },
    }


def test_preempt_keeps_only_nodes_where_evicting_can_help() -> None:
    h = Harness(2)
    for i in range(2):
        h.schedule(pending(h.api, f"low{i}", 8))
    victims = {"n0": ["uid-low0"], "n1": ["uid-low1"]}
    never = h.extender.preempt(preemption(pending(h.api, "never", 3), victims))
    assert never.NodeNameToMetaVictims == {}, "3 chips: no 910 server serves it, full or empty"
    whole = h.extender.preempt(preemption(pending(h.api, "whole", 8), victims))
    assert sorted(whole.NodeNameToMetaVictims) == ["n0", "n1"]
    assert whole.NodeNameToMetaVictims["n0"].Pods[0].UID == "uid-low0"


def test_a_nominated_pod_evicts_nothing_elsewhere_while_its_node_may_still_take_it() -> None:
    h = Harness(2)
    for i in range(2):
        h.schedule(pending(h.api, f"low{i}", 8))
    pod = pending(h.api, "whole", 8)
    pod["status"]["nominatedNodeName"] = "n0"  # its victim on n0 gone, this view not yet
    answer = h.extender.preempt(preemption(pod, {"n1": ["uid-low1"]}))
    assert answer.NodeNameToMetaVictims == {}, "no second victim for the same pod"
    h.clock.now += 31  # its node never came free: it may preempt elsewhere again
    answer = h.extender.preempt(preemption(pod, {"n1": ["uid-low1"]}))
    assert list(answer.NodeNameToMetaVictims) == ["n1"]


def test_a_sub_healthy_node_scores_lower_and_takes_no_job_that_exits_on_sub_health() -> None:
    # MindCluster's fault handler (ascend-for-volcano internal/rescheduling/reschedule.go):
    # checkNodeCurNodeIsFault and reduceForSubHealthyNodes, read from the node's DeviceInfo.
    h = Harness(2)
    fault = ChipFault(3, network=False, level="SubHealthFault", codes=("80E01801",))
    info = DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), (fault,), 1_700_000_000)
    h.api.put("ConfigMap", configmap("n0", info))
    h.service.refresh()
    plain = pending(h.api, "plain", 1)
    scores = {p.Host: p.Score for p in h.extender.prioritize({"Pod": plain, "NodeNames": h.names})}
    assert scores["n0"] < scores["n1"]
    exiting = pending(h.api, "exiting", 1)
    exiting["metadata"]["labels"] = {"subHealthyStrategy": "graceExit"}
    h.api.put("Pod", exiting)
    answer = h.filter(h.api.get_pod("ns", "exiting"))
    assert answer.NodeNames == ["n1"]
    assert answer.FailedNodes["n0"] == (
        "NodePredicate failed, cardSubHealthy=true andswitchSubHealthy=false, but sub-healthy "
        "strategy is graceExit"
    )
