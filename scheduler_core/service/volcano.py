"""Volcano's extender plugin verbs, on the same extender (Volcano's
``pkg/scheduler/plugins/extender``).

Volcano posts its internal structs without json tags, so keys are Go field names: a
``TaskInfo`` carries the full ``Pod`` and the session's ``NodeName``; a ``NodeInfo`` its
``Name``; a ``JobInfo`` its ``TotalRequest.ScalarResources`` in milli-units. Volcano binds
pods itself: ``allocateFunc`` writes the scheduler annotations before it does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from contract.objects import PLACED_RESOURCES, npu_limit, npu_quantity
from infra.kube.port import KubeError
from scheduler_core.service.extender import Extender
from scheduler_core.service.wire import BadPod, BadRequest, check_pod, field_of

log = logging.getLogger(__name__)

# Volcano's statuses (pkg/scheduler/api: Success, Error, Unschedulable,
# UnschedulableAndUnresolvable): preempt and reclaim skip a node answered 3.
SUCCESS, UNSCHEDULABLE, UNRESOLVABLE = 0, 2, 3
PIPELINED = 1 << 2  # TaskStatus: Pending 1, Allocated 2, Pipelined 4 (pkg/scheduler/api)
PERMIT, ABSTAIN, REJECT = 1, 0, -1


class VolcanoVerbs:
    VERBS = (
        "onSessionOpen",
        "onSessionClose",
        "predicate",
        "prioritize",
        "allocateFunc",
        "deallocateFunc",
        "jobEnqueueable",
    )

    def __init__(self, extender: Extender, open_session: Callable[[], None]) -> None:
        self._extender = extender
        self._open_session = open_session
        self._handlers: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
            "onSessionOpen": self._session_open,
            "onSessionClose": lambda body: {},
            "predicate": self._predicate,
            "prioritize": self._prioritize,
            "allocateFunc": self._allocate,
            "deallocateFunc": self._deallocate,
            "jobEnqueueable": self._job_enqueueable,
        }

    def handle(self, verb: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One verb (KeyError when unknown, BadRequest when the body has the wrong shape)."""
        return self._handlers[verb](body)

    def _session_open(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._open_session()  # a fresh view (at most one per refresh period)
        return {}

    def _predicate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        pod = _task_pod(body)
        node = field_of(field_of(body, "node", dict, "predicate."), "Name", str, "node.")
        answer = self._extender.filter({"Pod": pod, "NodeNames": [node]})
        if node in answer["NodeNames"]:
            return {"status": "", "code": SUCCESS}
        never = answer["FailedAndUnresolvableNodes"].get(node)
        if never is not None:
            return {"status": never, "code": UNRESOLVABLE}
        return {"status": answer["FailedNodes"].get(node, "not schedulable"), "code": UNSCHEDULABLE}

    def _prioritize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        pod = _task_pod(body)
        nodes = field_of(body, "nodes", list, "prioritize.")
        if not all(isinstance(n, dict) for n in nodes):
            raise BadRequest("prioritize.nodes holds something that is not an object")
        names = [field_of(n, "Name", str, "nodes[].") for n in nodes]
        try:
            return {"nodeScore": self._extender.scores(pod, names), "errorMessage": ""}
        except BadPod as bad:
            return {"nodeScore": {}, "errorMessage": str(bad)}

    def _allocate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        task = field_of(body, "task", dict, "allocateFunc.")
        pod = _task_pod(body)
        if npu_limit(pod) == 0:
            return {"errorMessage": ""}
        if field_of(task, "Status", int, "task.") == PIPELINED:
            # Placed on resources still being released: bound in a later session, once they
            # are free, when allocateFunc comes again for it; its chips are chosen then.
            return {"errorMessage": ""}
        node = field_of(task, "NodeName", str, "task.")
        try:
            return {"errorMessage": self._extender.annotate(pod, node)}
        except BadPod as bad:
            return {"errorMessage": str(bad)}

    def _deallocate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The task leaves the session (a discarded statement, an unpipeline): its chips come
        back, and the annotations allocateFunc wrote come off the pod, or the next session's
        snapshot would carry them and Volcano's binder would send them in the Binding
        (``cache.go`` binds with the snapshot's annotations) over a fresh choice."""
        pod = _task_pod(body)
        if npu_limit(pod) == 0:
            return {"errorMessage": ""}
        try:
            written = self._extender.release(pod)
        except BadPod as bad:
            return {"errorMessage": str(bad)}
        if written is None:
            log.info("deallocateFunc for a pod this service gave nothing: ignored")
        elif written:
            meta = pod["metadata"]
            try:
                self._extender.unannotate(
                    str(meta.get("namespace") or "default"), meta["name"], written
                )
            except KubeError as failed:
                return {"errorMessage": f"deallocate {meta['name']}: {failed}"}
        return {"errorMessage": ""}

    def _job_enqueueable(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Permit a job while the nodes offer what it asks of each NPU resource the
        extender places (chips of a kind, or AI cores); abstain for any other job."""
        job = field_of(body, "job", dict, "jobEnqueueable.")
        asked = _npu_asked(job)
        for resource, count in asked.items():
            if self._extender.state.free(resource) < count:
                return {"status": REJECT}
        return {"status": PERMIT if asked else ABSTAIN}


def _task_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = field_of(field_of(body, "task", dict), "Pod", dict, "task.")
    if not pod:
        raise BadRequest("task.Pod is missing")
    return check_pod(pod, "task.Pod")


def _npu_asked(job: Mapping[str, Any]) -> dict[str, float]:
    """What a job asks of each NPU resource the extender places: its tasks' total
    (``TotalRequest``, in milli-units), or, before its pods exist (a Volcano Job is enqueued
    before its controller makes them), its PodGroup's ``spec.minResources``."""
    request = field_of(job, "TotalRequest", dict, "job.")
    scalars = field_of(request, "ScalarResources", dict, "job.TotalRequest.")
    asked: dict[str, float] = {}
    for resource in PLACED_RESOURCES:
        milli = scalars.get(resource) or 0
        if not isinstance(milli, (int, float)) or isinstance(milli, bool):
            raise BadRequest(f"job.TotalRequest.ScalarResources[{resource}] is not a number")
        if milli:
            asked[resource] = milli / 1000
    if asked:
        return asked
    group = field_of(job, "PodGroup", dict, "job.")
    minimum = field_of(field_of(group, "spec", dict, "job.PodGroup."), "minResources", dict)
    for resource in PLACED_RESOURCES:
        value = minimum.get(resource)
        if value is None:
            continue
        count = npu_quantity(value)
        if count is None:
            raise BadRequest(
                f"job.PodGroup.spec.minResources[{resource}] is not a count: {value!r}"
            )
        if count:
            asked[resource] = count
    return asked
