"""The jobs of ``tests/data/jobs`` as their controllers create them: the recorded objects, and
the job's other pods derived from the recorded one by its index, as the controller does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from contract.groups import COSCHEDULING, PODGROUP_APIS, VOLCANO, podgroups
from simulation.memory import MemoryCluster

JOBS = Path(__file__).parent / "data" / "jobs"
Obj = dict[str, Any]


def documents(name: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all((JOBS / name).read_text()) if d]


def _env(pod: Obj, name: str, value: str) -> None:
    for env in pod["spec"]["containers"][0].get("env") or []:
        if env["name"] == name:
            env["value"] = value


def _volcano(pod: Obj, i: int) -> None:
    meta = pod["metadata"]
    meta["name"] = meta["name"].rsplit("-", 1)[0] + f"-{i}"
    meta["labels"]["volcano.sh/task-index"] = meta["annotations"]["volcano.sh/task-index"] = str(i)
    _env(pod, "VC_TASK_INDEX", str(i))


def _pytorch(pod: Obj, i: int) -> None:
    """Replica ``i`` of the job: the master first, then the workers (RANK as the operator)."""
    kind, index = ("master", 0) if i == 0 else ("worker", i - 1)
    labels = pod["metadata"]["labels"]
    pod["metadata"]["name"] = f"{labels['training.kubeflow.org/job-name']}-{kind}-{index}"
    labels["training.kubeflow.org/replica-type"] = kind
    labels["training.kubeflow.org/replica-index"] = str(index)
    _env(pod, "RANK", str(i))


def _kueue(pod: Obj, i: int) -> None:
    pod["metadata"]["name"] = pod["metadata"]["name"].rsplit("-", 1)[0] + f"-{i}"


def _indexed(pod: Obj, i: int) -> None:
    meta = pod["metadata"]
    meta["name"] = f"allreduce-{i}-x7k2{i}"
    key = "batch.kubernetes.io/job-completion-index"
    meta["labels"][key] = meta["annotations"][key] = str(i)
    _env(pod, "JOB_COMPLETION_INDEX", str(i))


FORMS: dict[str, tuple[str, int, Callable[[Obj, int], None]]] = {
    "volcano": ("volcano-job.yaml", 4, _volcano),
    "pytorch": ("pytorchjob-coscheduling.yaml", 4, _pytorch),
    "kueue": ("kueue-pod-group.yaml", 2, _kueue),
    "indexed": ("indexed-job.yaml", 2, _indexed),
}
SOURCE_OF_API = {
    "scheduling.volcano.sh/v1beta1": VOLCANO,
    "scheduling.x-k8s.io/v1alpha1": COSCHEDULING,
}


def submit(
    api: MemoryCluster, form: str, *, podgroup: bool = True, generation: int = 0
) -> list[Obj]:
    """The form's PodGroup (when ``podgroup``; its API is served either way) and pods, as
    their controller creates them, into ``api``; the pods as stored, in index order.
    ``generation``: pods made again after a restart (same names, new UIDs)."""
    name, count, vary = FORMS[form]
    pods = []
    for doc in documents(name):
        source = SOURCE_OF_API.get(doc.get("apiVersion", ""))
        if source is not None:
            api.apis.add(PODGROUP_APIS[source])
            if podgroup and generation == 0:
                api.create_object(podgroups(source), doc)
        elif doc.get("kind") == "Pod":
            for i in range(count):
                pod = copy.deepcopy(doc)
                vary(pod, i)
                pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}-{generation}"
                api.put("Pod", pod)
                meta = pod["metadata"]
                pods.append(api.get_pod(meta["namespace"], meta["name"]))
    return pods


def podgroup(form: str) -> Obj:
    """The form's PodGroup as its controller creates it."""
    return next(d for d in documents(FORMS[form][0]) if d.get("kind") == "PodGroup")
