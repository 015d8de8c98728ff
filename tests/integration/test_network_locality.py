"""Multi-node jobs through the extender: ToR affinity 1.0 and 2.0, logical SuperPoDs and
fault rescheduling, with the inputs and outputs as ConfigMaps and pod annotations."""

from __future__ import annotations

import json
from typing import Any

from contract.deviceinfo import DeviceInfo, encode
from contract.groups import COSCHEDULING, COSCHEDULING_GROUP_LABEL, PODGROUP_APIS, podgroups
from infra.kube.port import KubeError
from scheduler_core.engine import locality, rescheduling
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.wire import ExtenderFilterResult
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import Clock, add_node, schedule
from tests.unit.helpers import server_ip, tor_info

PER_TOR = 4
NSLB_1 = locality.Settings()


def node_name(tor: int, slot: int) -> str:
    return f"t{tor}-s{slot}"


A3_X8_SUPER_POD = {"accelerator-type": "module-a3-8-super-pod"}


def a3_x8_super_pod_node(api: MemoryCluster, name: str, super_pod: int) -> None:
    """An 8-chip Atlas 900 A3 SuperPoD server: an ``sp-block`` job counts its NPUs in 8s
    only on these (MindCluster ``internal/npu/factory.go`` routes ``sp-block`` to the A3
    SuperPoD handler, x8 by this label, else x16)."""
    add_node(api, name, super_pod=super_pod)
    node = api.get_node(name)
    node["metadata"]["labels"] = dict(A3_X8_SUPER_POD)
    api.put("Node", node)


# The schedulers of the job forms this harness places (tests/jobs.py): it plays kube-scheduler
# for all of them, so the extender binds their pods.
FORMS_SCHEDULERS = frozenset({"ascend-npu-scheduler", "default-scheduler", "volcano"})


class Cluster:
    """Nodes ``t<tor>-s<slot>`` with InternalIP ``server_ip(tor, slot)`` under ToRs of 4."""

    def __init__(
        self,
        tors: int,
        network: locality.Settings = NSLB_1,
        topology: bool = True,
        *,
        api: MemoryCluster | None = None,
        hold_limit: float = 600.0,
    ) -> None:
        self.api = api or MemoryCluster()
        self.clock = Clock()
        self.names: list[str] = []
        for t in range(tors):
            for s in range(PER_TOR):
                add_node(self.api, node_name(t, s), address=server_ip(t, s))
                self.names.append(node_name(t, s))
        if topology:
            self.api.put(
                "ConfigMap",
                {
                    "metadata": {"namespace": "kube-system", "name": "basic-tor-node-cm"},
                    "data": {"tor_info": tor_info(tors, PER_TOR)},
                },
            )
        self.extender = Extender(
            self.api,
            clock=self.clock,
            network=network,
            hold_limit=hold_limit,
            profiles=FORMS_SCHEDULERS,
        )
        self.service = SchedulerService(self.api, self.extender, clock=self.clock)
        self.service.refresh()

    def restart_scheduler(self) -> None:
        """A new scheduler process on the same cluster: it knows only what the API has."""
        self.extender = Extender(self.api, clock=self.clock, profiles=FORMS_SCHEDULERS)
        self.service = SchedulerService(self.api, self.extender, clock=self.clock)
        self.service.refresh()

    def gang(
        self,
        name: str,
        size: int,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        *,
        ranked: bool = True,
        controlled: bool = False,
        stated: bool = False,
    ) -> list[dict[str, Any]]:
        """The gang's pods (``controlled``: owned by a Volcano Job, as its controller makes
        them; ``stated``: their coscheduling PodGroup states their size, as a controller
        makes it, so the gang may hold chips while it waits)."""
        group = {"ascend.npu/gang": name}
        if stated:
            self.api.apis.add(PODGROUP_APIS[COSCHEDULING])
            podgroup = {"metadata": {"namespace": "ns", "name": name}, "spec": {"minMember": size}}
            self.api.create_object(podgroups(COSCHEDULING), podgroup)
            group = {COSCHEDULING_GROUP_LABEL: name}
        pods = []
        for r in range(size):
            pod = pod_object("ns", f"{name}-{r}", None, 8)
            pod["metadata"]["labels"] = {**group, **(labels or {})}
            if controlled:
                pod["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "batch.volcano.sh/v1alpha1",
                        "kind": "Job",
                        "name": name,
                        "uid": f"uid-job-{name}",
                        "controller": True,
                    }
                ]
            pod["metadata"]["annotations"] = {"ascend.npu/gang-size": str(size)}
            pod["metadata"]["annotations"].update(annotations or {})
            if ranked:
                pod["metadata"]["annotations"]["hccl/rankIndex"] = str(r)
            self.api.put("Pod", pod)
            pods.append(self.api.get_pod("ns", f"{name}-{r}"))
        self.service.refresh()
        return pods

    def filter(self, pod: dict[str, Any]) -> ExtenderFilterResult:
        return self.extender.filter({"Pod": pod, "NodeNames": self.names})

    def schedule(self, pod: dict[str, Any]) -> str | None:
        return schedule(self.extender, pod, self.names)

    def run(self, name: str) -> None:
        """What the agent does once the pod starts: AscendReal = the chips, Running."""
        pod = self.api.get_pod("ns", name)
        pod["metadata"]["annotations"]["huawei.com/AscendReal"] = pod["metadata"]["annotations"][
            "huawei.com/Ascend910"
        ]
        pod["status"]["phase"] = "Running"
        self.api.put("Pod", pod)

    def running_elsewhere(self, name: str, node: str) -> None:
        """A pod of another job running on all of ``node``'s chips."""
        chips = ",".join(f"Ascend910-{i}" for i in range(8))
        notes = {"huawei.com/Ascend910": chips, "huawei.com/AscendReal": chips}
        self.api.put("Pod", pod_object("ns", name, node, 8, annotations=notes, phase="Running"))

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.api.get_pod("ns", name)["metadata"]["annotations"])

    def configmap(self, namespace: str, name: str) -> dict[str, str]:
        return dict(self.api.get_configmap(namespace, name)["data"])


def test_tor_1_0_six_pods_take_one_whole_tor_and_two_servers_of_the_next_by_rank() -> None:
    # 4 ToRs of 4; one pod sits on t0-s0 → free 3, 4, 4, 4. n = 6: row = 1, column =
    # (6 % 4 + 3) % 4 = 1; whole ToRs 1, 2, 3 (3 > row + 1 = 2) → ToR 1 all + ToR 2 s0, s1.
    c = Cluster(4)
    small = pod_object("ns", "small", None, 8)
    c.api.put("Pod", small)
    c.service.refresh()
    assert c.schedule(c.api.get_pod("ns", "small")) is not None
    c.service.refresh()
    occupied = c.api.get_pod("ns", "small")["spec"]["nodeName"]
    assert occupied == "t0-s0"  # smallest name among equal scores
    pods = c.gang("big", 6, labels={"tor-affinity": "large-model-schema"})
    expected = [node_name(1, s) for s in range(4)] + [node_name(2, 0), node_name(2, 1)]
    for rank, pod in enumerate(pods):
        answer = c.filter(pod)
        assert answer.NodeNames == [expected[rank]], rank  # only the exact-rank node
        assert "not reserved for rank" in answer.FailedNodes["t3-s0"]
        assert c.extender.scores(pod, c.names) == {expected[rank]: 200.0}  # Volcano's view
    assert [c.schedule(p) for p in reversed(pods)] == list(reversed(expected))
    assert [c.annotations(f"big-{r}")["hccl/rankIndex"] for r in range(6)] == [
        str(r) for r in range(6)
    ]


def test_tor_affinity_label_errors_are_upstreams() -> None:
    c = Cluster(1)
    (pod,) = c.gang("odd", 1, labels={"tor-affinity": "fast"})
    answer = c.filter(pod)
    assert set(answer.FailedNodes.values()) == {
        "job tor affinity label check failed,tor-affinity label value is fast"
    }
    no_topology = Cluster(1, topology=False)
    (pod,) = no_topology.gang("big", 1, labels={"tor-affinity": "normal-schema"})
    assert set(no_topology.filter(pod).FailedNodes.values()) == {
        "job tor affinity check failed, cluster basic-tor-node-cm is not imported"
    }


def test_tor_1_0_a_large_model_job_waits_where_a_normal_job_spreads() -> None:
    # Two ToRs, 3 free each (s3 busy): 5 pods ≥ 4 need row 1 + 1: no whole ToR, and the
    # logical ToRs (slices of 2) cannot hold a row of 4 → large-model waits, normal greedy.
    c = Cluster(2)
    for t in range(2):
        busy = pod_object("ns", f"busy-{t}", node_name(t, 3), 8)
        busy["metadata"]["annotations"]["huawei.com/AscendReal"] = ",".join(
            f"Ascend910-{i}" for i in range(8)
        )
        busy["status"]["phase"] = "Running"
        c.api.put("Pod", busy)
        c.api.put("Node", {**c.api.get_node(node_name(t, 3))})
    (pod, *_) = c.gang("big", 5, labels={"tor-affinity": "large-model-schema"})
    assert "does not fit yet: tor affinity large-model-schema" in next(
        iter(c.filter(pod).FailedNodes.values())
    )
    (normal, *_) = c.gang("wide", 5, labels={"tor-affinity": "normal-schema"}, ranked=False)
    assert len(c.filter(normal).passing) == 5


def test_tor_2_0_the_remainder_goes_to_a_shared_tor_and_tor_share_cm_says_so() -> None:
    # 3 idle ToRs of 4, shared-tor-num 1: 6 pods → ToR 0 exclusive (4), remainder 2 → no
    # shared ToR yet, idle ToRs 1 and 2 (4 each) tie → ToR 1 becomes shared.
    c = Cluster(3, locality.Settings("2.0", shared_tor_num=1))
    pods = c.gang("big", 6, labels={"tor-affinity": "large-model-schema"})
    nodes = [c.schedule(p) for p in pods]
    assert nodes == [node_name(0, s) for s in range(4)] + [node_name(1, 0), node_name(1, 1)]
    assert c.annotations("big-0")["isSharedTor"] == "2"
    assert c.annotations("big-5")["isSharedTor"] == "1"
    assert c.annotations("big-5")["sharedTorIp"] == "1.0.0.1"
    c.service.refresh()
    shared = json.loads(c.configmap("volcano-system", "tor-share-cm")["global-tor-info"])
    assert {ip: (t["IsSharedTor"], t["IsHealthy"]) for ip, t in shared.items()} == {
        "1.0.0.0": (2, 0),
        "1.0.0.1": (1, 0),
        "1.0.0.2": (0, 0),
    }
    assert shared["1.0.0.1"]["nodes"] == [
        {"NodeIp": "10.1.0.0", "NodeName": "t1-s0", "JobName": ["ns/big"]},
        {"NodeIp": "10.1.0.1", "NodeName": "t1-s1", "JobName": ["ns/big"]},
    ]
    # A 2-pod padding job: exclusive ToR 0 is full, no unhealthy shared ToR; shared ToR 1
    # has 2 free → there, before the idle ToR 2.
    padding = c.gang("pad", 2, labels={"tor-affinity": "normal-schema"})
    assert [c.schedule(p) for p in padding] == [node_name(1, 2), node_name(1, 3)]
    # A scheduler restarted on the same cluster rebuilds the states from the pods.
    again = Extender(c.api, clock=c.clock, network=locality.Settings("2.0", shared_tor_num=1))
    SchedulerService(c.api, again, clock=c.clock).refresh()
    assert again.state.tor_share_data() == c.extender.state.tor_share_data()


def test_super_pod_blocks_follow_the_selection_order_and_annotate_the_pods() -> None:
    # sp-block 32 NPUs = 4 nodes; job of 8 nodes = 2 blocks; reserve 2.
    # SuperPoD 7: 6 nodes → (6 − 2) = 4 × 1 + 0; SuperPoD 9: 10 nodes → 4 × 2 + 0.
    # Both hold < 2 × 2 blocks; by (remainder, multiple): SuperPoD 7 (0, 1) first → one block
    # there, the second from SuperPoD 9.
    api = MemoryCluster()
    clock = Clock()
    names = [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(10)]
    for name in names:
        a3_x8_super_pod_node(api, name, 7 if name.startswith("a") else 9)
    extender = Extender(api, clock=clock)
    service = SchedulerService(api, extender, clock=clock)
    for r in range(8):
        pod = pod_object("ns", f"sp-{r}", None, 8)
        pod["spec"]["nodeSelector"] = dict(A3_X8_SUPER_POD)
        pod["metadata"]["labels"] = {"ascend.npu/gang": "sp"}
        pod["metadata"]["annotations"] = {
            "ascend.npu/gang-size": "8",
            "sp-block": "32",
            "hccl/rankIndex": str(r),
        }
        api.put("Pod", pod)
    service.refresh()
    placed = []
    for r in range(8):
        pod = api.get_pod("ns", f"sp-{r}")
        (node,) = extender.filter({"Pod": pod, "NodeNames": names}).passing
        assert (
            extender.bind(
                {
                    "PodName": f"sp-{r}",
                    "PodNamespace": "ns",
                    "PodUID": pod["metadata"]["uid"],
                    "Node": node,
                }
            ).Error
            == ""
        )
        placed.append(node)
    assert placed == ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]
    notes = [api.get_pod("ns", f"sp-{r}")["metadata"]["annotations"] for r in (0, 7)]
    assert [(n["super-pod-rank"], n["super-pod-id"]) for n in notes] == [("0", "7"), ("1", "9")]


def test_a_fault_job_restarts_keeps_its_healthy_rank_and_moves_the_faulty_one() -> None:
    # Two one-pod jobs hold t0-s0 and t0-s1, so the gang runs on t0-s2 (rank 0), t0-s3 (1).
    c = Cluster(2, topology=False)
    for name in ("other-0", "other-1"):
        c.api.put("Pod", pod_object("ns", name, None, 8))
        c.service.refresh()
        c.schedule(c.api.get_pod("ns", name))
        c.run(name)
    pods = c.gang("job", 2, labels={"fault-scheduling": "force"})
    first = [c.schedule(p) for p in pods]
    assert first == ["t0-s2", "t0-s3"]
    for r in range(2):
        c.run(f"job-{r}")
    # Chip 3 of rank 1's node fails (its agent republishes; the kubelet sees 7 healthy).
    add_node(c.api, "t0-s3", frozenset({3}), address="10.0.0.3")
    c.service.refresh()
    assert {p["metadata"]["name"] for p in c.api.list_pods(None)[0]} == {"other-0", "other-1"}
    c.extender.state.events.flush()
    restarted = [e for e in c.api.events if e["reason"] == "NPUFaultRestart"]
    assert sorted(e["involvedObject"]["name"] for e in restarted) == ["job-0", "job-1"]
    assert "fault job ns/job (force): failed chips on t0-s3" in restarted[0]["message"]
    for name in ("other-0", "other-1"):  # the others end: t0-s0, t0-s1 free up
        c.api.delete("Pod", "ns", name)
    c.service.refresh()  # the next view shows them all gone
    record = c.configmap("volcano-system", "vcjob-fault-npu-cm")
    assert rescheduling.verify(record)
    assert json.loads(record["fault-node"]) == ["t0-s3"]
    config = c.configmap("ns", "fault-config-job")
    assert json.loads(config["fault-npus"])["FaultRankIds"] == ["11"]  # chip 3 + 8 × rank 1
    # Until the job's pods come back, a one-pod job may not take its healthy node.
    c.api.put("Pod", pod_object("ns", "lone", None, 8))
    answer = c.filter(c.api.get_pod("ns", "lone"))
    assert answer.FailedNodes["t0-s2"] == "held for fault job ns/job to come back"
    assert "t0-s0" in answer.passing
    c.api.delete("Pod", "ns", "lone")
    # The controller recreates the pods: rank 0 returns to t0-s2 although t0-s0 now scores
    # as well and sorts first; rank 1 moves off the faulty node, to t0-s0.
    again = c.gang("job", 2, labels={"fault-scheduling": "force"})
    second = [c.schedule(p) for p in again]
    assert second == ["t0-s2", "t0-s0"]
    c.service.refresh()
    assert json.loads(c.configmap("volcano-system", "vcjob-fault-npu-cm")["fault-node"]) == []


def test_a_job_without_fault_scheduling_is_left_running_on_a_failed_chip() -> None:
    c = Cluster(1, topology=False)
    pods = c.gang("job", 2)
    for p in pods:
        c.schedule(p)
    for r in range(2):
        c.run(f"job-{r}")
    add_node(c.api, "t0-s1", frozenset({3}), address="10.0.0.1")
    c.service.refresh()
    assert len(c.api.list_pods(None)[0]) == 2


def test_a_grace_fault_job_is_evicted_politely_then_forced_after_the_grace_over_time() -> None:
    deleted: list[tuple[str, int | None]] = []

    class Recording(MemoryCluster):
        def delete_pod(self, namespace: str, name: str, uid: str, grace: int | None) -> None:
            deleted.append((name, grace))  # the pods stay: their containers are still stopping
            pod = self.get_pod(namespace, name)
            pod["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:20Z"
            self.put("Pod", pod)

    c = Cluster(1, topology=False, api=Recording())
    for p in c.gang("job", 2, labels={"fault-scheduling": "grace"}):
        c.schedule(p)
    for r in range(2):
        c.run(f"job-{r}")
    c.api.put(
        "ConfigMap",
        {
            "metadata": {
                "namespace": "kube-system",
                "name": "mindx-dl-deviceinfo-t0-s0",
                "labels": {"mx-consumer-cim": "true"},
            },
            "data": encode(
                DeviceInfo(
                    frozenset(range(7)), frozenset({7}), frozenset(), update_time=int(c.clock.now)
                )
            ),
        },
    )
    node = c.api.get_node("t0-s0")
    node["status"]["allocatable"]["huawei.com/Ascend910"] = "7"
    c.api.put("Node", node)
    c.service.refresh()
    assert deleted == [("job-0", None), ("job-1", None)]
    c.clock.now += 899
    c.service.refresh()  # terminating within their grace period: not deleted again
    assert len(deleted) == 2
    c.clock.now += 1
    c.service.refresh()
    assert deleted[2:] == [("job-0", 0), ("job-1", 0)]


def test_a_fault_job_that_never_comes_back_frees_its_nodes_after_the_hold_limit() -> None:
    c = Cluster(1, topology=False, hold_limit=200)  # < DeviceInfo's 300 s
    for p in c.gang("job", 2, labels={"fault-scheduling": "force"}):
        c.schedule(p)
    for r in range(2):
        c.run(f"job-{r}")
    add_node(c.api, "t0-s1", frozenset({3}), address="10.0.0.1")
    c.service.refresh()
    c.service.refresh()
    c.api.put("Pod", pod_object("ns", "lone", None, 8))
    lone = c.api.get_pod("ns", "lone")
    assert "t0-s0" not in c.filter(lone).passing
    freed = c.extender.state.freed
    c.clock.now += 199
    c.service.maintain()
    assert c.extender.state.freed == freed, "held, within the limit"
    c.clock.now += 2
    c.service.maintain()
    # The hold lapses with no change kube-scheduler sees: the plugin's poll of ``freed``
    # tries the pods it refused again.
    assert c.extender.state.freed > freed
    assert "t0-s0" in c.filter(lone).passing
    assert json.loads(c.configmap("volcano-system", "vcjob-fault-npu-cm")["fault-node"]) == []


def test_a_scheduler_restarted_during_a_fault_restart_still_returns_healthy_ranks_home() -> None:
    c = Cluster(2, topology=False)
    for name in ("other-0", "other-1"):  # as in the test above: the gang on t0-s2, t0-s3
        c.api.put("Pod", pod_object("ns", name, None, 8))
        c.service.refresh()
        c.schedule(c.api.get_pod("ns", name))
        c.run(name)
    for p in c.gang("job", 2, labels={"fault-scheduling": "force"}):
        c.schedule(p)
    for r in range(2):
        c.run(f"job-{r}")
    add_node(c.api, "t0-s3", frozenset({3}), address=server_ip(0, 3))
    c.service.refresh()  # the fault job's pods are deleted
    for name in ("other-0", "other-1"):
        c.api.delete("Pod", "ns", name)
    # A new scheduler process: it knows the fault only from vcjob-fault-npu-cm.
    c.restart_scheduler()
    c.api.put("Pod", pod_object("ns", "lone", None, 8))
    answer = c.filter(c.api.get_pod("ns", "lone"))
    assert answer.FailedNodes["t0-s2"] == "held for fault job ns/job to come back"
    c.api.delete("Pod", "ns", "lone")
    again = c.gang("job", 2, labels={"fault-scheduling": "force"})
    assert [c.schedule(p) for p in again] == ["t0-s2", "t0-s0"]


def test_a_scheduler_restarted_before_the_fault_pods_were_deleted_deletes_them() -> None:
    class Refusing(MemoryCluster):
        refuse = True

        def delete_pod(self, namespace: str, name: str, uid: str, grace: int | None) -> None:
            if self.refuse:
                raise KubeError("delete pod: the API server is unreachable")
            super().delete_pod(namespace, name, uid, grace)

    api = Refusing()
    c = Cluster(1, topology=False, api=api)
    for p in c.gang("job", 2, labels={"fault-scheduling": "force"}):
        c.schedule(p)
    for r in range(2):
        c.run(f"job-{r}")
    add_node(api, "t0-s1", frozenset({3}), address=server_ip(0, 1))
    c.service.refresh()  # fault seen and recorded, the deletions refused
    assert len(api.list_pods(None)[0]) == 2
    api.refuse = False
    c.restart_scheduler()
    assert api.list_pods(None)[0] == []


def test_a_gang_whose_reservation_expired_half_bound_completes_beside_its_running_rank() -> None:
    # 3 pods < a ToR of 4: best fit picks ToR 1 (t1-s0..s2). Only rank 0 binds before the
    # reservation expires; ranks 1 and 2 are then placed beside it, on ToR 1, although the
    # nodes of ToR 0 sort first by name.
    c = Cluster(2)
    pods = c.gang("job", 3, labels={"tor-affinity": "normal-schema"})
    assert c.schedule(pods[0]) == "t1-s0"
    c.run("job-0")
    c.clock.now += 61  # past the gang TTL
    c.service.refresh()
    assert [c.schedule(p) for p in pods[1:]] == ["t1-s1", "t1-s2"]
    assert [c.annotations(f"job-{r}")["hccl/rankIndex"] for r in range(3)] == ["0", "1", "2"]


def test_tor_2_0_volcano_gets_upstreams_scores_along_the_jobs_servers() -> None:
    # 2 idle ToRs of 4, 6 pods: ToR 0 whole, 2 servers of ToR 1 (made shared).
    c = Cluster(2, locality.Settings("2.0", shared_tor_num=2))
    pods = c.gang("big", 6, labels={"tor-affinity": "normal-schema"})
    assert len(c.filter(pods[0]).passing) == 1  # reserves the job
    scores = c.extender.scores(pods[5], c.names)
    assert scores == {
        **{node_name(0, s): 100.0 for s in range(4)},
        node_name(1, 0): 99.0,
        node_name(1, 1): 200.0,
    }
    assert c.extender.scores(pods[0], c.names) == {node_name(0, 0): 200.0}


def test_tor_2_0_a_job_with_ranks_still_bound_reuses_its_own_tors() -> None:
    # 6 pods on 3 idle ToRs of 4: ToR 0 whole (exclusive), 2 servers of ToR 1 (shared).
    # Ranks 0 and 4 bind, the reservation expires: the other 4 ranks are placed as upstream
    # reschedules a job with fewer pods to place than it has: on its own ToRs first.
    c = Cluster(3, locality.Settings("2.0", shared_tor_num=2))
    pods = c.gang("job", 6, labels={"tor-affinity": "normal-schema"})
    assert c.schedule(pods[0]) == "t0-s0"
    assert c.schedule(pods[4]) == "t1-s0"
    c.run("job-0")
    c.run("job-4")
    c.clock.now += 61  # past the gang TTL
    c.service.refresh()
    placed = {r: c.schedule(pods[r]) for r in (1, 2, 3, 5)}
    assert placed == {1: "t0-s1", 2: "t0-s2", 3: "t0-s3", 5: "t1-s1"}


def test_nodes_reporting_no_super_pod_are_not_grouped_into_one_and_refuse_super_pod_jobs() -> None:
    # -1 and -2 are the DeviceInfo's "no SuperPoD" (driver 0xffffffff; not reported or the
    # query failed); a recorded A3 node publishes -2 (tests/data/deviceinfo/).
    api = MemoryCluster()
    clock = Clock()
    names = ["x0", "x1", "y0", "y1"]
    for name in names:
        a3_x8_super_pod_node(api, name, -2 if name.startswith("x") else -1)
    extender = Extender(api, clock=clock)
    service = SchedulerService(api, extender, clock=clock)
    for r in range(2):
        pod = pod_object("ns", f"sp-{r}", None, 8)
        pod["spec"]["nodeSelector"] = dict(A3_X8_SUPER_POD)
        pod["metadata"]["labels"] = {"ascend.npu/gang": "sp"}
        pod["metadata"]["annotations"] = {"ascend.npu/gang-size": "2", "sp-block": "16"}
        api.put("Pod", pod)
    plain = pod_object("ns", "plain", None, 8)
    plain["spec"]["nodeSelector"] = dict(A3_X8_SUPER_POD)
    api.put("Pod", plain)
    service.refresh()
    answer = extender.filter({"Pod": api.get_pod("ns", "sp-0"), "NodeNames": names})
    assert answer.NodeNames == []
    assert "node x0 is not super-pod node or superPodID is not set" in answer.FailedNodes["x0"]
    assert schedule(extender, api.get_pod("ns", "plain"), names) is not None, "placed as usual"


def _half_bound_large_model_gang(c: Cluster, controlled: bool) -> list[dict[str, Any]]:
    """A 2-pod large-model gang whose reservation expired with rank 0 running on t1-s0,
    the other nodes of ToR 0 then taken by other jobs: the rest cannot be placed (it may
    only go under ToR 1), though ToR 0 is free."""
    pods = c.gang(
        "job", 2, labels={"tor-affinity": "large-model-schema"}, controlled=controlled, stated=True
    )
    assert c.schedule(pods[0]) == node_name(1, 0)  # best fit: the last of equal ToRs
    c.run("job-0")
    c.service.refresh()  # the gang runs partly from now
    c.clock.now += 61  # past the gang TTL: rank 1's place is given back
    for s in (1, 2, 3):
        c.running_elsewhere(f"other-{s}", node_name(1, s))
    c.service.refresh()
    assert c.schedule(pods[1]) is None
    return pods


def test_the_rest_of_a_large_model_gang_has_the_freest_node_of_its_tor_held_for_it() -> None:
    # t1-s2 frees all but one chip: it is held for the rest (not a whole node of ToR 0,
    # where the rest may not go), so one-pod jobs let it drain and go to ToR 0.
    c = Cluster(2)
    _half_bound_large_model_gang(c, controlled=False)
    c.api.delete("Pod", "ns", "other-2")
    c.api.put(
        "Pod",
        pod_object(
            "ns",
            "one-chip",
            node_name(1, 2),
            1,
            annotations={
                "huawei.com/Ascend910": "Ascend910-0",
                "huawei.com/AscendReal": "Ascend910-0",
            },
            phase="Running",
        ),
    )
    c.service.refresh()
    c.api.put("Pod", pod_object("ns", "small", None, 1))
    answer = c.filter(c.api.get_pod("ns", "small"))
    assert answer.FailedNodes[node_name(1, 2)].startswith("held for gang ns/job")
    assert node_name(0, 0) in answer.passing
    c.api.delete("Pod", "ns", "one-chip")
    c.service.refresh()
    assert c.schedule(c.api.get_pod("ns", "job-1")) == node_name(1, 2)


def test_a_gang_partly_running_past_its_ttl_with_no_place_for_the_rest_restarts_whole() -> None:
    c = Cluster(2)
    _half_bound_large_model_gang(c, controlled=True)
    c.service.refresh()  # the rest waits; the gang has run partly for over the TTL
    assert {p["metadata"]["name"] for p in c.api.list_pods(None)[0]} == {
        f"other-{s}" for s in (1, 2, 3)
    }
    c.extender.state.events.flush()
    restarted = [e for e in c.api.events if e["reason"] == "NPUGangRestart"]
    assert sorted(e["involvedObject"]["name"] for e in restarted) == ["job-0", "job-1"]
    assert "gang ns/job: 1 of its pods ran longer than 60 s" in restarted[0]["message"]
    # Its controller makes it again: whole, it goes under ToR 0.
    pods = c.gang("job", 2, labels={"tor-affinity": "large-model-schema"}, controlled=True)
    assert [c.schedule(p) for p in pods] == [node_name(0, 0), node_name(0, 1)]


def test_a_gang_partly_running_whose_pods_no_controller_owns_is_left_running() -> None:
    c = Cluster(2)
    _half_bound_large_model_gang(c, controlled=False)
    c.clock.now += 61
    c.service.refresh()
    assert {"job-0", "job-1"} <= {p["metadata"]["name"] for p in c.api.list_pods(None)[0]}
