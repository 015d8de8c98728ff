"""A case's objects as their owners write them (the module docstring of
``testbed.differential.huawei`` says which and why): each node, its DeviceInfo ConfigMap and the
pod holding its used chips; the job's PodGroup and pods. Named after the case's key and
labelled with it, in the ``differential`` namespace."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping

from contract import deviceinfo
from contract.annotations import REAL_ANNOTATION
from contract.chip_names import chip_name
from contract.go_json import go_json
from contract.vnpu import CORE_SPECS, NPU_CORE_ANNOTATION, CoreChoice
from testbed.differential.cases import Case, NodeSpec, Obj

NAMESPACE = "differential"
CASE_LABEL = "differential.ascend-npu.io/case"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
PODGROUPS = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CONFIGMAPS = f"/api/v1/namespaces/{deviceinfo.NAMESPACE}/configmaps"


def meta(
    name: str,
    key: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "labels": {CASE_LABEL: key, **(labels or {})}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def node_objects(
    case: Case, key: str, i: int, node: NodeSpec, *, update_time: int | None = None
) -> tuple[Obj, Obj, list[Obj]]:
    """The Node, its DeviceInfo ConfigMap (``update_time``: its ``UpdateTime``, else now) and
    the pods holding its used chips: one for the chips held whole, one for each vNPU. A vNPU
    node offers AI cores (``huawei.com/npu-core``: its chips' cores at capacity, the healthy
    ones' allocatable)."""
    spec = case.spec
    kind = spec.kind
    name = f"{key}-n{i}"
    address = node.address or f"10.80.{i // 250}.{i % 250 + 1}"
    base = {
        chip_name(c, kind): {"IP": f"10.70.{i % 250}.{c + 1}", "SuperDeviceID": 0}
        for c in range(spec.chips)
    }
    capacity = {"cpu": "192", "memory": "1536Gi", "pods": "110"}
    unit = spec.vnpu_cores or 1
    healthy = (spec.chips - len(node.unhealthy)) * unit
    # The kubelet's own labels (pkg/kubelet/kubelet_node_status.go): samples keep their pods
    # apart by podAntiAffinity on kubernetes.io/hostname.
    kubelet = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    labels = {**kubelet, **spec.labels, **case.node_labels}
    node_obj: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, key, labels=labels, annotations={"baseDeviceInfos": go_json(base)}),
        "status": {
            "capacity": {**capacity, spec.resource: str(spec.chips * unit)},
            "allocatable": {**capacity, spec.resource: str(healthy)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
        },
    }
    info = deviceinfo.DeviceInfo(
        free=frozenset(node.free),
        unhealthy=frozenset(node.unhealthy),
        network_unhealthy=frozenset(node.network_unhealthy),
        update_time=int(time.time()) if update_time is None else update_time,
        super_pod_id=node.super_pod,
        server_index=i if node.super_pod is not None else None,
        rack_id=node.rack,
        kind=kind,
    )
    configmap: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(
            deviceinfo.configmap_name(name),
            key,
            labels={deviceinfo.CONSUMER_LABEL[0]: deviceinfo.CONSUMER_LABEL[1]},
        ),
        "data": deviceinfo.encode(info),
    }
    used = node.used(spec.chips)
    holders: list[Obj] = []
    if used and spec.vnpu_cores:  # whole chips of npu-core, as a scheduler chose them
        real = deviceinfo.chip_list(used, kind)
        held = {NPU_CORE_ANNOTATION: str(CoreChoice(used)), REAL_ANNOTATION: real}
        cores = {spec.resource: len(used) * spec.vnpu_cores}
        holders.append(_holder(f"{name}-held", key, name, held, cores))
    elif used:
        chips = deviceinfo.chip_list(used, kind)
        held = {spec.resource: chips, REAL_ANNOTATION: chips}
        holders.append(_holder(f"{name}-held", key, name, held, {spec.resource: len(used)}))
    for v, (chip, template) in enumerate(node.vnpus):
        # The vNPU the agent made, one vGroup each (its AscendReal:
        # <chip kind>-<core spec>-<vdev id>-<chip>_<vgroup>).
        group = sum(1 for c, _ in node.vnpus[:v] if c == chip)
        real = f"{kind.name}-{CORE_SPECS[template]}-{100 + v}-{chip}_{group}"
        held = {NPU_CORE_ANNOTATION: f"{chip}-{template}", REAL_ANNOTATION: real}
        cores = {spec.resource: spec.templates[template].cores}
        holders.append(_holder(f"{name}-v{v}", key, name, held, cores))
    return node_obj, configmap, holders


def _holder(
    name: str, key: str, node: str, annotations: Mapping[str, str], requests: Mapping[str, int]
) -> Obj:
    """A pod bound to ``node`` asking ``requests``, holding what its annotations say (created
    bound: no scheduler of the case's sees it as its own)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, key, annotations=annotations),
        "spec": {
            "nodeName": node,
            "schedulerName": "differential-holder",
            "containers": [
                {
                    "name": "held",
                    "image": "held",
                    "resources": {
                        "requests": {r: str(n) for r, n in requests.items()},
                        "limits": {r: str(n) for r, n in requests.items()},
                    },
                }
            ],
        },
    }


def job_objects(case: Case, key: str) -> tuple[Obj, list[Obj]]:
    """The PodGroup and the pods of the case's job: NPU pods ``<key>-p<i>``, pods without
    NPUs ``<key>-q<i>``. ``minResources`` is what Volcano's job controller writes: the requests
    of the first ``minMember`` pods (``pkg/controllers/job/job_controller_util.go``
    CalcPGMinResources)."""
    job = case.job
    group = f"{key}-pg"
    npu_members = min(job.pods, max(job.members - job.plain, 0))
    podgroup: Obj = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": meta(group, key, labels=dict(job.labels), annotations=dict(job.annotations)),
        "spec": {
            "minMember": job.members,
            "queue": "default",
            "minResources": {job.resource: str(max(npu_members, 1) * job.npu)},
        },
    }
    selector = {**job.selector, CASE_LABEL: key}

    def pod(
        name: str,
        request: Mapping[str, str],
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
    ) -> Obj:
        spec: Obj = {
            "schedulerName": "volcano",
            "nodeSelector": selector,
            "containers": [
                {
                    "name": "main",
                    "image": "main",
                    "resources": {"requests": dict(request), "limits": dict(request)},
                }
            ],
        }
        if job.affinity and name.startswith(f"{key}-p"):
            spec["affinity"] = copy.deepcopy(dict(job.affinity))
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta(
                name,
                key,
                labels=dict(labels),
                annotations={**job.annotations, **annotations, GROUP_ANNOTATION: group},
            ),
            "spec": spec,
        }

    plain_labels = job.labels if job.plain_labels is None else job.plain_labels
    pods = [
        pod(f"{key}-q{i}", {"cpu": "1"}, job.plain_annotations, plain_labels)
        for i in range(job.plain)
    ]
    for rank in range(job.pods):
        own = job.pod_annotations[rank] if rank < len(job.pod_annotations) else {}
        pods.append(pod(f"{key}-p{rank}", {job.resource: str(job.npu)}, own, job.labels))
    return podgroup, pods


def alone_in_cluster(case: Case) -> bool:
    """Whether the case must run with no other case's nodes: its handler reads every node of
    the session (``exclusive``), or the job asks more chips than its nodes have free, which the
    plugin's enqueue check counts over the whole cluster (``npu.go`` getNpuNum)."""
    if case.spec.vnpu_cores:  # the enqueue check skips npu-core jobs (npu.go HandlerStart)
        return case.exclusive
    free = sum(len(n.free) for n in case.nodes)
    return case.exclusive or case.job.pods * case.job.npu > free
