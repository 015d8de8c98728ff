"""MindCluster's routing (``huawei.com/schedule_policy`` first, ``chip_topology.routing``) as
each caller meets it over HTTP: Volcano's verbs through its stand-in (``simulation/volcano.py``:
jobEnqueueable, predicate codes, allocateFunc) and kube-scheduler's through its stand-in
(``simulation/kube_scheduler.py``: filter, preemption candidates, bind)."""

from __future__ import annotations

from typing import Any

from simulation.kube_scheduler import KubeScheduler
from simulation.memory import MemoryCluster, pod_object
from simulation.volcano import VolcanoScheduler
from tests.integration.test_npu_less_roles import post, put_nodes, serving

POLICY = "huawei.com/schedule_policy"
UNKNOWN = "'chip9-node9' names no MindCluster handler"
A2 = ["a2-0", "a2-1"]


def cluster() -> MemoryCluster:
    """Two Atlas 800T A2 servers (``module-910b-8``) beside an Atlas 800 910 (``module``)."""
    store = MemoryCluster()
    put_nodes(store, dict.fromkeys(A2), "module-910b-8", 8)
    put_nodes(store, {"old": None}, "module", 8)
    return store


def put_pod(store: MemoryCluster, name: str, policy: str, scheduler: str) -> dict[str, Any]:
    pod = pod_object("ns", name, None, 3, annotations={POLICY: policy})
    pod["spec"]["schedulerName"] = scheduler
    store.put("Pod", pod)
    return store.get_pod("ns", name)


def task(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"UID": meta["uid"], "Name": meta["name"], "Job": "ns/j", "Status": 1, "Pod": pod}


def test_volcano_places_a_chip8_node8_job_on_910b_nodes_and_refuses_an_unknown_policy() -> None:
    store = cluster()
    a2 = put_pod(store, "a2-job", "chip8-node8", "volcano")
    bad = put_pod(store, "bad-job", "chip9-node9", "volcano")
    with serving(store) as sim:
        sim.service.refresh()
        verbs = f"{sim.url}/volcano"
        asked = {"TotalRequest": {"ScalarResources": {"huawei.com/Ascend910": 3000}}}
        assert post(f"{verbs}/jobEnqueueable", {"job": asked}) == {"status": 1}
        # Code 3 (unresolvable: preempt and reclaim skip the node), with the reason.
        for pod, node in ((bad, "a2-0"), (a2, "old")):
            answer = post(f"{verbs}/predicate", {"task": task(pod), "node": {"Name": node}})
            assert answer["code"] == 3, answer
        answer = post(f"{verbs}/predicate", {"task": task(bad), "node": {"Name": "a2-0"}})
        assert UNKNOWN in answer["status"]
        answer = post(f"{verbs}/predicate", {"task": task(a2), "node": {"Name": "old"}})
        assert "module910bx8" in answer["status"] and "module910x8" in answer["status"]
        assert post(f"{verbs}/predicate", {"task": task(a2), "node": {"Name": "a2-0"}}) == {
            "status": "",
            "code": 0,
        }
        volcano = VolcanoScheduler(sim)
        assert volcano.session().bound == 1, volcano.reasons
        placed = store.get_pod("ns", "a2-job")
    assert placed["spec"]["nodeName"] in A2
    assert placed["metadata"]["annotations"]["huawei.com/Ascend910"] == (
        "Ascend910-0,Ascend910-1,Ascend910-2"
    )
    assert volcano.unresolvable["ns/bad-job"] == {"a2-0", "a2-1", "old"}
    assert all(UNKNOWN in why for why in volcano.reasons["ns/bad-job"].values())
    assert not store.get_pod("ns", "bad-job")["spec"].get("nodeName")


def test_kube_scheduler_places_chip8_node8_on_910b_and_never_preempts_for_an_unknown_policy() -> (
    None
):
    store = cluster()
    put_pod(store, "a2-job", "chip8-node8", "ascend-npu-scheduler")
    put_pod(store, "bad-job", "chip9-node9", "ascend-npu-scheduler")
    with serving(store) as sim:
        sim.service.refresh()
        scheduler = KubeScheduler(sim)
        sim.stack.callback(scheduler.close)
        assert scheduler.cycle() == 1, scheduler.reasons
        placed = store.get_pod("ns", "a2-job")
    assert placed["spec"]["nodeName"] in A2
    assert placed["metadata"]["annotations"]["huawei.com/Ascend910"] == (
        "Ascend910-0,Ascend910-1,Ascend910-2"
    )
    assert scheduler.preemption_candidates["ns/bad-job"] == []
    assert set(scheduler.reasons["ns/bad-job"]) == {"a2-0", "a2-1", "old"}
    assert all(UNKNOWN in why for why in scheduler.reasons["ns/bad-job"].values())
