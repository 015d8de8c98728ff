"""Jobs as users submit them (``tests/data/jobs``, ``tests/jobs.py``): the gang, its size, its
settings and its ranks come from the objects the controllers write, not from this project's
own label."""

from __future__ import annotations

from typing import Any

from contract.groups import COSCHEDULING, PODGROUP_APIS, VOLCANO, podgroups
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster
from tests.integration.test_network_locality import PER_TOR, Cluster, node_name
from tests.jobs import podgroup, submit

POD_GROUP_INVALID = "NPUPodGroupInvalid"


# The labels Huawei's installation puts on a 910 module server, which the jobs' nodeSelectors
# name (tests/data/jobs/volcano-job.yaml): the filter keeps a pod off a node without them, as
# kube-scheduler's NodeAffinity and Volcano's predicates do.
HUAWEI_NODE_LABELS = {"host-arch": "huawei-arm", "accelerator-type": "module"}


def cluster(tors: int = 2, api: MemoryCluster | None = None) -> Cluster:
    c = Cluster(tors, api=api)
    for name in c.names:
        node = c.api.get_node(name)
        node["metadata"]["labels"].update(HUAWEI_NODE_LABELS)
        c.api.put("Node", node)
    c.service.refresh()
    return c


def ranks(c: Cluster, pods: list[dict[str, Any]]) -> list[str]:
    return [
        c.api.get_pod(p["metadata"]["namespace"], p["metadata"]["name"])["metadata"]["annotations"][
            "hccl/rankIndex"
        ]
        for p in pods
    ]


def tor_of(node: str) -> str:
    return node.split("-", maxsplit=1)[0]


def test_a_volcano_job_of_huaweis_shape_is_one_gang_with_its_podgroups_settings() -> None:
    # tor-affinity, fault-scheduling and fault-retry-times are on the Job, so on its PodGroup
    # only: its pods carry none of them. Four 8-chip pods, minAvailable 4: one gang.
    c = cluster(2)
    pods = submit(c.api, "volcano")
    c.service.refresh()
    first = c.filter(pods[0])
    assert len(first.passing) == 1, "the gang is reserved whole: rank 0 has one node"
    placed = [c.schedule(p) for p in pods]
    assert None not in placed and len(set(placed)) == 4
    assert len({tor_of(str(n)) for n in placed}) == 1, "large-model-schema: one whole ToR"
    assert ranks(c, pods) == ["0", "1", "2", "3"], "ranks from volcano.sh/task-index"


def test_without_its_podgroup_a_volcano_pod_waits_and_without_volcano_it_stands_alone() -> None:
    c = cluster(1)
    pods = submit(c.api, "volcano", podgroup=False)
    c.service.refresh()
    answer = c.filter(pods[0])
    assert answer.passing == [] and not answer.FailedAndUnresolvableNodes
    assert "has not been seen yet" in answer.FailedNodes[node_name(0, 0)]
    c.api.create_object(podgroups(VOLCANO), podgroup("volcano"))
    c.service.refresh()
    assert len(c.filter(pods[0]).passing) == 1, "seen: the gang is reserved"

    bare = cluster(1)  # no Volcano here: the annotation leads nowhere, each pod is a job
    pods = submit(bare.api, "volcano", podgroup=False)
    bare.api.apis.clear()
    bare.service.refresh()
    assert len(bare.filter(pods[0]).passing) == PER_TOR


def test_a_malformed_podgroup_harms_only_its_own_job_and_says_so_on_its_pods() -> None:
    c = cluster(1)
    broken = podgroup("volcano")
    broken["spec"]["minMember"] = "four"
    c.api.apis.add(PODGROUP_APIS[VOLCANO])
    c.api.create_object(podgroups(VOLCANO), broken)
    pods = submit(c.api, "volcano", podgroup=False)
    others = submit(c.api, "kueue")
    c.service.refresh()
    answer = c.filter(pods[0])
    assert answer.passing == []
    why = answer.FailedAndUnresolvableNodes[node_name(0, 0)]
    assert "malformed" in why and "minMember 'four'" in why
    assert len(c.filter(others[0]).passing) == 2, "the Kueue group's two nodes are reserved"

    def warned() -> set[str]:
        return {
            e["involvedObject"]["name"] for e in c.api.events if e["reason"] == POD_GROUP_INVALID
        }

    assert wait_for(lambda: warned() == {p["metadata"]["name"] for p in pods}), warned()


def test_a_setting_that_differs_between_podgroup_and_pod_refuses_the_job_naming_both() -> None:
    c = cluster(2)
    pods = submit(c.api, "volcano")
    odd = c.api.get_pod("vcjob", pods[2]["metadata"]["name"])
    odd["metadata"]["labels"]["tor-affinity"] = "normal-schema"
    c.api.put("Pod", odd)
    c.service.refresh()
    why = c.filter(pods[0]).FailedAndUnresolvableNodes[node_name(0, 0)]
    assert "label tor-affinity is 'large-model-schema' on PodGroup vcjob/mindx-dls-test" in why
    assert "'normal-schema' on pod mindx-dls-test-default-test-2" in why


def test_a_group_whose_pods_ask_different_counts_is_refused_naming_it() -> None:
    c = cluster(1)
    pods = submit(c.api, "kueue")
    small = c.api.get_pod("serve", "infer-shard-1")
    small["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = "4"
    c.api.put("Pod", small)
    c.service.refresh()
    why = c.filter(pods[0]).FailedAndUnresolvableNodes[node_name(0, 0)]
    assert (
        why
        == "Kueue pod group serve/infer-shards: its pods ask for 4 and 8 NPUs; one job, one count"
    )


def test_a_pytorchjob_under_coscheduling_is_one_gang_ranked_master_first() -> None:
    c = cluster(1)
    pods = submit(c.api, "pytorch")
    c.service.refresh()
    assert [p["metadata"]["name"] for p in pods][:2] == ["llama-sft-master-0", "llama-sft-worker-0"]
    assert len(c.filter(pods[1]).passing) == 1, "a gang of minMember 4: the reservation's node"
    placed = [c.schedule(p) for p in reversed(pods)]  # workers come first: ranks still hold
    assert None not in placed
    assert ranks(c, pods) == ["0", "1", "2", "3"], "RANK: the master 0, the workers after"


def test_a_kueue_pod_group_and_an_indexed_job_are_gangs_of_their_count() -> None:
    c = cluster(1)
    shards = submit(c.api, "kueue")
    indexed = submit(c.api, "indexed")
    c.service.refresh()
    for pods in (shards, indexed):
        assert [c.schedule(p) for p in pods].count(None) == 0
    assert ranks(c, indexed) == ["0", "1"], "from batch.kubernetes.io/job-completion-index"


def test_fault_retry_times_on_the_podgroup_restarts_the_job_when_a_pod_fails() -> None:
    c = cluster(1)
    pods = submit(c.api, "volcano")
    c.service.refresh()
    for pod in pods:
        assert c.schedule(pod) is not None
        _run(c, pod)
    failed = c.api.get_pod("vcjob", pods[1]["metadata"]["name"])
    failed["status"]["phase"] = "Failed"
    c.api.put("Pod", failed)
    c.service.refresh()
    left = {p["metadata"]["name"] for p in c.api.list_pods(None)[0]}
    assert not left & {p["metadata"]["name"] for p in pods}, "the whole job restarts"
    record = c.configmap("volcano-system", "vcjob-fault-npu-cm")
    assert "vcjob/mindx-dls-test-6f1c9b7e-2d0a-4b8e-9a61-3c5d2e7f8a90" in str(record)


def _run(c: Cluster, pod: dict[str, Any]) -> None:
    """What the agent does once the pod starts: AscendReal = the chips, Running."""
    meta = pod["metadata"]
    stored = c.api.get_pod(meta["namespace"], meta["name"])
    notes = stored["metadata"]["annotations"]
    notes["huawei.com/AscendReal"] = notes["huawei.com/Ascend910"]
    stored["status"]["phase"] = "Running"
    c.api.put("Pod", stored)


def test_the_coscheduling_api_is_read_only_where_it_is_served() -> None:
    c = cluster(1)
    pods = submit(c.api, "pytorch", podgroup=False)
    c.api.apis.discard(PODGROUP_APIS[COSCHEDULING])
    c.service.refresh()
    assert len(c.filter(pods[0]).passing) == PER_TOR, "no such API: four jobs of one pod"
