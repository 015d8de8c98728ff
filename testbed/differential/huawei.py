"""Cases run through Huawei's plugin (ascend-for-volcano v26.1.0, ``volcano-npu_v26.1.0.so``) in
the real Volcano v1.12.0 scheduler, on the test bed's real API server (``huawei_volcano``); or,
the same way, through our own side in that Volcano: the service and the in-process adapter
(``our_volcano``).

One control plane and one ``vc-scheduler`` serve every case. Each case's objects are named
after it (nodes ``<key>-n<i>``, its DeviceInfo ConfigMaps, its pods and PodGroup), labelled
``differential.ascend-npu.io/case: <key>`` and deleted by that label afterwards. Cases whose
handler reads only the nodes it is asked about run side by side in one session, each job kept
on its own nodes by a ``nodeSelector`` on that label (Huawei's plugin reads only the selector's
``accelerator-type``: ascend-for-volcano ``internal/npu/factory.go`` get910CardHandlerName);
``exclusive`` cases (ToR affinity, SuperPoDs) run alone, and so do jobs asking more chips than
their nodes have free (the plugin's enqueue check counts the whole cluster's). Each batch's nodes
exist for two whole sessions before its jobs come.

The scheduler's configuration is Huawei's (``build/volcano-v1.12.0.yaml``) with the plugin
renamed to the built one, ``useClusterInfoManager`` and ``self-maintain-available-card``
``"false"`` (the free chips are the DeviceInfo's as written: ``common/k8s/cmmgr.go``
initNodeDeviceInfoByCmMgr) and its schedule period shortened. Objects are written as their
owners write them:

- the node as the kubelet and Huawei's device plugin leave it: capacity and allocatable of the
  chip resource (allocatable without the unhealthy chips), the ``baseDeviceInfos`` annotation
  (``pkg/server/manager.go`` getNewNodeAnnotation; without it the plugin sees no chip:
  ``common/util/util.go`` GetNodeDevListFromAnno), Ready, an InternalIP;
- the DeviceInfo ConfigMap as the device plugin writes it (``contract.deviceinfo``);
- a bound pod holding the chips neither free nor unhealthy, with its chip annotations, so that
  Volcano's idle count equals the free list (``plugin/node.go`` checkNPUResourceStable);
- the PodGroup as Volcano's job controller makes it, ``minResources`` included (the plugin
  takes the job's chip kind from it: ``plugin/job.go`` GetVCJobReqNPUTypeFromJobInfo), then the
  pods with ``scheduling.k8s.io/group-name``.

A job is placed when every pod is bound with its chip annotation (``huawei.com/Ascend910``
etc.); refused when its PodGroup carries an ``Unschedulable`` condition (the plugin records its
reasons at session close: ``npu.go`` OnSessionClose) and two more sessions end with no pod
bound. The plugin's own score of each node for each pod is read from vc-scheduler's log
(``plugin/factory.go`` BatchNodeOrderFn logs it at level 4: ``--vmodule=factory=4``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from contract.annotations import (
    RANK_INDEX_ANNOTATION,
    SUPER_POD_ID_ANNOTATION,
    SUPER_POD_RANK_ANNOTATION,
)
from contract.chip_names import parse_chip_list
from contract.vnpu import parse_core_choice
from scheduler_core.volcano_config import merged
from testbed.control_plane import ControlPlane, running, wait_until
from testbed.differential.cases import TOR_LAYOUT, Case, Obj
from testbed.differential.objects import (
    CASE_LABEL,
    CONFIGMAPS,
    NAMESPACE,
    PODGROUPS,
    PODS,
    alone_in_cluster,
    job_objects,
    node_objects,
)
from testbed.differential.outcome import Outcome, logged_scores
from testbed.rest import Rest, RestError
from testbed.volcano import (
    HUAWEI_PLUGIN,
    HUAWEI_VERSION,
    Volcano,
    charts_adapter_entry,
    huawei_scheduler_configuration,
    open_queue,
    running_volcano,
)
from testbed.volcano import NAMESPACE as VOLCANO_NAMESPACE
from testbed.volcano_service import CONFIGMAP, KEY, our_service, service_metrics, without_huawei

log = logging.getLogger(__name__)

# The workloads a sample's YAML may create, each made into pods by its own controller.
WORKLOADS = frozenset({"Job", "Deployment", "StatefulSet"})
# Pod annotations the plugin writes that the reports show.
DETAIL_ANNOTATIONS = (RANK_INDEX_ANNOTATION, SUPER_POD_RANK_ANNOTATION, SUPER_POD_ID_ANNOTATION)
EXTENDER_VERSION = "v1.15.0"  # the first Volcano built here whose extender plugin allocates
PERIOD = "0.2s"  # vc-scheduler's --schedule-period (Huawei ships 1s)
# The plugin's name in Huawei's shipped configuration, and the init-params it ships.
SHIPPED_NAME = re.compile(r"volcano-npu_[^\s\"]+")
SESSIONS = re.compile(r"^volcano_e2e_scheduling_latency_milliseconds_count (\d+)", re.MULTILINE)
SETTLE_SESSIONS = 2  # sessions that must end after a batch's nodes exist, before its jobs come
DECIDE_SECONDS = 10.0  # a job not placed nor refused within this is reported undecided
# Huawei's level (-v=3, build/volcano-v1.12.0.yaml), and plugin/factory.go at 4: its
# BatchNodeOrderFn logs each task's NPU scores there ("batchNodeOrderFn Get task:...").
LOG_FLAGS = ("-v=3", "--vmodule=factory=4")
NPU_NODES = "ascend_scheduler_npu_nodes"  # the NPU nodes our service sees (its /metrics)


def scheduler_configuration(conf: str, *, nslb: str = "1.0", preset: bool = True) -> str:
    """Huawei's shipped ``volcano-scheduler.conf`` with the plugin's built name and the
    DeviceInfo read as written; switch affinity ``nslb``; without ``preset``, vNPUs cut as
    pods ask (``presetVirtualDevice: "false"``: Huawei ships ``"true"``, static vNPUs only)."""
    conf = SHIPPED_NAME.sub(HUAWEI_PLUGIN, conf)
    for key, value in (
        ("useClusterInfoManager", "false"),
        ("self-maintain-available-card", "false"),
        ("nslb-version", nslb),
        ("presetVirtualDevice", "true" if preset else "false"),
    ):
        conf, count = re.subn(rf'"{key}":\s*"[^"]*"', f'"{key}":"{value}"', conf)
        if count != 1:
            raise ValueError(f"init-params of the shipped configuration lack {key}")
    return conf


@dataclass
class Running:
    """A case on the cluster: its key, when its job was made whole, what was seen of it."""

    case: Case
    key: str
    refused_at: int | None = None  # sessions ended when a refusal was first seen
    outcome: Outcome | None = None


class VolcanoCases:
    """The real Volcano on one control plane, running cases in batches, whichever plugin
    decides in it (Huawei's, or our adapter and service)."""

    def __init__(
        self,
        plane: ControlPlane,
        volcano: Volcano,
        *,
        batch: int = 12,
        sees: Callable[[int], bool] | None = None,
    ) -> None:
        """``sees``: whether what decides sees exactly this many NPU nodes (our service,
        whose view follows the cluster through its watches; Huawei's plugin reads the
        cluster each session)."""
        self.plane = plane
        self.volcano = volcano
        self.sees = sees
        self.admin: Rest = plane.rest()
        self.batch = batch
        self._serial = 0
        self._log_offset = 0

    # ---- the cluster ------------------------------------------------------------------

    def sessions(self) -> int:
        """Sessions vc-scheduler has ended (its e2e latency histogram's count)."""
        found = SESSIONS.search(self.volcano.metrics())
        return int(found.group(1)) if found else 0

    def wait_sessions(self, count: int, timeout: float = 60.0) -> None:
        start = self.sessions()
        wait_until(lambda: self.sessions() >= start + count, timeout, f"{count} Volcano sessions")

    def key(self) -> str:
        self._serial += 1
        return f"d{self._serial}"

    def _create(self, path: str, body: Obj) -> None:
        self.admin.create(path, body)

    def settled(self) -> None:
        """Before a case's nodes are made: what decides sees none of the cases before (our
        service's view follows deletions through its watch; counting the next case's nodes
        while the last ones still show would let a job in before its nodes are seen)."""
        if (sees := self.sees) is not None:
            wait_until(lambda: sees(0), 60, "the service sees the last cases' nodes gone")

    def set_up(self, batch: Sequence[Running]) -> None:
        """The batch's nodes made once the last cases' are gone, a few sessions ended over
        them, and what decides seeing them all."""
        self.settled()
        for running_case in batch:
            self._set_up(running_case)
        self.wait_sessions(SETTLE_SESSIONS)
        if (sees := self.sees) is not None:
            count = sum(len(r.case.nodes) for r in batch)
            wait_until(lambda: sees(count), 60, f"the service sees the {count} nodes")

    def _set_up(self, running_case: Running) -> None:
        case, key = running_case.case, running_case.key
        for i, node in enumerate(case.nodes):
            node_obj, configmap, holders = node_objects(case, key, i, node)
            self._create(CONFIGMAPS, configmap)
            for holder in holders:
                self._create(PODS, holder)
            self._create("/api/v1/nodes", node_obj)

    def _submit(self, running_case: Running) -> None:
        podgroup, pods = job_objects(running_case.case, running_case.key)
        for pod in pods:  # the pods first: the job is whole once its PodGroup appears
            self._create(PODS, pod)
        self._create(PODGROUPS, podgroup)

    def clean(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        selector = {"labelSelector": f"{CASE_LABEL} in ({','.join(keys)})"}
        for path in (PODS, PODGROUPS, "/api/v1/nodes", CONFIGMAPS):
            query = {**selector, "gracePeriodSeconds": "0"} if path == PODS else selector
            self.admin.request("DELETE", path, query=query)

    # ---- a job applied as its YAML has it -----------------------------------------------

    def run_applied(self, case: Case, documents: Sequence[Obj], timeout: float = 60.0) -> Outcome:
        """``case``'s nodes alone in the cluster, then ``documents`` (one workload, a Volcano
        Job, a Deployment or a StatefulSet, and the objects it refers to) created as written,
        for its own controller (Volcano's job controller; Kubernetes' with Volcano's PodGroup
        controller: ``kubernetes_controllers``) to make the PodGroup and pods: the NPU pods'
        placement once all are bound with their chips, in rank order (``hccl/rankIndex``, else
        by name). The objects are deleted after."""
        running_case = Running(case, self.key())
        (workload,) = [d for d in documents if d["kind"] in WORKLOADS]
        if workload["kind"] == "Job":
            labels = {"volcano.sh/job-name": str(workload["metadata"]["name"])}
        else:
            labels = dict(workload["spec"]["selector"]["matchLabels"])
            self.kubernetes_controllers()
        selector = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}
        try:
            self.set_up([running_case])
            for document in documents:
                self.admin.create(
                    self.admin.path(document["apiVersion"], document["kind"], "", NAMESPACE),
                    document,
                )
            deadline = time.monotonic() + timeout
            while (outcome := self._applied(case, running_case.key, selector)) is None:
                if workload["kind"] == "StatefulSet":
                    self._start_bound(selector)
                if time.monotonic() > deadline:
                    pods = self.admin.get(PODS, **selector)["items"]
                    seen = {p["metadata"]["name"]: p.get("status") for p in pods}
                    return Outcome(False, reason=f"undecided: {json.dumps(seen)}"[:2000])
                time.sleep(0.1)
            return outcome
        finally:
            # No garbage collector runs here: what the controllers made goes by hand.
            for document in documents:
                path = self.admin.path(document["apiVersion"], document["kind"], "", NAMESPACE)
                self.admin.request("DELETE", f"{path}/{document['metadata']['name']}")
            if workload["kind"] == "Deployment":
                replica_sets = self.admin.path("apps/v1", "ReplicaSet", "", NAMESPACE)
                self.admin.request("DELETE", replica_sets, query=selector)
            self.admin.request("DELETE", PODS, query={**selector, "gracePeriodSeconds": "0"})
            self.admin.request("DELETE", PODGROUPS)
            self.clean([running_case.key])

    def _start_bound(self, selector: Mapping[str, str]) -> None:
        """The kubelet's part for bound pods: Running and Ready (no kubelet runs here; a
        StatefulSet makes its next pod only once the one before is Running and Ready,
        ``pkg/controller/statefulset/stateful_set_control.go`` under OrderedReady)."""
        for pod in self.admin.get(PODS, **selector)["items"]:
            if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") != "Running":
                ready = [
                    {"type": kind, "status": "True"}
                    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ]
                status = {"status": {"phase": "Running", "conditions": ready}}
                self.admin.patch(f"{PODS}/{pod['metadata']['name']}/status", status)

    def kubernetes_controllers(self) -> None:
        """Kubernetes' Deployment, ReplicaSet and StatefulSet controllers (kube-controller-
        manager with those alone: no node lifecycle, no garbage collector), once."""
        if "kube-controller-manager" not in self.plane.processes:
            self.plane.start_controller_manager("--controllers=deployment,replicaset,statefulset")

    def ensure_priority_class(self, name: str) -> None:
        """A PriorityClass a sample's job names (its documentation has the user create it;
        without it the API server refuses the job's pods)."""
        body = {"metadata": {"name": name}, "value": 1000}
        try:
            self.admin.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)
        except RestError as exists:
            if exists.status != 409:
                raise

    def _applied(self, case: Case, key: str, selector: Mapping[str, str]) -> Outcome | None:
        """The job's NPU pods' placement once all are bound with their chips, else None."""
        resource = case.spec.resource
        pods = [
            p
            for p in self.admin.get(PODS, **selector)["items"]
            if any(
                resource in ((c.get("resources") or {}).get("limits") or {})
                for c in p["spec"]["containers"]
            )
        ]
        if len(pods) != case.job.pods or not all(
            p["spec"].get("nodeName") and resource in (p["metadata"].get("annotations") or {})
            for p in pods
        ):
            return None

        def rank(pod: Obj) -> tuple[int, str]:
            notes = pod["metadata"].get("annotations") or {}
            return int(notes.get(RANK_INDEX_ANNOTATION, "-1")), pod["metadata"]["name"]

        ordered = sorted(pods, key=rank)
        placements = tuple(
            (
                int(p["spec"]["nodeName"].removeprefix(f"{key}-n")),
                tuple(parse_chip_list(p["metadata"]["annotations"][resource], kind=case.spec.kind)),
            )
            for p in ordered
        )
        return Outcome(True, placements, ranks=tuple(rank(p)[0] for p in ordered))

    # ---- running cases ----------------------------------------------------------------

    def run(self, cases: Sequence[Case]) -> dict[str, Outcome]:
        """Every case's outcome, by case name."""
        outcomes: dict[str, Outcome] = {}
        shared = [c for c in cases if not alone_in_cluster(c)]
        alone = [c for c in cases if alone_in_cluster(c)]
        groups = [shared[i : i + self.batch] for i in range(0, len(shared), self.batch)]
        groups += [[c] for c in alone]
        for group in groups:
            for running_case in self._run_batch(group):
                assert running_case.outcome is not None
                outcomes[running_case.case.name] = running_case.outcome
        return outcomes

    def _run_batch(self, cases: Sequence[Case]) -> list[Running]:
        batch = [Running(c, self.key()) for c in cases]
        try:
            self.set_up(batch)
            for running_case in batch:
                self._submit(running_case)
            deadline = time.monotonic() + DECIDE_SECONDS
            while any(r.outcome is None for r in batch):
                self.observe(batch)
                if time.monotonic() > deadline:
                    self._undecided([r for r in batch if r.outcome is None])
                    break
                time.sleep(0.05)
        finally:
            self.clean([r.key for r in batch])
        self._add_scores(batch)
        return batch

    def _add_scores(self, batch: Sequence[Running]) -> None:
        """Each outcome with the plugin's scores the log shows for its pods."""
        log = self.volcano.processes["vc-scheduler"].log
        with log.open("rb") as text:
            text.seek(self._log_offset)
            new = text.read()
        self._log_offset += len(new)
        scores = logged_scores(new.decode(errors="replace"))
        for running_case in batch:
            found = scores.get(running_case.key)
            if found and running_case.outcome is not None:
                running_case.outcome = replace(running_case.outcome, scores=tuple(found.items()))

    def _undecided(self, waiting: Sequence[Running]) -> None:
        """Jobs neither placed nor refused by the deadline: what their PodGroup and pods say."""
        for running_case in waiting:
            key = running_case.key
            try:
                group = self.admin.get(f"{PODGROUPS}/{key}-pg")
            except RestError as gone:
                group = {"error": str(gone)}
            pods = self.admin.get(PODS, labelSelector=f"{CASE_LABEL}={key}")["items"]
            seen = {
                "podgroup": group.get("status"),
                "pods": {
                    p["metadata"]["name"]: (p["spec"].get("nodeName"), p.get("status"))
                    for p in pods
                },
            }
            running_case.outcome = Outcome(
                False, reason="undecided: " + json.dumps(seen).replace(key + "-", "")
            )

    def observe(self, batch: Sequence[Running]) -> None:
        waiting = [r for r in batch if r.outcome is None]
        selector = {"labelSelector": f"{CASE_LABEL} in ({','.join(r.key for r in waiting)})"}
        pods = self.admin.get(PODS, **selector)["items"]
        groups = {
            g["metadata"]["labels"][CASE_LABEL]: g
            for g in self.admin.get(PODGROUPS, **selector)["items"]
        }
        by_key: dict[str, list[Obj]] = {}
        for pod in pods:
            if re.fullmatch(r".*-p\d+", pod["metadata"]["name"]):
                by_key.setdefault(pod["metadata"]["labels"][CASE_LABEL], []).append(pod)
        now = self.sessions()
        for running_case in waiting:
            found = by_key.get(running_case.key, [])
            self._decide(running_case, found, groups.get(running_case.key), now)

    def _decide(self, running_case: Running, pods: list[Obj], group: Obj | None, now: int) -> None:
        case, key = running_case.case, running_case.key
        resource = case.spec.resource
        bound = [p for p in pods if p["spec"].get("nodeName")]
        if bound and len(bound) == case.job.pods:
            if not all(resource in (p["metadata"].get("annotations") or {}) for p in bound):
                return  # bound before the annotation shows: read again
            placements = []
            ordered = sorted(bound, key=lambda p: int(p["metadata"]["name"].rsplit("-p", 1)[1]))
            notes = [p["metadata"].get("annotations") or {} for p in ordered]
            detail = {
                f"p{i}": ",".join(f"{k}={n[k]}" for k in DETAIL_ANNOTATIONS if k in n)
                for i, n in enumerate(notes)
                if any(k in n for k in DETAIL_ANNOTATIONS)
            }
            for rank, pod in enumerate(ordered):
                index = int(pod["spec"]["nodeName"].rsplit("-n", 1)[1])
                written = notes[rank][resource]
                if case.spec.vnpu_cores:  # 1-vir02_1c (a vNPU of chip 1) or 0,1 (whole chips)
                    choice = parse_core_choice(written)
                    chips, template = choice.chips, choice.template or ""
                    detail[f"p{rank}.template"] = template
                else:
                    chips = tuple(parse_chip_list(written, kind=case.spec.kind))
                placements.append((index, tuple(chips)))
            ranks = tuple(int(n.get(RANK_INDEX_ANNOTATION, "-1")) for n in notes)
            running_case.outcome = Outcome(True, tuple(placements), detail=detail, ranks=ranks)
            return
        if bound or group is None:
            return
        conditions = [
            c
            for c in (group.get("status") or {}).get("conditions") or []
            if c.get("type") == "Unschedulable" and c.get("status") == "True"
        ]
        if not conditions:
            return
        if running_case.refused_at is None:
            running_case.refused_at = now
        if now >= running_case.refused_at + SETTLE_SESSIONS:
            reasons = {str(c.get("reason", "")): str(c.get("message", "")) for c in conditions}
            reason = " | ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
            running_case.outcome = Outcome(False, reason=reason.replace(key + "-", ""))


@contextmanager
def _volcano_for_cases(
    workdir: Path | None, version: str = HUAWEI_VERSION
) -> Iterator[tuple[ControlPlane, Volcano]]:
    """A control plane (etcd and kube-apiserver; nodes need no kubelet: no node-lifecycle
    controller, no ``TaintNodesByCondition``), the cases' namespaces and ToR layout, and
    Volcano's controller manager at ``version`` (it opens the queue); its scheduler not yet."""
    with running(
        "diff", controllers=False, admission_plugins_off=("TaintNodesByCondition",)
    ) as plane:
        where = workdir or plane.workdir / "volcano"  # removed with the control plane
        with running_volcano(plane, version, where) as volcano:
            admin = plane.rest()
            admin.ensure_namespace(NAMESPACE)
            admin.ensure_namespace("mindx-dl")
            admin.create(
                CONFIGMAPS,
                {
                    "metadata": {"name": "basic-tor-node-cm"},
                    "data": {"tor_info": TOR_LAYOUT.tor_info()},
                },
            )
            volcano.start_controller_manager()
            yield plane, volcano


@contextmanager
def huawei_volcano(
    workdir: Path | None = None, *, batch: int = 12, nslb: str = "1.0", preset: bool = True
) -> Iterator[VolcanoCases]:
    """Huawei's plugin in vc-scheduler (switch affinity ``nslb``: the cases' ``Case.nslb``;
    ``preset``: ``presetVirtualDevice``, off for dynamic vNPU cases), ready for the first case:
    the plugin's first session refuses every job by design (``IsFirstSession``), so a few
    sessions pass."""
    with _volcano_for_cases(workdir) as (plane, volcano):
        shipped = huawei_scheduler_configuration(volcano.build)
        conf = scheduler_configuration(shipped, nslb=nslb, preset=preset)
        volcano.start_scheduler(conf, plugins=True, period=PERIOD, extra=LOG_FLAGS)
        open_queue(plane)
        runner = VolcanoCases(plane, volcano, batch=batch)
        runner.wait_sessions(3)
        yield runner


@contextmanager
def our_volcano(
    workdir: Path | None = None, *, batch: int = 12, extender: bool = False
) -> Iterator[VolcanoCases]:
    """Our side through the real Volcano: the service as the chart's Volcano path runs it
    (``testbed/volcano_service.py``) and, in vc-scheduler v1.12.0 (Huawei's), our in-process
    adapter merged into Huawei's configuration without its plugin as the chart's merge Job
    writes it (``volcano.adapter``); with ``extender``, Volcano v1.15.0's own extender plugin
    with the chart's default entry instead (v1.12.0's has no ``allocateFunc``).
    vc-scheduler runs under its own ServiceAccount."""
    version = EXTENDER_VERSION if extender else HUAWEI_VERSION
    with (
        _volcano_for_cases(workdir, version) as (plane, volcano),
        # The cases hold chips by pods created bound (``node_objects``), which the chart's
        # admission policies rightly refuse to anyone but a scheduler.
        our_service(plane, 0, policies=False) as service,
    ):
        if extender:  # the merged configuration our_service wrote into Volcano's ConfigMap
            path = f"/api/v1/namespaces/{VOLCANO_NAMESPACE}/configmaps/{CONFIGMAP}"
            conf = str(plane.rest().get(path)["data"][KEY])
        else:
            entry = charts_adapter_entry(service.url).with_token(service.token)
            conf = merged(without_huawei(), entry)
        volcano.start_scheduler(
            conf, adapter=not extender, period=PERIOD, environment=service.trust, account=True
        )
        open_queue(plane)

        def sees(nodes: int) -> bool:
            return service_metrics(service.metrics_url).get(NPU_NODES, 0) == nodes

        runner = VolcanoCases(plane, volcano, batch=batch, sees=sees)
        runner.wait_sessions(3)
        yield runner
