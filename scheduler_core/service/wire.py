"""kube-scheduler's extender JSON and the pods in it, as typed values.

kube-scheduler posts ``ExtenderArgs`` (``Pod``, ``NodeNames``) to filter and prioritize and
``ExtenderBindingArgs`` (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``) to bind, with
Go field names as keys; prioritize answers ``HostPriorityList`` scores in 0..10.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from chip_topology.products import Product
from chip_topology.routing import product_for_job
from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    RING_CONTROLLER_LABEL,
    TASK_SPEC_ANNOTATION,
)
from contract.chip_names import ASCEND910, KIND_OF_RESOURCE, NPU, RESOURCE_NAME, InvalidInput
from contract.node_affinity import EVERYWHERE, PodConstraints
from contract.objects import Obj
from contract.pods import PodView, pod_view
from contract.vnpu import NPU_CORE_RESOURCE, VNPU_KIND_OF_RING
from scheduler_core.engine.model import Job, Task
from scheduler_core.service.state.jobs import JobDirectory, JobSettings, a3_role_refusal
from scheduler_core.service.state.vnpu_nodes import VnpuTask

MAX_SCORE = 10


class BadRequest(ValueError):
    """A request whose JSON has the wrong shape; answered 400 with the message."""


class BadPod(ValueError):
    """A pod the extender cannot read; the message says what is wrong."""


class Unready(BadPod):
    """A pod whose job's description (its PodGroup) has not arrived yet: no node now, one may
    later."""


def field_of(body: Mapping[str, Any], key: str, kind: type, where: str = "") -> Any:
    """``body[key]`` if it is a ``kind`` (an empty one when absent or null), else BadRequest."""
    value = body.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequest(f"{where}{key} is a JSON {_json_type(value)}, not {_json_type(kind())}")
    return value


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


@dataclass(frozen=True, slots=True)
class PodRequest:
    namespace: str
    name: str
    uid: str
    npu: int
    product: str
    gang: str | None
    gang_size: int
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    rank: int | None = None  # a gang member's hccl/rankIndex, when it has a readable one
    resource: str = RESOURCE_NAME  # the NPU resource it asks for
    gang_stated: bool = False  # its gang's size is stated by a PodGroup (JobSettings)
    # Its nodeSelector, required node affinity and tolerations: the nodes it may go to.
    constraints: PodConstraints = EVERYWHERE

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def dynamic(self) -> bool:
        """It asks for AI cores: a dynamic vNPU (or whole chips) the scheduler cuts."""
        return self.resource == NPU_CORE_RESOURCE

    @property
    def static(self) -> bool:
        """It asks for a pre-created vNPU type, which the kubelet alone picks."""
        return not self.dynamic and self.resource not in KIND_OF_RESOURCE

    def vnpu_task(self) -> VnpuTask:
        spec = self.annotations.get(TASK_SPEC_ANNOTATION, "")
        return VnpuTask(self.name, self.npu, self.labels, spec)

    @property
    def gang_key(self) -> str:
        return f"{self.namespace}/{self.gang}"

    def job(self) -> Job:
        """The pod as a job of its own, with its job's labels (its handler reads some:
        ``subHealthyStrategy``, ``distributed``)."""
        return Job(
            self.name,
            self.product,
            (Task(self.name, self.npu),),
            self.namespace,
            labels=self.labels,
        )


def check_pod(pod: Any, where: str = "Pod") -> Obj:
    """The pod, if it has a v1.Pod's shape where the extender reads it (what Go's decoder
    would refuse is a BadRequest: 400), with a name."""
    if not isinstance(pod, dict):
        raise BadRequest(f"{where} is a JSON {_json_type(pod)}, not an object")
    meta = field_of(pod, "metadata", dict, f"{where}.")
    spec = field_of(pod, "spec", dict, f"{where}.")
    field_of(pod, "status", dict, f"{where}.")
    for key in ("labels", "annotations"):
        _strings_only(field_of(meta, key, dict, f"{where}.metadata."), f"{where}.metadata.{key}")
    _strings_only(
        field_of(spec, "nodeSelector", dict, f"{where}.spec."), f"{where}.spec.nodeSelector"
    )
    for i, container in enumerate(field_of(spec, "containers", list, f"{where}.spec.")):
        if not isinstance(container, dict):
            raise BadRequest(f"{where}.spec.containers[{i}] is not an object")
        resources = field_of(container, "resources", dict, f"{where}.spec.containers[{i}].")
        for key in ("limits", "requests"):
            field_of(resources, key, dict, f"{where}.spec.containers[{i}].resources.")
    if not field_of(meta, "name", str, f"{where}.metadata."):
        raise BadRequest(f"{where}.metadata.name is missing")
    return pod


def _strings_only(values: Mapping[str, Any], where: str) -> None:
    for key, value in values.items():
        if not isinstance(value, str):
            raise BadRequest(f"{where}[{key!r}] is a JSON {_json_type(value)}, not a string")


# The chips of multi-node jobs: the 910 family's and the 950 family's (whose jobs are gangs of
# ``huawei.com/npu`` pods, MindCluster ``internal/npu/policy``).
GANG_KINDS = (ASCEND910, NPU)


def _a3_roles(handler: Product, settings: JobSettings, npu: int) -> str:
    """A job's pods asking no NPU that its handler refuses (MindCluster's A3 handlers:
    ``jobs.a3_role_refusal``), in the words of the handler's ``CheckTaskNPU`` where it
    reaches it (its family's ``Rules.no_npu_role``)."""
    expected = handler.rules.no_npu_role(handler, settings.size, npu) if settings.unmarked else ""
    return a3_role_refusal(settings.unmarked, expected) if expected else ""


def pod_request(
    pod: Obj | PodView, job: Callable[[PodView], JobSettings] | None = None
) -> PodRequest:
    """The pod's NPU request (of a pod ``check_pod`` passed, or its view as the watch cache
    keeps it), its job's settings in it (``job``: how the service knows the pod's job;
    without, the pod alone says); BadPod names what cannot be read, Unready what has not
    arrived."""
    view = pod if isinstance(pod, PodView) else pod_view(pod)
    constraints = view.constraints
    if not view.npu_limit:
        # Placed by the caller on any node (``kinds.NoNpu``), whatever its job says: a role of
        # a job that asks no NPU is not this scheduler's (``jobs``).
        return PodRequest(
            view.namespace,
            view.name,
            view.uid,
            0,
            "",
            None,
            1,
            view.labels,
            constraints=constraints,
        )
    settings = (job or JobDirectory().settings)(view)
    if settings.refusal:
        raise BadPod(settings.refusal)
    if settings.waiting:
        raise Unready(settings.waiting)
    labels = settings.labels
    kind = KIND_OF_RESOURCE.get(view.resource)
    ring = labels.get(RING_CONTROLLER_LABEL)
    try:
        product = ""  # a vNPU has no chip handler
        if kind is not None:
            accelerator = {k: v for k, v in constraints.selector if k == ACCELERATOR_TYPE_LABEL}
            handler = product_for_job(kind, labels, settings.annotations, accelerator)
            product = handler.name
            if refusal := _a3_roles(handler, settings, view.npu_limit):
                raise InvalidInput(refusal)
        elif view.resource == NPU_CORE_RESOURCE and ring not in VNPU_KIND_OF_RING:
            raise InvalidInput(
                f"{NPU_CORE_RESOURCE} with {RING_CONTROLLER_LABEL}={ring}: dynamic vNPU is "
                "for Ascend310P (ascend-310P) and 910B / A3 (ascend-910, ascend-910b, "
                "huawei.com.npu)"
            )
        if settings.gang and kind not in GANG_KINDS:
            raise InvalidInput(
                f"{view.group.describe() if view.group else 'a gang'}: gangs are of "
                f"{' or '.join(k.resource for k in GANG_KINDS)} pods, not {view.resource}"
            )
    except (InvalidInput, ValueError) as bad:
        raise BadPod(str(bad)) from None
    return PodRequest(
        view.namespace,
        view.name,
        view.uid,
        view.npu_limit,
        product,
        settings.gang,
        settings.size if settings.gang else 1,
        labels,
        settings.annotations,
        view.rank,
        view.resource,
        settings.size_stated,
        constraints,
    )


# kube-scheduler's extender types, requests and answers, declared once as msgspec Structs
# (``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``; Go field names, no json tags):
# decoded and encoded in C, so a body's field types are checked as it is read.
class NodeList(msgspec.Struct, rename={"api_version": "apiVersion"}):
    api_version: str = "v1"
    kind: str = "NodeList"
    items: list[Any] = msgspec.field(default_factory=list)


class ExtenderFilterResult(msgspec.Struct):
    """Filter's answer: ``NodeNames`` with the node cache, ``Nodes`` without; a node in
    ``FailedAndUnresolvableNodes`` is one preemption cannot help."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = msgspec.field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = msgspec.field(default_factory=dict)
    Error: str = ""

    @property
    def passing(self) -> list[str]:
        """The passing nodes' names, in either form."""
        if self.NodeNames is not None:
            return self.NodeNames
        return [n["metadata"]["name"] for n in self.Nodes.items] if self.Nodes else []


class HostPriority(msgspec.Struct):
    """One entry of prioritize's ``HostPriorityList`` (0..10, times the extender's weight)."""

    Host: str
    Score: int


class ExtenderBindingResult(msgspec.Struct):
    Error: str = ""


@dataclass(frozen=True, slots=True)
class Candidates:
    """The nodes of an ``ExtenderArgs``: their names, and the Node objects themselves when
    kube-scheduler sent a NodeList (``nodeCacheCapable: false``, its default), in which case
    it reads the passing nodes back as a NodeList too (``pkg/scheduler/extender.go``)."""

    names: list[str]
    objects: dict[str, Obj] | None = None

    def answer(
        self, passing: list[str], failed: dict[str, str], never: dict[str, str]
    ) -> ExtenderFilterResult:
        if self.objects is None:
            return ExtenderFilterResult(None, passing, failed, never)
        items = [self.objects[n] for n in passing]
        return ExtenderFilterResult(NodeList(items=items), None, failed, never)


class ExtenderArgs(msgspec.Struct):
    """kube-scheduler's ``ExtenderArgs`` (``extender/v1/types.go``), decoded in one pass by
    msgspec: the node names' types are checked in C, not by a Python loop over thousands."""

    Pod: Any = None
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


def decode_extender_args(raw: bytes) -> ExtenderArgs:
    """BadRequest naming the field when the body is not an ``ExtenderArgs``."""
    try:
        return msgspec.json.decode(raw or b"{}", type=ExtenderArgs)
    except RecursionError:
        raise BadRequest("the body nests too deep") from None
    except msgspec.DecodeError as bad:
        raise BadRequest(f"not an ExtenderArgs: {bad}") from None


def extender_args(args: Mapping[str, Any] | ExtenderArgs) -> tuple[Obj, Candidates]:
    """The pod and the candidate nodes of an ``ExtenderArgs`` (a mapping is typed first;
    BadRequest when either is missing or of the wrong shape): ``NodeNames`` with the node
    cache, else ``Nodes``."""
    if not isinstance(args, ExtenderArgs):
        try:
            args = msgspec.convert(args, type=ExtenderArgs)
        except msgspec.ValidationError as bad:
            raise BadRequest(f"not an ExtenderArgs: {bad}") from None
    if args.Pod is None:
        raise BadRequest("Pod is missing")
    pod = check_pod(args.Pod)
    if args.NodeNames is not None or args.Nodes is None:
        return pod, Candidates(args.NodeNames or [])
    return pod, _listed(args.Nodes.items)


def _listed(items: list[Any]) -> Candidates:
    """The candidates of a NodeList's items."""
    objects: dict[str, Obj] = {}
    for i, node in enumerate(items):
        if not isinstance(node, dict):
            raise BadRequest(f"Nodes.items[{i}] is not an object")
        name = field_of(field_of(node, "metadata", dict, f"Nodes.items[{i}]."), "name", str)
        if not name:
            raise BadRequest(f"Nodes.items[{i}].metadata.name is missing")
        objects[name] = node
    return Candidates(list(objects), objects)


class MetaPod(msgspec.Struct):
    UID: str = ""


class MetaVictims(msgspec.Struct):
    Pods: list[MetaPod] = msgspec.field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(msgspec.Struct):
    Pods: list[Any] = msgspec.field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(msgspec.Struct):
    """kube-scheduler's ``ExtenderPreemptionArgs``: the victims its dry run chose on each
    candidate node, by UID with the node cache (``NodeNameToMetaVictims``), else as pods."""

    Pod: Any = None
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(msgspec.Struct):
    """The candidates the extender keeps; always by UID (``extender.go`` converts back)."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = msgspec.field(default_factory=dict)


def preemption_args(args: Mapping[str, Any]) -> tuple[Obj, dict[str, MetaVictims]]:
    """The pod and each candidate node's victims (by UID) of an ``ExtenderPreemptionArgs``;
    BadRequest naming what is wrong."""
    try:
        typed = msgspec.convert(args, type=ExtenderPreemptionArgs)
    except msgspec.ValidationError as bad:
        raise BadRequest(f"not an ExtenderPreemptionArgs: {bad}") from None
    if typed.Pod is None:
        raise BadRequest("Pod is missing")
    pod = check_pod(typed.Pod)
    if typed.NodeNameToMetaVictims is not None:
        return pod, typed.NodeNameToMetaVictims
    victims: dict[str, MetaVictims] = {}
    for node, listed in (typed.NodeNameToVictims or {}).items():
        uids = []
        for i, victim in enumerate(listed.Pods):
            meta = field_of(victim, "metadata", dict, f"NodeNameToVictims[{node}].Pods[{i}].")
            uids.append(MetaPod(field_of(meta, "uid", str, "metadata.")))
        victims[node] = MetaVictims(uids, listed.NumPDBViolations)
    return pod, victims


class ExtenderBindingArgs(msgspec.Struct):
    """kube-scheduler's ``ExtenderBindingArgs``."""

    PodName: str = ""
    PodNamespace: str = ""
    PodUID: str = ""
    Node: str = ""


def binding_args(args: Mapping[str, Any]) -> ExtenderBindingArgs:
    """An ``ExtenderBindingArgs`` typed (BadRequest naming the field of the wrong type, or a
    required one missing)."""
    try:
        typed = msgspec.convert(args, type=ExtenderBindingArgs)
    except msgspec.ValidationError as bad:
        raise BadRequest(f"not an ExtenderBindingArgs: {bad}") from None
    if not (typed.PodNamespace and typed.PodName and typed.Node):
        raise BadRequest("PodNamespace, PodName and Node are required")
    return typed


def normalize(
    scores: Mapping[str, float | None], names: Iterable[str] | None = None
) -> list[HostPriority]:
    """Map policy scores onto the extender range 0..10, for ``names`` (default: the scored
    nodes; a node without a score, or with None, cannot host the pod: 0). Each distinct score
    is mapped once: thousands of nodes share a few (the engine scores per node signature)."""
    value_of = _scaled(scores.values())
    get = scores.get
    return [HostPriority(n, value_of.get(get(n), 0)) for n in (scores if names is None else names)]


def normalize_list(values: list[float | None], names: list[str]) -> list[HostPriority]:
    """``normalize`` of scores given in the order of ``names`` (``Session.score_list``):
    the same answer, its per-node steps C loops."""
    value_of = _scaled(values)
    value_of[None] = 0
    return list(map(HostPriority, names, map(value_of.__getitem__, values)))


def best_list(values: list[float | None], names: list[str]) -> list[str]:
    """``best(normalize_list(values, names))`` without building that list: the filter that
    answers only the best nodes asks it of every passing node (thousands a pod)."""
    top = {score for score, scaled in _scaled(values).items() if scaled == MAX_SCORE}
    if not top:  # no node scored: every one is 0, all tie
        return list(names)
    return list(itertools.compress(names, map(top.__contains__, values)))


def best(scored: list[HostPriority]) -> list[str]:
    """The nodes of the highest score, in their order."""
    top = max(h.Score for h in scored)
    return [h.Host for h in scored if h.Score == top]


def _scaled(scores: Iterable[float | None]) -> dict[float | None, int]:
    """Each distinct score (None left out) on 0..10, the lowest 0 and the highest 10."""
    distinct = {s for s in set(scores) if s is not None}
    low, high = (min(distinct), max(distinct)) if distinct else (0.0, 0.0)
    return {
        s: MAX_SCORE if high == low else round(MAX_SCORE * (s - low) / (high - low))
        for s in distinct
    }
