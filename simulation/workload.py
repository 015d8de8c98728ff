"""The robustness run's workload: jobs of the shapes users submit, and their controllers.

- 910 pods of 1, 2, 4 or 8 chips, and 2 × 8-chip gangs (Kueue pod groups): plain, with
  switch affinity (``tor-affinity: large-model-schema``: the pods under one ToR) or in a SuperPoD
  (``sp-block``: one block of a SuperPoD), the last two when the cluster has a network;
- with a network every 910 server is an 8-chip server of an Atlas 9000 A3 SuperPoD
  (``simulation.cluster``'s ``super_pods``), and the jobs are what users submit there (see
  ``a3_super_pod_job``): without them MindCluster's plugin gives a job the 910 module
  handler, or the A3 x16 SuperPoD one, and neither serves these servers;
- on 310P nodes, vNPU pods (1, 2 or 4 AI cores) and inference pods of a whole chip (8);
- a job of each kind first, then kinds drawn at random; at most ``BACKLOG`` jobs waiting on
  each kind of server (users submit more once theirs run);
- jobs that end (their pods succeed, or fail) and are deleted by their controller;
- jobs whose pod the kubelet failed (Allocate refused): their controller restarts them
  (pods deleted and made again with new UIDs), as Volcano's ``RestartJob`` policy does;
- jobs labelled ``fault-retry-times``: a pod of theirs crashes now and then; the scheduler
  restarts the job (deletes its pods) while it has restarts left, the controller makes the
  pods again; once the scheduler's record (``vcjob-fault-npu-cm``) says none are left, the
  controller gives the job up.

Each pod is owned by its job (a Volcano Job, ``controller: true``). Like Volcano's job
controller (``pkg/controllers/job/job_controller_actions.go``, ``syncJob``), the controller
makes again the pods of a live job that are gone: all of them at once when the scheduler
deleted them all (a restart), one gone alone once it has stayed gone for ``RESYNC``
seconds (not while the scheduler's deletions of a restart are still landing).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    FAULT_RECORD,
    FAULT_RETRY_LABEL,
    SP_BLOCK_ANNOTATION,
    TOR_AFFINITY_LABEL,
)
from contract.chip_names import RESOURCE_NAME, InvalidInput
from contract.groups import KUEUE_GROUP_LABEL, KUEUE_TOTAL_ANNOTATION
from contract.vnpu import NPU_CORE_RESOURCE
from infra.kube.port import KubeError, NotFound
from scheduler_core.engine.rescheduling import restore_retries
from simulation.cluster import A3_SUPER_POD_X8_TYPE, SimulatedCluster
from simulation.memory import pod_object

NAMESPACE = "work"
LARGE_MODEL = "large-model-schema"  # waits rather than spread over ToRs
SP_BLOCK = "16"  # chips: a block of two 8-chip servers
NODE_BLOCK = "8"  # chips: a block of one 8-chip server (the SuperPoD asks nothing more)
SHAPES = ("one", "gang", "vnpu", "tor-gang", "sp-gang")  # the kinds of job, in report order
CRASH = 0.01  # per step, the chance that a running fault-retry-times job's pod crashes
RESYNC = 2.0  # seconds a pod of a live job stays gone before its controller makes it again
# Jobs waiting (submitted, not all running) at most, on each kind of server: users submit
# more once theirs run. Arrivals without a bound starve every gang (a one-pod job takes the
# chips a server frees before a second server is whole for a gang) and pile up pods the
# scheduler never reaches.
BACKLOG = 3


@dataclass
class Job:
    key: str  # the group, or the pod's key
    pods: list[str]
    ends_at: float
    fails: bool  # its pods end Failed
    npu: int = 8
    resource: str = RESOURCE_NAME
    retries: int | None = None  # fault-retry-times: the scheduler restarts it
    shape: str = "one"  # one, gang, tor-gang, sp-gang, vnpu
    started: float | None = None
    partial_since: float | None = None  # some of its pods run, not all
    failed_since: float | None = None  # a pod of a fault-retry-times job failed
    missing_since: float | None = None  # some of its pods are gone, not all
    generation: int = 0

    @property
    def size(self) -> int:
        return len(self.pods)

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


def a3_super_pod_job(shape: str, npu: int) -> tuple[dict[str, str], dict[str, str]]:
    """The nodeSelector and annotations of a job of ``shape`` (``npu`` chips a pod) on 8-chip
    servers of an Atlas 9000 A3 SuperPoD, as MindCluster's users write them (its system test
    ``st-llama-2x16-a3-sp-block-32``: the selector on the pods, ``sp-block`` on the job).

    MindCluster's plugin (ascend-for-volcano ``internal/npu/factory.go``
    ``get910CardHandlerName``) gives a job with no ``huawei.com/schedule_policy``, no
    ``sp-block`` and no ``accelerator-type`` selector the 910 module handler (``module``),
    and a job with ``sp-block`` but not the x8 SuperPoD selector the A3 x16 SuperPoD one,
    whose distributed tasks must ask 16 chips (``ascend910a3/superpod/frame.go``
    ``CheckTaskNPU``); the selector ``accelerator-type: module-a3-8-super-pod`` picks the x8
    SuperPoD handler (``getA3HandlerNameWithSpBlock``, or by its name without ``sp-block``).
    That handler takes a one-pod job of 1 or 2n chips up to 8 whose ``sp-block`` equals
    its chips, and a distributed job whose every task asks the server's 8 chips, ``sp-block``
    a multiple of 8 (``checkSpBlock``, ``checkRequireNPU``): 8 for a gang that asks nothing
    of the SuperPoD (a block a server), 16 for two servers in one SuperPoD. A switch-affinity
    gang carries ``tor-affinity`` beside the selector (the NSLB handler takes any job with
    the label, ``internal/nslb/frame.go``) and no ``sp-block``: this scheduler then places
    it by ToR alone, where upstream's ``plugin/job.go`` ``setSpBlock`` would make its block
    its 16 chips (one SuperPoD) as well; a job with ``sp-block`` this scheduler places by
    SuperPoD alone, its ``tor-affinity`` unread."""
    selector = {ACCELERATOR_TYPE_LABEL: A3_SUPER_POD_X8_TYPE}
    if shape == "one":
        return selector, {SP_BLOCK_ANNOTATION: str(npu)}
    if shape == "gang":
        return selector, {SP_BLOCK_ANNOTATION: NODE_BLOCK}
    if shape == "sp-gang":
        return selector, {SP_BLOCK_ANNOTATION: SP_BLOCK}
    return selector, {}


class Workload:
    def __init__(
        self, cluster: SimulatedCluster, rng: random.Random, inference: bool, network: bool
    ) -> None:
        self.cluster = cluster
        self.rng = rng
        self.inference = inference
        self.network = network
        self.jobs: dict[str, Job] = {}
        self.submitted: Counter[str] = Counter()  # jobs submitted, by shape
        self.first_submitted: dict[str, float] = {}  # shape → when its first job came
        self.started: Counter[str] = Counter()  # jobs whose pods all ran (once), by shape
        self._ran: set[str] = set()
        self.restarted = 0  # jobs the scheduler restarted (all their pods deleted)
        self.given_up = 0  # fault-retry-times jobs out of restarts
        self._counter = 0

    # ---- arriving, ending ------------------------------------------------------------

    def step(self, now: float, submit: bool = True) -> None:
        """Jobs arrive (``submit``), end, and crash."""
        if self.rng.random() < 0.5 and submit:
            self.submit(now)
        for job in list(self.jobs.values()):
            if job.started is not None and now >= job.ends_at:
                self.end(job)
            elif job.started is not None and job.retries is not None and self.rng.random() < CRASH:
                self._crash(job)

    def submit(self, now: float) -> None:
        self._counter += 1
        n = self._counter
        shapes, weights = ["one", "gang"], [5, 1]
        if self.inference:
            shapes.append("vnpu")
            weights.append(2)
        if self.network:
            shapes += ["tor-gang", "sp-gang"]
            weights += [1, 1]
        shape = self.rng.choices(shapes, weights)[0]
        # The run opens with a job of each kind, so that even a short run tries them all.
        shape = next((k for k in SHAPES if k in shapes and not self.submitted[k]), shape)
        if self.waiting(shape) >= BACKLOG:
            return  # its users' queue is full: they submit once one of theirs runs
        lives = self.rng.uniform(5, 25)
        fails = self.rng.random() < 0.1
        retries = self.rng.choice((1, 2)) if shape != "vnpu" and self.rng.random() < 0.2 else None
        if shape.endswith("gang"):
            group = f"{shape}-{n}"
            pods = [f"{group}-{i}" for i in range(2)]
            job = Job(
                f"{NAMESPACE}/{group}", pods, now + lives, fails, retries=retries, shape=shape
            )
        elif shape == "vnpu":
            name = f"vnpu-{n}"
            cores = self.rng.choice((1, 2, 2, 4, 8))
            job = Job(
                f"{NAMESPACE}/{name}",
                [name],
                now + lives,
                fails,
                cores,
                NPU_CORE_RESOURCE,
                shape="vnpu",
            )
        else:
            name = f"pod-{n}"
            npu = self.rng.choice((1, 1, 2, 4, 8))
            job = Job(f"{NAMESPACE}/{name}", [name], now + lives, fails, npu, retries=retries)
        self.jobs[job.name] = job
        self.submitted[shape] += 1
        self.first_submitted.setdefault(shape, now)
        self._create(job)

    def waiting(self, shape: str) -> int:
        """Jobs not running yet on the servers a job of ``shape`` asks for (the 310P nodes'
        vNPUs, or the 910 servers)."""
        vnpu = shape == "vnpu"
        return sum(
            job.started is None and (job.shape == "vnpu") == vnpu for job in self.jobs.values()
        )

    def never_started(self) -> list[str]:
        """The kinds of job submitted none of which has run yet."""
        return [s for s in SHAPES if self.submitted[s] and not self.started[s]]

    def _create(self, job: Job, names: list[str] | None = None) -> None:
        """The job's pods (``names``: only those), as its controller creates them (new
        UIDs each generation)."""
        for name in job.pods if names is None else names:
            pod = pod_object(NAMESPACE, name, None, job.npu, resource=job.resource)
            meta = pod["metadata"]
            meta["uid"] = f"uid-{name}-{job.generation}"
            meta["ownerReferences"] = [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": job.name,
                    "uid": f"uid-job-{job.name}",
                    "controller": True,
                }
            ]
            if job.size > 1:
                meta["labels"][KUEUE_GROUP_LABEL] = job.name
                meta["annotations"][KUEUE_TOTAL_ANNOTATION] = str(job.size)
            if job.retries is not None:
                meta["labels"][FAULT_RETRY_LABEL] = str(job.retries)
            if job.shape == "tor-gang":
                meta["labels"][TOR_AFFINITY_LABEL] = LARGE_MODEL
            elif job.shape == "sp-gang":
                meta["annotations"][SP_BLOCK_ANNOTATION] = SP_BLOCK
            if self.network and job.resource == RESOURCE_NAME:
                selector, annotations = a3_super_pod_job(job.shape, job.npu)
                pod["spec"]["nodeSelector"] = selector
                meta["annotations"].update(annotations)
            self.cluster.store.put("Pod", pod)

    def end(self, job: Job, fails: bool | None = None) -> None:
        """The job's pods end (or fail), and their controller deletes them."""
        for name in job.pods:
            key = f"{NAMESPACE}/{name}"
            try:
                if key in self.cluster.admitted:
                    failed = job.fails if fails is None else fails
                    self.cluster.finish(key, phase="Failed" if failed else "Succeeded")
                self.cluster.store.delete("Pod", NAMESPACE, name)
            except NotFound:
                continue  # gone already (the scheduler deleted it to restart its job)
            except KubeError:  # the API server may be down: try again next step
                return
        del self.jobs[job.name]

    def _crash(self, job: Job) -> None:
        """One of the job's running containers exits with an error."""
        key = f"{NAMESPACE}/{self.rng.choice(job.pods)}"
        if key in self.cluster.admitted and self.cluster.store.reachable:
            self.cluster.fail(key)

    # ---- the controllers ---------------------------------------------------------------

    def follow(self, now: float) -> None:
        """Each job's controller acts on what its pods show (the API server reachable)."""
        left = self._restarts_left()  # read before the pods: a restart deletes, then records
        for job in list(self.jobs.values()):
            phases = [self._phase(name) for name in job.pods]
            if all(phase is None for phase in phases):  # the scheduler restarted it
                for name in job.pods:
                    self.cluster.refused.pop(f"{NAMESPACE}/{name}", None)
                self.restarted += 1
                self._again(job)
            elif job.retries is not None:
                self._follow_retrying(job, phases, left.get(job.key), now)
            elif "Failed" in phases:
                self._restart(job)
            if None in phases and "Failed" not in phases and any(phases):
                self._resync(job, phases, now)
            else:
                job.missing_since = None
        for job in self.jobs.values():
            if job.started is None and all(
                f"{NAMESPACE}/{p}" in self.cluster.admitted for p in job.pods
            ):
                job.started = now
                job.ends_at = max(job.ends_at, now + 3)
                if job.name not in self._ran:  # a job restarted counts once
                    self._ran.add(job.name)
                    self.started[job.shape] += 1

    def _phase(self, name: str) -> str | None:
        """The pod's phase; None when it is gone."""
        try:
            phase = self.cluster.store.get_pod(NAMESPACE, name)["status"].get("phase")
        except KubeError:
            return None
        return str(phase)

    def _restart(self, job: Job) -> None:
        """Its pods deleted and made again (new UIDs)."""
        for name in job.pods:
            key = f"{NAMESPACE}/{name}"
            if key in self.cluster.admitted:
                self.cluster.finish(key, phase="Failed")
            self.cluster.refused.pop(key, None)
            self.cluster.store.delete("Pod", NAMESPACE, name)
        self._again(job)

    def _again(self, job: Job) -> None:
        job.generation += 1
        job.started = job.failed_since = job.partial_since = job.missing_since = None
        self._create(job)

    def _resync(self, job: Job, phases: list[str | None], now: float) -> None:
        """Some of a live job's pods are gone: made again once gone for ``RESYNC``."""
        job.missing_since = job.missing_since or now
        if now - job.missing_since < RESYNC:
            return
        job.generation += 1
        job.missing_since = None
        self._create(job, [name for name, phase in zip(job.pods, phases, strict=True) if not phase])

    def _follow_retrying(
        self, job: Job, phases: list[str | None], left: int | None, now: float
    ) -> None:
        """A fault-retry-times job: the scheduler deletes its pods to restart it (the
        controller makes them again once all are gone); the controller gives the job up
        once the scheduler has no restarts left for it."""
        if "Failed" in phases:
            if left == 0:
                self.given_up += 1
                self.end(job, fails=True)
            else:
                job.failed_since = job.failed_since or now
        else:
            job.failed_since = None

    def _restarts_left(self) -> dict[str, int]:
        """The restarts the scheduler's record says each fault-retry-times job has left."""
        try:
            data = self.cluster.store.get_configmap(*FAULT_RECORD).get("data") or {}
            return restore_retries(data)
        except (KubeError, InvalidInput):
            return {}
