"""MindCluster's handler routing through the extender's verbs: ``huawei.com/schedule_policy``,
card servers of more than two chips, and the refusals of what no handler takes."""

from __future__ import annotations

from typing import Any

from agent.deviceinfo_publisher import configmap
from contract.deviceinfo import DeviceInfo
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import Clock, schedule

POLICY = "huawei.com/schedule_policy"


def add_node(api: MemoryCluster, name: str, accelerator_type: str | None, chips: int = 8) -> None:
    labels = {} if accelerator_type is None else {"accelerator-type": accelerator_type}
    api.put(
        "Node",
        {
            "metadata": {"name": name, "labels": labels},
            "status": {
                "capacity": {"huawei.com/Ascend910": str(chips)},
                "allocatable": {"huawei.com/Ascend910": str(chips)},
                "addresses": [],
            },
        },
    )
    info = DeviceInfo(frozenset(range(chips)), frozenset(), frozenset(), update_time=1_700_000_000)
    api.put("ConfigMap", configmap(name, info))


class Cluster:
    def __init__(self, nodes: dict[str, tuple[str | None, int]]) -> None:
        self.api = MemoryCluster()
        for name, (accelerator_type, chips) in nodes.items():
            add_node(self.api, name, accelerator_type, chips)
        self.extender = Extender(self.api, clock=Clock())
        SchedulerService(self.api, self.extender, clock=Clock()).refresh()
        self.names = list(nodes)

    def pod(self, name: str, npu: int, **kw: Any) -> dict[str, Any]:
        self.api.put("Pod", pod_object("ns", name, None, npu, **kw))
        return self.api.get_pod("ns", name)

    def chips(self, name: str) -> str:
        return str(self.api.get_pod("ns", name)["metadata"]["annotations"]["huawei.com/Ascend910"])


def test_a_chip8_node8_job_without_a_selector_lands_on_910b_nodes() -> None:
    # VOL-v5 routing ignored the policy: the job became module910x8 and every module-910b-8
    # node was refused with "check Node … label [accelerator-type]".
    cluster = Cluster({"a2-0": ("module-910b-8", 8), "a2-1": ("module-910b-8", 8)})
    pod = cluster.pod("p", 3, annotations={POLICY: "chip8-node8"})
    assert schedule(cluster.extender, pod, cluster.names) in cluster.names
    assert cluster.chips("p") == "Ascend910-0,Ascend910-1,Ascend910-2"


def test_a_910b_job_is_refused_on_a_910_module_node_naming_both() -> None:
    cluster = Cluster({"old": (None, 8)})
    answer = cluster.extender.filter(
        {"Pod": cluster.pod("p", 2, annotations={POLICY: "chip8-node8"}), "NodeNames": ["old"]}
    )
    reason = answer.FailedAndUnresolvableNodes["old"]
    assert "a module910x8 node" in reason and "module910bx8" in reason


def test_two_card_pods_of_two_chips_share_an_eight_chip_card_server() -> None:
    cluster = Cluster({"card": ("card-910b-2", 8)})
    for name in ("w0", "w1"):
        pod = cluster.pod(name, 2, annotations={POLICY: "chip1-node2"})
        assert schedule(cluster.extender, pod, cluster.names) == "card"
    assert {cluster.chips("w0"), cluster.chips("w1")} == {
        "Ascend910-0,Ascend910-1",
        "Ascend910-2,Ascend910-3",
    }


def test_an_unknown_policy_is_a_refusal_naming_it_not_a_server_error() -> None:
    cluster = Cluster({"a2": ("module-910b-8", 8)})
    pod = cluster.pod("p", 1, annotations={POLICY: "chip9-node9"})
    answer = cluster.extender.filter({"Pod": pod, "NodeNames": cluster.names})
    assert answer.NodeNames in (None, [])
    assert "'chip9-node9' names no MindCluster handler" in (
        answer.Error + " ".join(answer.FailedAndUnresolvableNodes.values())
    )


def test_an_npu_pod_without_a_policy_is_refused() -> None:
    cluster = Cluster({"a2": ("module-910b-8", 8)})
    pod = cluster.pod("p", 1, resource="huawei.com/npu")
    answer = cluster.extender.filter({"Pod": pod, "NodeNames": cluster.names})
    assert answer.NodeNames in (None, [])
    assert "asks for a huawei.com/schedule_policy annotation" in (
        answer.Error + " ".join(answer.FailedAndUnresolvableNodes.values())
    )


def test_a_950_pod_on_a_910_node_is_refused_naming_both_chip_kinds() -> None:
    cluster = Cluster({"a2": ("module-910b-8", 8)})
    pod = cluster.pod("p", 8, resource="huawei.com/npu", annotations={POLICY: "chip1-node8"})
    answer = cluster.extender.filter({"Pod": pod, "NodeNames": cluster.names})
    assert answer.NodeNames in (None, []) and not answer.Error
    assert answer.FailedAndUnresolvableNodes == {
        "a2": "node a2 has huawei.com/Ascend910 chips, the task asks for huawei.com/npu"
    }
    assert "huawei.com/npu" not in cluster.api.get_pod("ns", "p")["metadata"]["annotations"]
