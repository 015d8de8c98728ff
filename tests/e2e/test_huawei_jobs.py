"""Huawei's own job samples and system-test jobs (``tests/data/huawei_jobs``), expanded as their
controllers expand them (``tests/huawei_jobs.py``), placed end to end on a simulated cluster of
the hardware each names, through Volcano's sessions (the stand-in) and through kube-scheduler
(the stand-in, the pods' ``schedulerName`` set to the overlay's profile): every pod runs, every
NPU pod's container gets the chips the scheduler chose, those chips are a legal placement for
the node's product, and no chip is given twice."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from chip_topology.products import fits, mask_of
from chip_topology.routing import product_of_node
from contract.annotations import REAL_ANNOTATION
from contract.chip_names import KIND_OF_RESOURCE, parse_chip_list
from contract.groups import PODGROUP_APIS, VOLCANO, podgroups
from contract.objects import npu_request
from contract.vnpu import NPU_CORE_RESOURCE
from simulation.cluster import SimulatedCluster, simulated_cluster
from simulation.hardware import (
    ATLAS_200T_A2_BOX16,
    ATLAS_300I_DUO,
    ATLAS_300T,
    ATLAS_300T_A2,
    ATLAS_800T_A2,
    ATLAS_900_A3_SUPERPOD,
    ATLAS_950_SUPERPOD,
    Hardware,
)
from simulation.kube_scheduler import KubeScheduler
from simulation.volcano import VolcanoScheduler
from tests.e2e.helpers import place
from tests.huawei_jobs import Expanded, expand, sample_names

KUBE_SCHEDULER_PROFILE = "ascend-npu-scheduler"


@dataclass(frozen=True)
class Cluster:
    """The servers a sample names: Atlas 800 (910) servers, other products, 310P vNPU nodes."""

    atlas_800: int = 0
    hardware: tuple[tuple[Hardware, int], ...] = ()
    vnpu_nodes: int = 0


CLUSTERS: dict[str, Cluster] = {
    "310p-infer-dynamic-vnpu-npu-core.mindcluster-deploy.yaml": Cluster(vnpu_nodes=1),
    "310p-vnpu-mindcluster-mode.doc.volcano.yaml": Cluster(vnpu_nodes=1),
    "910-1chip-a300t-mindspore-acceltype-card.mindxdl-deploy.yaml": Cluster(
        hardware=((ATLAS_300T, 1),)
    ),
    "910-1chip-a300t-pytorch-chip1node2.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_300T, 1),)
    ),
    "910-2x8-pangu-fault-grace.mindcluster-deploy.yaml": Cluster(atlas_800=2),
    "910-2x8-preempt-tidal-priorityclass.doc.mind-cluster.yaml": Cluster(atlas_800=2),
    "910-8chips-a800-pytorch.mindcluster-deploy.yaml": Cluster(atlas_800=1),
    "910b-16chips-module-910b-16.mindxdl-deploy.yaml": Cluster(
        hardware=((ATLAS_200T_A2_BOX16, 1),)
    ),
    "910b-8chips-gpt3-fault-tolerance-reset-cm.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_800T_A2, 1),)
    ),
    "910b-8x8-module-910b-8-st-kwok.mind-cluster.yaml": Cluster(hardware=((ATLAS_800T_A2, 8),)),
    "910b-infer-1chip-chip8node8.mindcluster-deploy.yaml": Cluster(hardware=((ATLAS_800T_A2, 1),)),
    "950-superpod-sp-block-8.mindcluster-deploy.yaml": Cluster(hardware=((ATLAS_950_SUPERPOD, 8),)),
    "deployment-8x8-pod-level-fault-labels.st.mind-cluster.yaml": Cluster(
        hardware=((ATLAS_800T_A2, 8),)
    ),
    "mindspore-pangu-scheduler1-worker2-4chips-grace.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_200T_A2_BOX16, 2),)
    ),
    "mindspore-scheduler1-worker2-16chips.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_200T_A2_BOX16, 2),)
    ),
    "pytorch-a3-superpod-sp-block-32.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_900_A3_SUPERPOD, 4),)
    ),
    "pytorch-infer-310p-8chips-ranktable.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_300I_DUO, 1),)
    ),
    "pytorch-master1-worker1-2chips-chip1node2.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_300T_A2, 2),)
    ),
    "pytorch-qwen3-fault-retry-10.mindcluster-deploy.yaml": Cluster(hardware=((ATLAS_800T_A2, 2),)),
    "st-basic-training-1x8-master-only.mind-cluster.yaml": Cluster(hardware=((ATLAS_800T_A2, 1),)),
    "st-kwok-8x8-module-910b-8-tor-null.mind-cluster.yaml": Cluster(hardware=((ATLAS_800T_A2, 8),)),
    "st-llama-2x16-a3-sp-block-32.mind-cluster.yaml": Cluster(
        hardware=((ATLAS_900_A3_SUPERPOD, 4),)
    ),
    "statefulset-8x8-rings-config.st.mind-cluster.yaml": Cluster(hardware=((ATLAS_800T_A2, 8),)),
    "verl-grpo-sp-block-32-pod-rescheduling.mindcluster-deploy.yaml": Cluster(
        hardware=((ATLAS_900_A3_SUPERPOD, 4),)
    ),
}


def test_every_sample_has_its_hardware() -> None:
    assert set(CLUSTERS) == set(sample_names())


@pytest.fixture(params=sorted(CLUSTERS))
def sample(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def placed_cluster(sample: str) -> Iterator[tuple[SimulatedCluster, Expanded]]:
    wanted = CLUSTERS[sample]
    with simulated_cluster(
        wanted.atlas_800, hardware=wanted.hardware, vnpu_nodes=wanted.vnpu_nodes
    ) as cluster:
        yield cluster, expand(sample)


def submit(cluster: SimulatedCluster, job: Expanded, scheduler_name: str | None) -> None:
    """The controller's objects into the cluster (pods of ``scheduler_name`` when given)."""
    for configmap in job.configmaps:
        cluster.store.put("ConfigMap", configmap)
    if job.podgroup is not None:
        cluster.store.apis.add(PODGROUP_APIS[VOLCANO])
        cluster.store.create_object(podgroups(VOLCANO), job.podgroup)
    for pod in job.pods:
        if scheduler_name is not None:
            pod["spec"]["schedulerName"] = scheduler_name
        cluster.store.put("Pod", pod)
    cluster.service.refresh()


def keys(job: Expanded) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in job.pods]


def check_placed(cluster: SimulatedCluster, job: Expanded, reasons: dict[str, object]) -> None:
    """Every pod runs; every NPU pod got the scheduler's chips, legal for its node's product;
    no chip twice."""
    held: dict[tuple[str, int], str] = {}
    for pod in job.pods:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        stored = cluster.store.get_pod(meta["namespace"], meta["name"])
        assert stored["status"].get("phase") == "Running", (key, reasons.get(key))
        resource, count = npu_request(stored)
        if count == 0:
            continue
        assert key in cluster.admitted and key not in cluster.refused, key
        real = stored["metadata"]["annotations"][REAL_ANNOTATION]
        if resource == NPU_CORE_RESOURCE:
            continue  # a vNPU: its cores are the agent's (tests/e2e/test_vnpu.py)
        kind = KIND_OF_RESOURCE[resource]
        chips = parse_chip_list(real, kind=kind)
        assert len(chips) == count, (key, real)
        node = stored["spec"]["nodeName"]
        labels = cluster.store.get_node(node)["metadata"].get("labels") or {}
        product = product_of_node(kind, labels)
        distributed = len(job.npu_pods()) > 1
        assert fits(product, mask_of(chips), count, distributed), (key, product.name, chips)
        visible = cluster.admitted[key].allocation.response.envs["ASCEND_VISIBLE_DEVICES"]
        assert [int(c) for c in visible.split(",")] == list(chips), (key, visible, real)
        for chip in chips:
            assert (node, chip) not in held, f"{key} and {held[(node, chip)]} share {chip}"
            held[(node, chip)] = key


def test_through_volcano(placed_cluster: tuple[SimulatedCluster, Expanded]) -> None:
    cluster, job = placed_cluster
    submit(cluster, job, None)  # the controllers' own: volcano
    volcano = VolcanoScheduler(cluster)
    place(cluster, volcano, *keys(job))
    check_placed(cluster, job, dict(volcano.reasons))


def test_through_kube_scheduler(placed_cluster: tuple[SimulatedCluster, Expanded]) -> None:
    cluster, job = placed_cluster
    submit(cluster, job, KUBE_SCHEDULER_PROFILE)
    scheduler = KubeScheduler(cluster)
    try:
        place(cluster, scheduler, *keys(job))
        check_placed(cluster, job, dict(scheduler.reasons))
    finally:
        scheduler.close()
