"""kube-scheduler's extender JSON and the pods in it, as typed values.

kube-scheduler posts ``ExtenderArgs`` (``Pod``, ``NodeNames``) to filter and prioritize and
``ExtenderBindingArgs`` (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``) to bind, with
Go field names as keys; prioritize answers ``HostPriorityList`` scores in 0..10.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.annotations import (
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    RANK_INDEX_ANNOTATION,
    parse_gang_size,
    parse_rank,
)
from contract.chip_names import InvalidInput
from contract.objects import Obj
from contract.pods import pod_view
from scheduler_core.engine.model import Job, Task
from scheduler_core.engine.products import ACCELERATOR_TYPE_LABEL, product_for_selector

MAX_SCORE = 10


class BadPod(ValueError):
    """A pod the extender cannot read; the message says what is wrong."""


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

    @property
    def rank(self) -> int | None:
        text = self.annotations.get(RANK_INDEX_ANNOTATION)
        if text is None:
            return None
        try:
            return parse_rank(text)
        except InvalidInput:
            return None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang_key(self) -> str:
        return f"{self.namespace}/{self.gang}"

    def job(self) -> Job:
        return Job(self.name, self.product, (Task(self.name, self.npu),), self.namespace)


def pod_request(pod: Obj) -> PodRequest:
    """The pod's NPU request; BadPod names what cannot be read."""
    if not isinstance(pod, dict):
        raise BadPod(f"the pod is a JSON {type(pod).__name__}, not an object")
    view = pod_view(pod)
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise BadPod("spec.nodeSelector is not a map")
    try:
        product = product_for_selector(
            {k: str(v) for k, v in selector.items() if k == ACCELERATOR_TYPE_LABEL}
        )
        gang = view.labels.get(GANG_LABEL)
        size = parse_gang_size(view.annotations.get(GANG_SIZE_ANNOTATION, "1"))
    except (InvalidInput, ValueError) as bad:
        raise BadPod(str(bad)) from None
    return PodRequest(
        view.namespace,
        view.name,
        view.uid,
        view.npu_limit,
        product.name,
        gang,
        size if gang else 1,
        view.labels,
        view.annotations,
    )


def extender_args(args: Mapping[str, Any]) -> tuple[Obj, list[str]]:
    """The pod and the candidate node names of an ``ExtenderArgs``."""
    return args.get("Pod") or {}, list(args.get("NodeNames") or [])


def normalize(scores: Mapping[str, float | None]) -> list[dict[str, Any]]:
    """Map policy scores onto the extender range 0..10 (nodes that cannot host the pod: 0)."""
    known = [s for s in scores.values() if s is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    result = []
    for name, score in scores.items():
        if score is None:
            value = 0
        elif high == low:
            value = MAX_SCORE
        else:
            value = round(MAX_SCORE * (score - low) / (high - low))
        result.append({"Host": name, "Score": value})
    return result
