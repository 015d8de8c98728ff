"""The scheduler's view of the nodes, from listed nodes, DeviceInfo ConfigMaps and pods."""

from __future__ import annotations

from typing import Any

from contract import nodeinfo
from contract.deviceinfo import ChipFault, DeviceInfo, encode
from contract.nodeinfo import DeviceFault, NodeInfo
from contract.objects import Obj
from contract.pods import PodView, pod_view
from scheduler_core.service.state.cluster_view import (
    NodeD,
    NodeView,
    node_view,
    published,
    trim_node,
)
from scheduler_core.service.state.live_view import LiveView, build
from simulation.memory import pod_object

NOW = 1_700_000_000


def node(
    name: str, allocatable: int = 8, capacity: int = 8, accelerator: str | None = None
) -> dict[str, Any]:
    labels = {"accelerator-type": accelerator} if accelerator else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": {"huawei.com/Ascend910": str(capacity)},
            "allocatable": {"huawei.com/Ascend910": str(allocatable)},
        },
    }


def cm(
    name: str, free: set[int], unhealthy: frozenset[int] = frozenset(), age: int = 0
) -> dict[str, Any]:
    info = DeviceInfo(frozenset(free), frozenset(unhealthy), frozenset(), update_time=NOW - age)
    return {
        "metadata": {"namespace": "kube-system", "name": f"mindx-dl-deviceinfo-{name}"},
        "data": encode(info),
    }


def bound(
    name: str, node_name: str, chips: str, real: bool = False, phase: str = "Running"
) -> dict[str, Any]:
    key = "huawei.com/AscendReal" if real else "huawei.com/Ascend910"
    return pod_object(
        "ns", name, node_name, len(chips.split(",")), annotations={key: chips}, phase=phase
    )


def views(pods: list[Obj]) -> list[PodView]:
    return [pod_view(p) for p in pods]


def test_free_chips_are_all_chips_minus_held_minus_unhealthy() -> None:
    pods = [
        bound("a", "n1", "Ascend910-0,Ascend910-1", real=True),
        bound("b", "n1", "Ascend910-4"),
        bound("done", "n1", "Ascend910-5", phase="Succeeded"),
    ]
    snapshot = build(
        [node("n1", allocatable=7)],
        [cm("n1", {2, 3, 5, 6}, unhealthy=frozenset({7}))],
        views(pods),
        NOW,
    )
    (state,) = snapshot.nodes
    assert state.free == (2, 3, 5, 6)
    assert (state.allocatable, state.unhealthy) == (7, frozenset({7}))


def test_the_published_list_is_used_verbatim_when_the_scheduler_does_not_maintain_it() -> None:
    snapshot = build(
        [node("n1")], [cm("n1", {0, 1, 2, 3, 4, 5, 6, 7})], [], NOW, self_maintain=False
    )
    assert snapshot.nodes[0].free == tuple(range(8))


def test_a_node_whose_free_count_disagrees_with_the_kubelet_is_left_out() -> None:
    pods = [pod_object("ns", "other", "n1", 2, phase="Running")]  # holds 2 chips, names none
    snapshot = build([node("n1")], [cm("n1", set(range(8)))], views(pods), NOW)
    assert snapshot.nodes == ()
    assert snapshot.left_out["n1"] == (
        "n1's huawei.com/Ascend910 not stable: 8 listed free, 6 idle at the kubelet"
    )


def test_a_mismatching_or_stale_configmap_is_never_trusted() -> None:
    edited = cm("n1", set(range(8)))
    edited["data"]["DeviceInfoCfg"] = edited["data"]["DeviceInfoCfg"].replace(
        "Ascend910-7", "Ascend910-9"
    )
    snapshot = build(
        [node("n1"), node("n2"), node("n3")], [edited, cm("n2", set(range(8)), age=301)], [], NOW
    )
    assert snapshot.nodes == ()
    assert "CheckCode does not match" in snapshot.left_out["n1"]
    assert "stale (UpdateTime 1699999699, over 300 s ago)" in snapshot.left_out["n2"]
    assert snapshot.left_out["n3"] == "n3: no mindx-dl-deviceinfo-n3 ConfigMap"


def test_the_product_comes_from_the_nodes_accelerator_type_label() -> None:
    snapshot = build(
        [node("n1", 16, 16, "module-910b-16"), node("cpu", capacity=0)],
        [cm("n1", set(range(16)))],
        [],
        NOW,
    )
    (state,) = snapshot.nodes
    assert state.product == "module910bx16"
    assert state.free[:3] == (0, 1, 10), "the published string order"
    assert "cpu" not in snapshot.left_out


def test_trusting_the_published_list_a_bound_pod_still_holds_its_chips() -> None:
    # The agent has not republished since the bind: its list still names chips 0 and 1.
    pods = views([bound("new", "n1", "Ascend910-0,Ascend910-1")])
    snapshot = build([node("n1")], [cm("n1", set(range(8)))], pods, NOW, self_maintain=False)
    assert snapshot.nodes[0].free == tuple(range(2, 8))


def noded(status: str, *faults: DeviceFault) -> NodeD:
    return NodeD(NodeInfo(status, faults))


def test_noded_unhealthy_makes_a_fault_node_and_pre_separate_takes_no_new_pod() -> None:
    data = cm("n", set(range(8)))["data"]

    def seen_with(report: NodeD) -> NodeView | None:
        return node_view(
            node("n"), data, published(data), held=(), requested=0, now=NOW, noded=report
        )

    cpu = DeviceFault("CPU", 0, ("00000011",), "SeparateFault")
    down = seen_with(noded("UnHealthy", cpu))
    assert down is not None and down.state is None and down.down
    assert down.reason == "n: NodeD reports UnHealthy (CPU 0 00000011 SeparateFault)"
    pre = seen_with(noded("PreSeparate"))
    assert pre is not None and pre.state is None and not pre.down  # its pods stay
    assert pre.reason == "n: NodeD reports PreSeparate"
    well = seen_with(NodeD(NodeInfo("Healthy"), "bad CheckCode"))
    assert well is not None and well.state is not None and well.notice == "n: bad CheckCode"
    # The old heartbeat annotations mean nothing now (upstream dropped them, MC 757df078).
    old = node("n")
    old["metadata"]["labels"]["nodeDEnable"] = "on"
    old["metadata"]["annotations"] = {"noded/heartbeat": "0"}
    kept = node_view(old, data, published(data), held=(), requested=0, now=NOW)
    assert kept is not None and kept.state is not None
    assert "annotations" not in trim_node(old)["metadata"]


def test_a_bad_noded_configmap_keeps_the_last_good_one_in_force() -> None:
    pods = views([bound("a", "n", "Ascend910-0")])
    bad_status = NodeInfo("UnHealthy", (DeviceFault("Memory", 1, ("0C000023",), "SeparateFault"),))
    good = {"metadata": {"namespace": "mindx-dl", "name": "mindx-dl-nodeinfo-n"}}
    snapshot = build(
        [node("n", 7)],
        [cm("n", set(range(8))), {**good, "data": nodeinfo.encode(bad_status)}],
        pods,
        NOW,
    )
    assert snapshot.down == {"n"} and "NodeD reports UnHealthy" in snapshot.left_out["n"]
    view = LiveView()
    view.set_node("n", node("n"))
    view.set_deviceinfo("mindx-dl-deviceinfo-n", cm("n", set(range(8)))["data"])
    view.set_nodeinfo("mindx-dl-nodeinfo-n", nodeinfo.encode(bad_status))
    view.changed(NOW)
    edited = dict(nodeinfo.encode(NodeInfo("Healthy")))
    edited["NodeInfo"] = edited["NodeInfo"].replace('"Healthy"', '"PreSeparate"')
    view.set_nodeinfo("mindx-dl-nodeinfo-n", edited)
    (changed,) = view.changed(NOW).values()
    assert changed is not None and changed.down, "the last good content stays in force"
    assert "CheckCode does not match" in changed.notice
    view.set_nodeinfo("mindx-dl-nodeinfo-n", None)  # NodeD deletes it: healthy again
    (healthy,) = view.changed(NOW).values()
    assert healthy is not None and healthy.state is not None and not healthy.down


def test_fault_levels_decide_which_listed_chips_fail_and_pre_separate_ones_take_no_pod() -> None:
    faults = (
        ChipFault(1, False, "PreSeparateNPU", ("80C98002",), handling="PreSeparateNPU"),
        ChipFault(2, True, "PreSeparateNPU", ("81078603",)),  # link down: no eviction
        ChipFault(3, False, "RestartNPU", ("80CB8002",), handling="RestartNPU"),
    )
    info = DeviceInfo(frozenset({0, 2, 4, 5, 6, 7}), frozenset({3, 5}), frozenset({2}), faults, NOW)
    data = encode(info)
    # chip 0 held; chip 1 is pre-separated and free: the kubelet still counts it
    view = node_view(node("n", 6), data, published(data), held={0}, requested=1, now=NOW)
    assert view is not None and view.state is not None, view and view.reason
    assert view.failed == frozenset({3, 5}), "5: listed with no entry (an older device plugin)"
    assert 1 not in view.state.free and 1 in view.state.unhealthy
    assert view.faults is not None and view.faults.pre_separated == {1}


def test_chips_being_reset_take_no_new_pod_while_the_kubelet_still_counts_them() -> None:
    # A ring of 4 being reset (chip 2 faulty): Volcano takes -Recovering out of the free chips
    # (ascend-for-volcano common/k8s/cmmgr.go GetRecoveringDevInfo).
    fault = ChipFault(2, False, "RestartNPU", ("80E18008",), handling="RestartNPU")
    info = DeviceInfo(
        frozenset({0, 1, 3, 4, 5, 6, 7}),
        frozenset({2}),
        frozenset(),
        (fault,),
        NOW,
        recovering=frozenset({0, 1, 2, 3}),
    )
    data = encode(info)
    view = node_view(node("n", 7), data, published(data), held=(), requested=0, now=NOW)
    assert view is not None and view.state is not None, view and view.reason
    assert set(view.state.free) == {4, 5, 6, 7}
    done = encode(DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=NOW))
    back = node_view(node("n"), done, published(done), held=(), requested=0, now=NOW)
    assert back is not None and back.state is not None and set(back.state.free) == set(range(8))


def test_a_sub_healthy_chip_or_switch_marks_the_node_sub_healthy() -> None:
    fault = ChipFault(3, network=False, level="SubHealthFault", codes=("80E01801",))
    info = DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), (fault,), NOW)
    data = encode(info)
    view = node_view(node("n"), data, published(data), held=(), requested=0, now=NOW)
    assert view is not None and view.state is not None and view.sub_healthy
    # which kind the engine reads (MindCluster's rescheduling/node.go: HasCardSubHealthFault,
    # HasSwitchSubHealthFault), to score the node lower and keep exiting jobs off it
    assert (view.state.card_sub_healthy, view.state.switch_sub_healthy) == (True, False)
    healthy = encode(DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=NOW))
    switch = {
        **healthy,
        "SwitchInfoCfg": '{"FaultCode":[],"FaultLevel":"","NodeStatus":"SubHealthy"}',
    }
    views = [
        node_view(node("n"), d, published(d), held=(), requested=0, now=NOW)
        for d in (switch, healthy)
    ]
    assert [v.sub_healthy if v else None for v in views] == [True, False]
    assert [
        (v.state.card_sub_healthy, v.state.switch_sub_healthy) for v in views if v and v.state
    ] == [
        (False, True),
        (False, False),
    ]
