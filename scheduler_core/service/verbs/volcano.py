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

import msgspec

from contract.objects import PLACED_RESOURCES, npu_limit, npu_quantity
from infra.kube.port import KubeError
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.wire import BadPod, BadRequest, ExtenderArgs, check_pod

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
        "predicateAll",
        "allocateCarried",
    )
    # Verbs only the in-process adapter (``volcano_adapter/``) calls; Volcano's own
    # extender plugin has no configuration key for them.
    ADAPTER_VERBS = ("predicateAll", "allocateCarried")

    def __init__(
        self, extender: Extender, open_session: Callable[[], None], force_enqueue: bool = True
    ) -> None:
        self._extender = extender
        self._open_session = open_session
        self._force_enqueue = force_enqueue

    def handle(self, verb: str, body: Mapping[str, Any]) -> Answer:
        """One verb (KeyError when unknown, BadRequest when the body has the wrong shape):
        its body typed once (``ARGS``), then answered."""
        if verb == "onSessionOpen":
            self._open_session()  # a fresh view (at most one per refresh period)
            return SessionResponse()
        if verb == "onSessionClose":
            return SessionResponse()
        args = _typed(verb, body)
        if isinstance(args, PredicateArgs):
            return self._predicate(args)
        if isinstance(args, PredicateAllArgs):
            return self._predicate_all(args)
        if isinstance(args, PrioritizeArgs):
            return self._prioritize(args)
        if isinstance(args, JobArgs):
            return self._job_enqueueable(args.job)
        if verb == "allocateFunc":
            return self._allocate(args.task)
        if verb == "allocateCarried":
            return self._carry(args.task)
        return self._deallocate(args.task)

    def _predicate(self, args: PredicateArgs) -> PredicateResponse:
        pod, node = _task_pod(args.task), args.node.Name
        # Rank-blind: Volcano caches a node's refusal for the pod's whole task (Job and
        # TaskRole) within a session, so a node refused to rank 0 as "reserved for rank 1"
        # would never be asked for rank 1 (seen on the real v1.15.0: a 2-pod gang never
        # bound). prioritize still points each rank at its node; allocateFunc takes the
        # place free on the node Volcano chose.
        answer = self._extender.filter(ExtenderArgs(Pod=pod, NodeNames=[node]), any_rank=True)
        if node in answer.passing:
            return PredicateResponse("", SUCCESS)
        never = answer.FailedAndUnresolvableNodes.get(node)
        if never is not None:
            return PredicateResponse(never, UNRESOLVABLE)
        return PredicateResponse(answer.FailedNodes.get(node, "not schedulable"), UNSCHEDULABLE)

    def _predicate_all(self, args: PredicateAllArgs) -> PredicateAllResponse:
        """The adapter's one call a task: ``predicate`` over every node of the session at
        once (rank-blind, as there), and ``prioritize``'s scores of the nodes that pass.
        The adapter holds the answer until an allocation in the session changes it."""
        pod = _task_pod(args.task)
        answer = self._extender.filter(ExtenderArgs(Pod=pod, NodeNames=args.nodes), any_rank=True)
        passing = answer.passing
        scores: dict[str, float] = {}
        if passing:
            try:
                scores = self._extender.scores(pod, passing)
            except BadPod:  # the pod changed since the filter read it: no preference
                scores = {}
        return PredicateAllResponse(
            passing, answer.FailedNodes, answer.FailedAndUnresolvableNodes, scores
        )

    def _prioritize(self, args: PrioritizeArgs) -> PrioritizeResponse:
        pod = _task_pod(args.task)
        names = [n.Name for n in args.nodes]
        try:
            return PrioritizeResponse(self._extender.scores(pod, names))
        except BadPod as bad:
            return PrioritizeResponse({}, str(bad))

    def _allocate(self, task: TaskInfo) -> EventResponse:
        pod = _task_pod(task)
        if npu_limit(pod) == 0:
            return EventResponse()
        if task.Status == PIPELINED:
            # Placed on resources still being released: bound in a later session, once they
            # are free, when allocateFunc comes again for it; its chips are chosen then.
            return EventResponse()
        try:
            return EventResponse(self._extender.annotate(pod, task.NodeName))
        except BadPod as bad:
            return EventResponse(str(bad))

    def _carry(self, task: TaskInfo) -> CarriedResponse:
        """The adapter's allocation: as ``allocateFunc``, but the annotations are answered for
        the adapter to put on Volcano's copy of the pod (its Binding carries them), not
        written on the pod: one write a pod, the Binding, instead of a patch and the
        Binding."""
        pod = _task_pod(task)
        if npu_limit(pod) == 0 or task.Status == PIPELINED:
            return CarriedResponse()
        try:
            error, annotations = self._extender.carry(pod, task.NodeName)
        except BadPod as bad:
            return CarriedResponse(str(bad))
        return CarriedResponse(error, {} if error else annotations)

    def _deallocate(self, task: TaskInfo) -> EventResponse:
        """The task leaves the session (a discarded statement, an unpipeline): its chips come
        back, and the annotations allocateFunc wrote come off the pod, or the next session's
        snapshot would carry them and Volcano's binder would send them in the Binding
        (``cache.go`` binds with the snapshot's annotations) over a fresh choice."""
        pod = _task_pod(task)
        if npu_limit(pod) == 0:
            return EventResponse()
        try:
            written = self._extender.release(pod)
        except BadPod as bad:
            return EventResponse(str(bad))
        if written is None:
            log.info("deallocateFunc for a pod this service gave nothing: ignored")
        elif written:
            meta = pod["metadata"]
            namespace = str(meta.get("namespace") or "default")
            try:
                self._extender.unannotate(namespace, meta["name"], written)
            except KubeError as failed:
                return EventResponse(f"deallocate {meta['name']}: {failed}")
        return EventResponse()

    def _job_enqueueable(self, job: JobInfo) -> JobEnqueueableResponse:
        """Reject an NPU job while the nodes offer less than it asks of an NPU resource the
        extender places (chips of a kind, or AI cores); else permit it with ``forceEnqueue``
        (upstream's default), abstain without, as ascend-for-volcano's ``jobEnqueueable``
        (npu.go: JobEnqueue or JobEnqueueSkip, which leaves it to Volcano's other plugins,
        proportion's queue capacity among them); abstain for any other job."""
        asked = _npu_asked(job)
        for resource, count in asked.items():
            if self._extender.state.free(resource) < count:
                return JobEnqueueableResponse(REJECT)
        return JobEnqueueableResponse(PERMIT if asked and self._force_enqueue else ABSTAIN)


# Volcano's bodies, typed as they are read: its internal structs have no json tags, so the
# keys are Go's field names (pkg/scheduler/api: TaskInfo, NodeInfo, JobInfo, Resource);
# only the fields read are declared, the rest are ignored.
class TaskInfo(msgspec.Struct):
    Pod: dict[str, Any] | None = None
    NodeName: str = ""
    Status: int = 0  # TaskStatus: Pending 1, Allocated 2, Pipelined 4, ...


class NodeInfo(msgspec.Struct):
    Name: str = ""


class Resource(msgspec.Struct):
    ScalarResources: dict[str, float] | None = None  # milli-units


class PodGroupSpec(msgspec.Struct):
    min_resources: dict[str, str | int] | None = msgspec.field(default=None, name="minResources")


class PodGroup(msgspec.Struct):
    spec: PodGroupSpec | None = None


class JobInfo(msgspec.Struct):
    TotalRequest: Resource | None = None
    PodGroup: PodGroup | None = None


class PredicateArgs(msgspec.Struct):
    task: TaskInfo
    node: NodeInfo


class PrioritizeArgs(msgspec.Struct):
    task: TaskInfo
    nodes: list[NodeInfo] = msgspec.field(default_factory=list)


class PredicateAllArgs(msgspec.Struct):
    """The adapter's batch: the task and the names of every node of the session."""

    task: TaskInfo
    nodes: list[str] = msgspec.field(default_factory=list)


class TaskArgs(msgspec.Struct):
    task: TaskInfo


class JobArgs(msgspec.Struct):
    job: JobInfo


# Its answers (v1.13 ``pkg/scheduler/plugins/extender/argument.go``; these have json tags).
class SessionResponse(msgspec.Struct):
    """``OnSessionOpenResponse`` / ``OnSessionCloseResponse``: empty."""


class PredicateResponse(msgspec.Struct):
    status: str
    code: int


class PredicateAllResponse(msgspec.Struct):
    """``predicateAll``'s answer: the passing nodes, why each other failed (``unresolvable``:
    code 3, preemption cannot help there; ``failed``: code 2), and the passing nodes'
    scores."""

    passing: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    scores: dict[str, float]


class PrioritizeResponse(msgspec.Struct, rename="camel"):
    node_score: dict[str, float]
    error_message: str = ""


class EventResponse(msgspec.Struct, rename="camel"):
    """allocateFunc's and deallocateFunc's answer."""

    error_message: str = ""


class CarriedResponse(msgspec.Struct, rename="camel"):
    """allocateCarried's answer: an error, or the annotations Volcano's Binding is to carry."""

    error_message: str = ""
    annotations: dict[str, str] = msgspec.field(default_factory=dict)


class JobEnqueueableResponse(msgspec.Struct):
    status: int


Answer = (
    SessionResponse
    | PredicateResponse
    | PredicateAllResponse
    | PrioritizeResponse
    | EventResponse
    | CarriedResponse
    | JobEnqueueableResponse
)

ARGS: dict[str, type[PredicateArgs | PredicateAllArgs | PrioritizeArgs | TaskArgs | JobArgs]] = {
    "predicate": PredicateArgs,
    "predicateAll": PredicateAllArgs,
    "prioritize": PrioritizeArgs,
    "allocateFunc": TaskArgs,
    "allocateCarried": TaskArgs,
    "deallocateFunc": TaskArgs,
    "jobEnqueueable": JobArgs,
}


def _typed(verb: str, body: Mapping[str, Any]) -> Any:
    kind = ARGS[verb]  # KeyError: no such verb
    try:
        return msgspec.convert(body, type=kind)
    except msgspec.ValidationError as bad:
        raise BadRequest(f"{verb}: {bad}") from None


def _task_pod(task: TaskInfo) -> dict[str, Any]:
    if not task.Pod:
        raise BadRequest("task.Pod is missing")
    return check_pod(task.Pod, "task.Pod")


def _npu_asked(job: JobInfo) -> dict[str, float]:
    """What a job asks of each NPU resource the extender places: its tasks' total
    (``TotalRequest``, in milli-units), or, before its pods exist (a Volcano Job is enqueued
    before its controller makes them), its PodGroup's ``spec.minResources``."""
    scalars = (job.TotalRequest.ScalarResources if job.TotalRequest else None) or {}
    asked = {r: scalars[r] / 1000 for r in PLACED_RESOURCES if scalars.get(r)}
    if asked:
        return asked
    spec = job.PodGroup.spec if job.PodGroup else None
    minimum = (spec.min_resources if spec else None) or {}
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
