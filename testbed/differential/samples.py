"""Huawei's own job samples and system-test jobs (``tests/data/huawei_jobs``) as cases: each
expanded as its controller expands it (``tests/huawei_jobs.py``), its NPU pods and pods without
NPUs, labels, annotations, selector, ranks and affinity (the samples keep their pods apart by a
required podAntiAffinity on ``kubernetes.io/hostname``) kept, on all-free servers of the hardware it
names (the same servers ``tests/e2e/test_huawei_jobs.py`` gives it), labelled as its selector
asks (an admin labels the servers a job selects).

Left out: the 310P dynamic vNPU samples (``huawei.com/npu-core``: Huawei's shipped
configuration sets ``presetVirtualDevice: "true"``, static vNPUs, under which the plugin does
not cut chips).
"""

from __future__ import annotations

from collections.abc import Mapping

from contract.annotations import RANK_INDEX_ANNOTATION, TASK_SPEC_ANNOTATION
from testbed.differential.cases import HARDWARE, Case, JobSpec, NodeSpec, Obj, listed
from testbed.differential.huawei import WORKLOADS
from tests.huawei_jobs import documents, expand, npu_request

# Sample → (hardware group, servers), as tests/e2e/test_huawei_jobs.py's CLUSTERS.
SAMPLES: Mapping[str, tuple[str, int]] = {
    "910-1chip-a300t-mindspore-acceltype-card.mindxdl-deploy.yaml": ("910 card x2", 1),
    "910-1chip-a300t-pytorch-chip1node2.mindcluster-deploy.yaml": ("910 card x2", 1),
    "910-2x8-pangu-fault-grace.mindcluster-deploy.yaml": ("910 x8", 2),
    "910-2x8-preempt-tidal-priorityclass.doc.mind-cluster.yaml": ("910 x8", 2),
    "910-8chips-a800-pytorch.mindcluster-deploy.yaml": ("910 x8", 1),
    "950-superpod-sp-block-8.mindcluster-deploy.yaml": ("950 SuperPoD", 1),
    "910b-16chips-module-910b-16.mindxdl-deploy.yaml": ("910B x16", 1),
    "910b-8chips-gpt3-fault-tolerance-reset-cm.mindcluster-deploy.yaml": ("910B x8", 1),
    "910b-8x8-module-910b-8-st-kwok.mind-cluster.yaml": ("910B x8", 8),
    "910b-infer-1chip-chip8node8.mindcluster-deploy.yaml": ("910B x8", 1),
    "deployment-8x8-pod-level-fault-labels.st.mind-cluster.yaml": ("910B x8", 8),
    "mindspore-pangu-scheduler1-worker2-4chips-grace.mindcluster-deploy.yaml": ("910B x16", 2),
    "mindspore-scheduler1-worker2-16chips.mindcluster-deploy.yaml": ("910B x16", 2),
    "pytorch-a3-superpod-sp-block-32.mindcluster-deploy.yaml": ("A3 SuperPoD x16", 4),
    "pytorch-infer-310p-8chips-ranktable.mindcluster-deploy.yaml": ("300I Duo", 1),
    "pytorch-master1-worker1-2chips-chip1node2.mindcluster-deploy.yaml": ("910 card x8", 2),
    "pytorch-qwen3-fault-retry-10.mindcluster-deploy.yaml": ("910B x8", 2),
    "st-basic-training-1x8-master-only.mind-cluster.yaml": ("910B x8", 1),
    "st-kwok-8x8-module-910b-8-tor-null.mind-cluster.yaml": ("910B x8", 8),
    "st-llama-2x16-a3-sp-block-32.mind-cluster.yaml": ("A3 SuperPoD x16", 4),
    "statefulset-8x8-rings-config.st.mind-cluster.yaml": ("910B x8", 8),
    "verl-grpo-sp-block-32-pod-rescheduling.mindcluster-deploy.yaml": ("A3 SuperPoD x16", 4),
}
# The pod annotations a controller writes that the plugin reads (ranks, the task's role).
_KEPT = (RANK_INDEX_ANNOTATION, TASK_SPEC_ANNOTATION)


def sample_case(sample: str) -> Case:
    """The sample's job on its servers."""
    group, count = SAMPLES[sample]
    hardware = HARDWARE[group]
    expanded = expand(sample)
    podgroup = expanded.podgroup or {}
    meta = podgroup.get("metadata") or {}
    npu_pods = [p for p in expanded.pods if npu_request(p)]
    plain = len(expanded.pods) - len(npu_pods)
    asked = npu_request(npu_pods[0])
    assert asked is not None
    resource, npu = asked
    labels = {**(meta.get("labels") or {})}
    selector: dict[str, str] = {}
    for pod in npu_pods:
        labels.update(pod["metadata"].get("labels") or {})
        selector.update(pod["spec"].get("nodeSelector") or {})
    annotations = dict(meta.get("annotations") or {})
    own = tuple(
        {k: v for k, v in (p["metadata"].get("annotations") or {}).items() if k in _KEPT}
        for p in npu_pods
    )
    plain_pods = [p for p in expanded.pods if not npu_request(p)]
    plain_notes = (plain_pods[0]["metadata"].get("annotations") or {}) if plain_pods else {}
    members = int((podgroup.get("spec") or {}).get("minMember", len(expanded.pods)))
    super_pod = 0 if hardware.super_pod else None
    rack = 0 if hardware.racks else None
    # A server more for each pod without NPUs: the NPU pods' podAntiAffinity on the job's
    # name keeps them off its node too.
    nodes = tuple(
        NodeSpec(listed(range(hardware.chips), hardware.kind), super_pod=super_pod, rack=rack)
        for _ in range(count + plain)
    )
    job = JobSpec(
        len(npu_pods),
        npu,
        labels,
        annotations,
        selector,
        resource,
        plain=plain,
        min_member=members if members != len(expanded.pods) else None,
        pod_annotations=own,
        plain_annotations={k: v for k, v in plain_notes.items() if k in _KEPT},
        affinity=npu_pods[0]["spec"].get("affinity"),
        plain_labels={
            **(meta.get("labels") or {}),
            **((plain_pods[0]["metadata"].get("labels") or {}) if plain_pods else {}),
        },
    )
    short = "sample-" + sample.split(".", 1)[0][:40].rstrip("-")
    return Case(
        short,
        group,
        nodes,
        job,
        exclusive=hardware.super_pod,
        note=sample,
        node_labels={k: v for k, v in selector.items() if k != "accelerator-type"},
    )


def sample_cases() -> list[Case]:
    return [sample_case(name) for name in SAMPLES]


# Samples the API server refuses as published, so Volcano's job controller makes no pod.
REFUSED_AS_WRITTEN: Mapping[str, str] = {
    "950-superpod-sp-block-8.mindcluster-deploy.yaml": "its pod template names a volume "
    "huawei.com/npu-config, not a DNS-1123 label: every pod is refused as invalid",
}


def applied_samples() -> list[str]:
    """The samples whose workload is a Volcano Job, a Deployment or a StatefulSet that the
    API server takes as written (the rest are AscendJobs, which need Huawei's Ascend Operator,
    or ``REFUSED_AS_WRITTEN``)."""
    return [
        s
        for s in SAMPLES
        if s not in REFUSED_AS_WRITTEN and any(d["kind"] in WORKLOADS for d in documents(s))
    ]


def applied_documents(sample: str) -> list[Obj]:
    """The sample's objects as its YAML has them, for the differential's namespace."""
    found = documents(sample)
    for document in found:
        document["metadata"].pop("namespace", None)
    return found
