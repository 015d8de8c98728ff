"""The robustness run's invariants catch what they name (and nothing in a sound cluster)."""

from __future__ import annotations

from deviceplugin_api.v1beta1 import api_pb2 as dp
from simulation.cluster import Admitted
from simulation.invariants import bindings, containers
from simulation.kubelet import Allocation
from simulation.memory import pod_object


def admitted(key: str, node: str, visible: str) -> Admitted:
    response = dp.ContainerAllocateResponse(envs={"ASCEND_VISIBLE_DEVICES": visible})
    return Admitted(key, node, Allocation(key, "main", "huawei.com/Ascend910", (), response))


def running(name: str, real: str) -> dict[str, object]:
    pod = pod_object("ns", name, "n0", len(real.split(",")), phase="Running")
    pod["metadata"]["annotations"] = {
        "huawei.com/Ascend910": real,
        "huawei.com/AscendReal": real,
    }
    return pod


def test_two_live_containers_on_one_chip_and_a_container_off_its_record_are_caught() -> None:
    pods = {"ns/a": running("a", "Ascend910-0,Ascend910-1"), "ns/b": running("b", "Ascend910-2")}
    sound = {"ns/a": admitted("ns/a", "n0", "0,1"), "ns/b": admitted("ns/b", "n0", "2")}
    assert containers(sound, pods) == []
    shared = {**sound, "ns/b": admitted("ns/b", "n0", "1")}
    assert [i for i, _ in containers(shared, pods)] == [
        "no chip in two live containers",
        "every container's devices are its pod's AscendReal",
    ]
    ended = {**pods, "ns/a": {**pods["ns/a"], "status": {"phase": "Succeeded"}}}
    assert [i for i, _ in containers(shared, ended)] == [
        "every container's devices are its pod's AscendReal"
    ], "an ended pod's container holds nothing"


def test_an_npu_pod_bound_without_the_schedulers_chips_is_caught() -> None:
    bare = pod_object("ns", "bare", "n0", 2)
    assert bindings({"ns/bare": bare}) == [
        ("no NPU pod bound without the scheduler's chips", "ns/bare on n0")
    ]
    assert (
        bindings({"ns/p": running("p", "Ascend910-0"), "ns/cpu": pod_object("ns", "cpu", "n0", 0)})
        == []
    )
