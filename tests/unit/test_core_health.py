"""Which of the kubelet's AI-core IDs a dynamic-vNPU node reports unhealthy: as many as the
failed chips have cores, the IDs pods hold on those chips first (upstream's
``getUnhealthyAICore``)."""

from __future__ import annotations

from agent.allocation.cores import cores_by_chip
from agent.resources import unhealthy_core_ids
from contract.pods import PodView

IDS = [f"npu-core-{k}" for k in range(16)]  # two 310P chips of 8 AI cores


def running(name: str, klt: str, real: str, phase: str = "Running") -> PodView:
    return PodView(
        "ns",
        name,
        f"uid-{name}",
        phase=phase,
        npu_limit=len(klt.split(",")),
        resource="huawei.com/npu-core",
        annotations={"huawei.com/kltDev": klt, "huawei.com/AscendReal": real},
    )


def test_upstreams_example_the_vnpus_own_ids_then_six_free_ones() -> None:
    # Upstream's comment: aicore-0 and aicore-22 hold Ascend310P-2c-100-0; chip 0 fails, so
    # those two are unhealthy and 6 free ones make up its 8 cores.
    ids = [f"npu-core-{k}" for k in range(24)]
    held = cores_by_chip([running("v", "npu-core-0,npu-core-22", "Ascend310P-2c-100-0_0")], 8)
    marked = unhealthy_core_ids(ids, {0}, 8, held)
    assert len(marked) == 8
    assert {"npu-core-0", "npu-core-22"} <= marked
    assert marked - {"npu-core-0", "npu-core-22"} == {
        f"npu-core-{k}" for k in (1, 10, 11, 12, 13, 14)
    }


def test_cores_on_a_healthy_chip_are_never_marked_and_the_free_count_is_the_real_one() -> None:
    pods = [
        running("a", "npu-core-3,npu-core-4", "Ascend310P-2c-100-1_0"),  # chip 1, which fails
        running("b", "npu-core-9,npu-core-10", "Ascend310P-2c-101-0_1"),  # chip 0, healthy
    ]
    held = cores_by_chip(pods, 8)
    marked = unhealthy_core_ids(IDS, {1}, 8, held)
    assert {"npu-core-3", "npu-core-4"} <= marked and not {"npu-core-9", "npu-core-10"} & marked
    free_healthy = [i for i in IDS if i not in marked and i not in held]
    assert len(free_healthy) == 8 - 2, "chip 0's cores less the two its vNPU uses"


def test_whole_chips_map_the_kubelets_ids_in_order_eight_per_chip() -> None:
    klt = ",".join(f"npu-core-{k}" for k in range(16))
    held = cores_by_chip([running("w", klt, "Ascend310P-0,Ascend310P-1")], 8)
    assert {held[f"npu-core-{k}"] for k in range(8)} == {0}
    assert {held[f"npu-core-{k}"] for k in range(8, 16)} == {1}


def test_ended_and_unreadable_pods_hold_nothing() -> None:
    ended = running("e", "npu-core-1", "Ascend310P-0", phase="Succeeded")
    garbled = running("g", "npu-core-2", "not a device")
    assert cores_by_chip([ended, garbled], 8) == {}
    assert unhealthy_core_ids(IDS, set(), 8, {}) == set()
