"""The scheduler's view of the nodes, from listed nodes, DeviceInfo ConfigMaps and pods."""

from __future__ import annotations

from typing import Any

from contract.deviceinfo import ChipFault, DeviceInfo, encode
from contract.objects import Obj
from contract.pods import PodView, pod_view
from scheduler_core.service.cluster_view import node_view, published, trim_node
from scheduler_core.service.live_view import build
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


def with_noded(obj: Obj, beat: str | None, interval: str = "5") -> Obj:
    obj["metadata"]["labels"]["nodeDEnable"] = "on"
    notes = {"noded/heartbeat-interval": interval}
    if beat is not None:
        notes["noded/heartbeat"] = beat
    obj["metadata"]["annotations"] = notes
    return obj


def test_a_noded_node_is_down_three_intervals_after_its_last_heartbeat() -> None:
    fresh = with_noded(node("n"), str(NOW - 14))  # 14 s < 3 × 5 s
    view = node_view(
        fresh,
        cm("n", set(range(8)))["data"],
        published(cm("n", set(range(8)))["data"]),
        held=(),
        requested=0,
        now=NOW,
    )
    assert view is not None and view.state is not None and not view.down
    assert view.valid_until == NOW + 1  # it turns down then, with no change to see
    late = with_noded(node("n"), str(NOW - 15))
    data = cm("n", set(range(8)))["data"]
    down = node_view(late, data, published(data), held=(), requested=0, now=NOW)
    assert down is not None and down.state is None and down.down
    assert down.reason == f"n: NodeD heartbeat missed since {NOW}"
    missing = node_view(
        with_noded(node("n"), None), data, published(data), held=(), requested=0, now=NOW
    )
    assert missing is not None and missing.down
    assert "nodeDEnable=on but noded/heartbeat is '', not a Unix time" in missing.reason
    # Without the label the annotations mean nothing; the trimmed node keeps what is read.
    plain = node("n")
    plain["metadata"]["annotations"] = {"noded/heartbeat": "0"}
    kept = node_view(plain, data, published(data), held=(), requested=0, now=NOW)
    assert kept is not None and kept.state is not None
    assert trim_node(late)["metadata"]["annotations"] == late["metadata"]["annotations"]
    assert trim_node(late)["metadata"]["labels"]["nodeDEnable"] == "on"


def test_a_sub_healthy_chip_or_switch_marks_the_node_sub_healthy() -> None:
    fault = ChipFault(3, network=False, level="SubHealthFault", codes=("80E01801",))
    info = DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), (fault,), NOW)
    data = encode(info)
    view = node_view(node("n"), data, published(data), held=(), requested=0, now=NOW)
    assert view is not None and view.state is not None and view.sub_healthy
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
