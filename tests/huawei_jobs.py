"""Huawei's job samples (``tests/data/huawei_jobs``) as their controllers expand them: the
PodGroup and the pods, as Volcano's job controller, Huawei's Ascend Operator and Volcano's
PodGroup controller create them. Each rule cites the controller's source:

- Volcano Job: volcano-sh/volcano ``pkg/webhooks/admission/jobs/mutate/mutate_job.go``
  (defaults: queue ``default``, schedulerName ``volcano``, task names ``default<i>``,
  minAvailable = Σ replicas), ``pkg/controllers/job/job_controller_actions.go``
  ``createOrUpdatePodGroup`` (PodGroup ``<job>-<uid>`` with the Job's labels and annotations),
  ``job_controller_util.go`` ``createJobPod`` (pods ``<job>-<task>-<i>`` with the template's
  metadata and Volcano's task annotations and labels), ``pkg/controllers/job/plugins/env``
  (``VC_TASK_INDEX``) and ``distributed-framework/hcclrank`` (``hccl/rankIndex``).
- AscendJob: Ascend/mind-cluster ``component/ascend-operator/pkg/controllers/v1/job.go``
  (PodGroup ``<job>-<uid>``, the job's labels and annotations, ``process-recover-enable: on``
  when it has ``recover-strategy``; minMember = ``schedulingPolicy.minAvailable``, else Σ
  replicas), ``pod.go`` and kubeflow/common ``GenGeneralName`` (pods
  ``<job>-<replica type>-<i>``), ``annotation.go`` ``setHcclRankIndex`` (Master i → i,
  Worker i → i + 1 when a non-worker replica asks NPUs; else i within each type).
- Deployment, StatefulSet: volcano-sh/volcano ``pkg/controllers/podgroup/
  pg_controller_handler.go`` (PodGroup ``podgroup-<owner uid>``, no labels, minMember 1);
  StatefulSet pods ``<set>-<i>`` with ``statefulset.kubernetes.io/pod-name``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HUAWEI_JOBS = Path(__file__).parent / "data" / "huawei_jobs"
Obj = dict[str, Any]
VOLCANO_PODGROUP_API = "scheduling.volcano.sh/v1beta1"
GROUP_NAME = "scheduling.k8s.io/group-name"
RANK = "hccl/rankIndex"


@dataclass
class Expanded:
    """What a job's controller writes: the job's own objects it needs (ConfigMaps), its
    PodGroup, and its pods in creation order."""

    kind: str
    name: str
    namespace: str
    configmaps: list[Obj] = field(default_factory=list)
    podgroup: Obj | None = None
    pods: list[Obj] = field(default_factory=list)

    def npu_pods(self) -> list[Obj]:
        return [p for p in self.pods if npu_request(p)]


def documents(name: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all((HUAWEI_JOBS / name).read_text()) if d]


def sample_names() -> list[str]:
    return sorted(p.name for p in HUAWEI_JOBS.glob("*.yaml"))


def npu_request(pod: Obj) -> tuple[str, int] | None:
    """The NPU resource a pod asks and how many (limits as kubelet takes them)."""
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for key in ("limits", "requests"):
            for name, value in (resources.get(key) or {}).items():
                if name.startswith("huawei.com/") and int(value) > 0:
                    return name, int(value)
    return None


def _owner(kind: str, api: str, name: str, uid: str) -> Obj:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}


def _pod(template: Obj, name: str, namespace: str, owner: Obj) -> Obj:
    meta = copy.deepcopy(template.get("metadata") or {})
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
        "status": {"phase": "Pending"},
    }
    return pod


def _set_env(pod: Obj, name: str, value: str) -> None:
    for container in pod["spec"].get("containers") or []:
        env = container.setdefault("env", [])
        env[:] = [e for e in env if e.get("name") != name] + [{"name": name, "value": value}]


def _env_value(pod: Obj, name: str) -> str | None:
    for container in pod["spec"].get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == name and "value" in env:
                return str(env["value"])
    return None


def _podgroup(name: str, namespace: str, owner: Obj, meta: Obj, spec: Obj) -> Obj:
    """A Volcano PodGroup with ``meta``'s labels and annotations."""
    return {
        "apiVersion": VOLCANO_PODGROUP_API,
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def _volcano_job(job: Obj, expanded: Expanded) -> None:
    meta, spec = job["metadata"], job["spec"]
    name, namespace = expanded.name, expanded.namespace
    uid = f"uid-job-{name}"
    queue = spec.get("queue") or "default"
    tasks = spec.get("tasks") or []
    for i, task in enumerate(tasks):
        task.setdefault("name", f"default{i}")
    min_available = spec.get("minAvailable") or sum(int(t.get("replicas", 0)) for t in tasks)
    group = f"{name}-{uid}"
    owner = _owner("Job", "batch.volcano.sh/v1alpha1", name, uid)
    members = {t["name"]: t.get("minAvailable", t.get("replicas", 0)) for t in tasks}
    expanded.podgroup = _podgroup(
        group,
        namespace,
        owner,
        meta,
        {"minMember": min_available, "minTaskMember": members, "queue": queue},
    )
    plugins = spec.get("plugins") or {}
    replicas = {t["name"]: int(t.get("replicas", 0)) for t in tasks}
    for task in tasks:
        for i in range(int(task.get("replicas", 0))):
            pod = _pod(task["template"], f"{name}-{task['name']}-{i}", namespace, owner)
            pod["spec"].setdefault("schedulerName", spec.get("schedulerName") or "volcano")
            pod["metadata"]["annotations"].update(
                {
                    "volcano.sh/task-index": str(i),
                    "volcano.sh/task-spec": task["name"],
                    GROUP_NAME: group,
                    "volcano.sh/job-name": name,
                    "volcano.sh/queue-name": queue,
                    "volcano.sh/job-version": "0",
                    "volcano.sh/template-uid": f"{name}-{task['name']}",
                    "volcano.sh/job-retry-count": "0",
                }
            )
            pod["metadata"]["labels"].update(
                {
                    "volcano.sh/task-index": str(i),
                    "volcano.sh/job-name": name,
                    "volcano.sh/task-spec": task["name"],
                    "volcano.sh/job-namespace": namespace,
                    "volcano.sh/queue-name": queue,
                }
            )
            if "env" in plugins:
                _set_env(pod, "VK_TASK_INDEX", str(i))
                _set_env(pod, "VC_TASK_INDEX", str(i))
            if "hcclrank" in plugins and RANK not in pod["metadata"]["annotations"]:
                rank = _env_value(pod, "RANK")
                if rank is None and task["name"] == "master":
                    rank = str(i)
                elif rank is None and task["name"] == "worker":
                    rank = str(replicas.get("master", 0) + i)
                if rank is not None:
                    pod["metadata"]["annotations"][RANK] = rank
            expanded.pods.append(pod)


def _ascend_job(job: Obj, expanded: Expanded) -> None:
    meta, spec = job["metadata"], job["spec"]
    name, namespace = expanded.name, expanded.namespace
    uid = f"uid-acjob-{name}"
    policy = (spec.get("runPolicy") or {}).get("schedulingPolicy") or {}
    replica_specs: dict[str, Obj] = spec.get("replicaSpecs") or {}
    total = sum(int(r.get("replicas", 1)) for r in replica_specs.values())
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    if "recover-strategy" in annotations:  # job.go addPgProcessRecoverLabel
        labels["process-recover-enable"] = "on"
    group = f"{name}-{uid}"
    owner = _owner("AscendJob", "mindxdl.gitee.com/v1", name, uid)
    expanded.podgroup = _podgroup(
        group,
        namespace,
        owner,
        {"labels": labels, "annotations": annotations},
        {
            "minMember": policy.get("minAvailable") or total,
            "minTaskMember": {
                rt.lower(): int(r.get("replicas", 1)) for rt, r in replica_specs.items()
            },
            "queue": policy.get("queue") or "",
        },
    )
    # annotation.go: ranks run on across Master and Worker when a non-worker asks NPUs.
    non_worker_npus = any(
        rt != "Worker" and npu_request({"spec": r["template"].get("spec") or {}})
        for rt, r in replica_specs.items()
    )
    for rt, replica in replica_specs.items():
        kind = rt.lower()
        for i in range(int(replica.get("replicas", 1))):
            pod = _pod(replica["template"], f"{name}-{kind}-{i}", namespace, owner)
            pod["spec"].setdefault("schedulerName", spec.get("schedulerName") or "volcano")
            pod["metadata"]["labels"].update(
                {
                    "training.kubeflow.org/operator-name": "ascendjob-controller",
                    "group-name": "mindxdl.gitee.com",
                    "training.kubeflow.org/job-name": name,
                    "job-name": name,
                    "training.kubeflow.org/replica-type": kind,
                    "replica-type": kind,
                    "training.kubeflow.org/replica-index": str(i),
                    "replica-index": str(i),
                    "version": "0",
                }
            )
            if rt in ("Master", "Scheduler", "Chief"):
                pod["metadata"]["labels"]["training.kubeflow.org/job-role"] = "master"
            rank = i + 1 if non_worker_npus and rt == "Worker" else i
            pod["metadata"]["annotations"].update(
                {RANK: str(rank), GROUP_NAME: group, "volcano.sh/task-spec": kind}
            )
            expanded.pods.append(pod)


def _workload(obj: Obj, expanded: Expanded) -> None:
    """A Deployment's or StatefulSet's pods, and the PodGroup Volcano's PodGroup controller
    makes for their owner (``podgroup-<owner uid>``, minMember 1, no labels)."""
    name, namespace = expanded.name, expanded.namespace
    stateful = obj["kind"] == "StatefulSet"
    owner_kind, api = ("StatefulSet", "apps/v1") if stateful else ("ReplicaSet", "apps/v1")
    owner_name = name if stateful else f"{name}-5d4f8b7c9"
    uid = f"uid-{owner_kind.lower()}-{owner_name}"
    owner = _owner(owner_kind, api, owner_name, uid)
    group = f"podgroup-{uid}"
    template = obj["spec"]["template"]
    expanded.podgroup = _podgroup(group, namespace, owner, {}, {"minMember": 1})
    for i in range(int(obj["spec"].get("replicas", 1))):
        pod_name = f"{name}-{i}" if stateful else f"{owner_name}-x{i:04d}"
        pod = _pod(template, pod_name, namespace, owner)
        if stateful:
            pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] = pod_name
        pod["metadata"]["annotations"][GROUP_NAME] = group
        expanded.pods.append(pod)


def expand(sample: str) -> Expanded:
    """The sample's objects as its controller creates them (namespace ``default`` where the
    sample names none, as ``kubectl apply`` does)."""
    docs = documents(sample)
    job = docs[-1]
    meta = job["metadata"]
    expanded = Expanded(job["kind"], meta["name"], meta.get("namespace") or "default")
    for doc in docs[:-1]:
        if doc["kind"] == "ConfigMap":
            cm = copy.deepcopy(doc)
            cm["metadata"].setdefault("namespace", expanded.namespace)
            expanded.configmaps.append(cm)
    if job["kind"] == "Job":
        _volcano_job(copy.deepcopy(job), expanded)
    elif job["kind"] == "AscendJob":
        _ascend_job(copy.deepcopy(job), expanded)
    else:
        _workload(copy.deepcopy(job), expanded)
    return expanded
