"""Which pending pod an Allocate belongs to, and which chips it may get."""

from __future__ import annotations

import json

import pytest

from agent.allocation.handshake_rules import (
    ChipsRefused,
    check_chips,
    chip_claim,
    consumed_annotations,
    held_chips,
    misfits,
    pick_pending,
)
from chip_drivers.chips import Chip, NodeChips
from contract.annotations import CONSUMED
from contract.pods import PodView


def pick_pod(pods: list[PodView], count: int, node: NodeChips) -> PodView | None:
    """The pending pod an Allocate of ``count`` chips on ``node`` is for."""
    return pick_pending(pods, node.kind.resource, count, chip_claim(node))


NODE = NodeChips(
    "Ascend910",
    "module910x8",
    tuple(Chip(i, i, healthy=i != 7, ip=f"10.0.0.{10 + i}") for i in range(8)),
)


def pod(
    name: str,
    chips: str | None,
    when: str | None = "100",
    extra: dict[str, str] | None = None,
    *,
    phase: str = "Pending",
    deleting: bool = False,
    reason: str = "",
    npu_limit: int = 2,
) -> PodView:
    annotations = dict(extra or {})
    if chips is not None:
        annotations["huawei.com/Ascend910"] = chips
    if when is not None:
        annotations["predicate-time"] = when
    return PodView(
        "ns",
        name,
        phase=phase,
        deleting=deleting,
        reason=reason,
        npu_limit=npu_limit,
        annotations=annotations,
    )


def test_of_two_pending_pods_with_equal_counts_the_older_prediction_wins() -> None:
    pods = [
        pod("late", "Ascend910-4,Ascend910-5", "200"),
        pod("early", "Ascend910-0,Ascend910-1", "100"),
    ]
    chosen = pick_pod(pods, 2, NODE)
    assert chosen is not None and chosen.name == "early"


def test_the_chip_count_must_equal_the_kubelets_request() -> None:
    pods = [pod("two", "Ascend910-0,Ascend910-1", "1"), pod("one", "Ascend910-4", "2")]
    chosen = pick_pod(pods, 1, NODE)
    assert chosen is not None and chosen.name == "one"


def test_an_unparseable_predicate_time_sorts_last_and_ties_keep_list_order() -> None:
    pods = [
        pod("bad", "Ascend910-0", "abcdef"),
        pod("a", "Ascend910-1", "5"),
        pod("b", "Ascend910-2", "5"),
    ]
    chosen = pick_pod(pods, 1, NODE)
    assert chosen is not None and chosen.name == "a"
    assert pods[0].predicate_time == 2**64 - 1
    only_bad = pick_pod([pods[0]], 1, NODE)
    assert only_bad is not None and only_bad.name == "bad"


@pytest.mark.parametrize(
    "excluded",
    [
        pod("consumed", "Ascend910-0", CONSUMED),
        pod("finished", "Ascend910-0", phase="Succeeded"),
        pod("failed", "Ascend910-0", phase="Failed"),
        pod("deleting", "Ascend910-0", deleting=True),
        pod("rejected", "Ascend910-0", reason="UnexpectedAdmissionError"),
        pod("no-limit", "Ascend910-0", npu_limit=0),
        pod("unscheduled", None),
    ],
)
def test_pods_that_are_not_waiting_for_this_allocate_are_never_chosen(excluded: PodView) -> None:
    assert pick_pod([excluded], 1, NODE) is None


def test_annotated_chips_that_exist_are_healthy_and_free_are_handed_out() -> None:
    chips = check_chips(pod("p", "Ascend910-5,Ascend910-4"), NODE, held={})
    assert [c.id for c in chips] == [5, 4]


@pytest.mark.parametrize(
    ("annotation", "held", "error"),
    [
        ("Ascend910-9", {}, "Ascend910-9 does not exist on this node"),
        ("Ascend910-7", {}, "Ascend910-7 is unhealthy"),
        ("Ascend910-3", {3: "ns/other"}, "Ascend910-3 is held by ns/other"),
        ("Ascend910-x", {}, "chip name 'Ascend910-x'"),
        ("Ascend910-1,Ascend910-1", {}, "names a chip twice"),
    ],
)
def test_chips_that_cannot_be_handed_out_are_refused_with_the_reason(
    annotation: str, held: dict[int, str], error: str
) -> None:
    with pytest.raises(ChipsRefused, match=error):
        check_chips(pod("p", annotation), NODE, held)


def test_live_pods_hold_their_real_chips_or_their_consumed_annotation() -> None:
    pods = [
        pod("running", "Ascend910-0", CONSUMED, {"huawei.com/AscendReal": "Ascend910-1"}),
        pod("by-huawei-plugin", "Ascend910-2", CONSUMED),
        pod("pending", "Ascend910-3", "100"),
        pod("done", "Ascend910-4", CONSUMED, phase="Succeeded"),
        pod("garbled", "Ascend910-5", CONSUMED, {"huawei.com/AscendReal": "x"}),
    ]
    assert held_chips(pods) == {1: "ns/running", 2: "ns/by-huawei-plugin", 5: "ns/garbled"}
    assert held_chips(pods, other_than="ns/running") == {2: "ns/by-huawei-plugin", 5: "ns/garbled"}


def test_allocate_records_consumption_real_and_kubelet_chips_and_the_rank_table() -> None:
    chips = [NODE.chips[5], NODE.chips[4]]
    written = consumed_annotations(
        PodView("ns", "job-worker-0", uid="2f0c-uid"),
        chips,
        ["Ascend910-0", "Ascend910-7"],
        "192.168.10.11",
        NODE,
    )
    assert written["predicate-time"] == "18446744073709551615"
    assert written["huawei.com/AscendReal"] == "Ascend910-5,Ascend910-4"
    assert written["huawei.com/kltDev"] == "Ascend910-0,Ascend910-7"
    table = written["ascend.kubectl.kubernetes.io/ascend-910-configuration"]
    # Huawei's Instance, field for field (Ascend/mind-cluster component/ascend-device-plugin
    # pkg/common/proto.go): server_id the pod's UID, -2 where the driver cannot tell.
    assert table == (
        '{"pod_name":"job-worker-0","server_id":"2f0c-uid","host_ip":"192.168.10.11",'
        '"super_pod_id":-2,"devices":['
        '{"device_id":"4","device_ip":"10.0.0.14","super_device_id":"-2"},'
        '{"device_id":"5","device_ip":"10.0.0.15","super_device_id":"-2"}],'
        '"rack_id":-2,"server_index":"-2","server_ip":"192.168.10.11"}'
    )
    assert json.loads(table)["devices"][0]["device_id"] == "4"


@pytest.mark.parametrize(
    "hostile",
    [
        pod("superscript", "Ascend910-0", "²"),
        pod("huge-time", "Ascend910-0", "9" * 5000),
        pod("elsewhere", "Ascend910-99", "1"),
        pod("huge-chip", "Ascend910-" + "9" * 5000, "1"),
        pod("twice", "Ascend910-0,Ascend910-0", "1"),
    ],
)
def test_another_pods_hostile_annotations_never_take_a_legitimate_pods_allocate(
    hostile: PodView,
) -> None:
    legitimate = pod("legit", "Ascend910-1", "100")
    chosen = pick_pod([hostile, legitimate], 1, NODE)
    assert chosen is not None and chosen.name == "legit"


def test_a_huge_annotation_is_refused_with_a_short_reason() -> None:
    huge = pod("huge", ",".join(["Ascend910-1"] * 2000), "1")
    ((passed_over, why),) = misfits([huge], 2, NODE)
    assert passed_over.name == "huge" and "longer than 16 chips" in why
    assert len(why) < 300, "a refusal travels in gRPC metadata: it must stay small"
