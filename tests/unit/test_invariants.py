"""The robustness run's invariants catch what they name (and nothing in a sound cluster)."""

from __future__ import annotations

from deviceplugin_api.v1beta1 import api_pb2 as dp
from simulation.cluster import Admitted
from simulation.invariants import bindings, containers, cores, network
from simulation.kubelet import Allocation
from simulation.memory import pod_object

NPU_CORE = "huawei.com/npu-core"


def admitted(key: str, node: str, visible: str, resource: str = "huawei.com/Ascend910") -> Admitted:
    response = dp.ContainerAllocateResponse(envs={"ASCEND_VISIBLE_DEVICES": visible})
    return Admitted(key, node, Allocation(key, "main", resource, (), response))


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


def vnpu_pod(name: str, choice: str, real: str) -> dict[str, object]:
    pod = pod_object("ns", name, "i0", 4, phase="Running", resource=NPU_CORE)
    pod["metadata"]["annotations"] = {NPU_CORE: choice, "huawei.com/AscendReal": real}
    return pod


def test_ai_cores_of_one_chip_given_beyond_its_eight_are_caught() -> None:
    """Two 4-core vNPUs on chip 0 fill it; a whole chip 0 on top gives its cores twice."""
    pods = {
        "ns/a": vnpu_pod("a", "0-vir04", "Ascend310P-4c-100-0_0"),
        "ns/b": vnpu_pod("b", "0-vir04", "Ascend310P-4c-101-0_1"),
        "ns/w": vnpu_pod("w", "1,2", "Ascend310P-1,Ascend310P-2"),
    }
    sound = {
        "ns/a": admitted("ns/a", "i0", "100", NPU_CORE),
        "ns/b": admitted("ns/b", "i0", "101", NPU_CORE),
        "ns/w": admitted("ns/w", "i0", "1,2", NPU_CORE),
    }
    assert cores(sound, pods, 8) == []
    assert containers(sound, pods) == [], "vNPU containers are checked by cores"
    pods["ns/x"] = vnpu_pod("x", "0", "Ascend310P-0")
    twice = {**sound, "ns/x": admitted("ns/x", "i0", "0", NPU_CORE)}
    [(invariant, evidence)] = cores(twice, pods, 8)
    assert invariant == "no AI core of a 310P chip given twice"
    assert evidence.startswith("chip 0 of i0: 16 of 8 cores"), evidence


def test_a_vnpu_container_off_the_chosen_chip_is_caught() -> None:
    pods = {"ns/a": vnpu_pod("a", "1-vir04", "Ascend310P-4c-100-0")}
    held = {"ns/a": admitted("ns/a", "i0", "100", NPU_CORE)}
    assert [i for i, _ in cores(held, pods, 8)] == ["each vNPU container runs on the chip chosen"]
    pods = {"ns/w": vnpu_pod("w", "1", "Ascend310P-1")}
    held = {"ns/w": admitted("ns/w", "i0", "2", NPU_CORE)}
    assert [i for i, _ in cores(held, pods, 8)] == ["each vNPU container runs on the chip chosen"]


def test_a_vnpu_pod_bound_without_the_schedulers_choice_is_caught() -> None:
    bare = pod_object("ns", "v", "i0", 2, resource=NPU_CORE)
    assert [i for i, _ in bindings({"ns/v": bare})] == [
        "no NPU pod bound without the scheduler's chips"
    ]
    assert bindings({"ns/v": vnpu_pod("v", "0-vir02", "Ascend310P-2c-100-0")}) == []


def bound(name: str, node: str) -> dict[str, object]:
    return pod_object("work", name, node, 8, phase="Running")


def test_a_switch_gang_across_tors_and_a_superpod_gang_across_superpods_are_caught() -> None:
    tor_of = {"n0": 0, "n1": 0, "n2": 1}
    super_pod_of = {"n0": 0, "n1": 1, "n2": 1}
    pods = {f"work/{n}": bound(n, node) for n, node in (("t0", "n0"), ("t1", "n1"))}
    pods |= {f"work/{n}": bound(n, node) for n, node in (("s0", "n1"), ("s1", "n2"))}
    gangs = {
        "work/tor": ("tor-gang", ["work/t0", "work/t1"]),
        "work/sp": ("sp-gang", ["work/s0", "work/s1"]),
        "work/plain": ("gang", ["work/t0", "work/s1"]),
    }
    assert network(pods, gangs, tor_of, super_pod_of) == []
    pods["work/t1"] = bound("t1", "n2")
    pods["work/s0"] = bound("s0", "n0")
    assert [i for i, _ in network(pods, gangs, tor_of, super_pod_of)] == [
        "a SuperPoD gang runs in one SuperPoD",
        "a switch-affinity gang runs under one ToR",
    ]
