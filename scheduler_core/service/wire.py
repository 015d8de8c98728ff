"""kube-scheduler's extender JSON and the pods in it, as typed values.

kube-scheduler posts ``ExtenderArgs`` (``Pod``, ``NodeNames``) to filter and prioritize and
``ExtenderBindingArgs`` (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``) to bind, with
Go field names as keys; prioritize answers ``HostPriorityList`` scores in 0..10.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.annotations import GANG_LABEL, GANG_SIZE_ANNOTATION, RANK_INDEX_ANNOTATION
from contract.objects import Obj, npu_limit
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
        text = self.annotations.get(RANK_INDEX_ANNOTATION, "")
        return int(text) if text.isdigit() else None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang_key(self) -> str:
        return f"{self.namespace}/{self.gang}"

    def job(self) -> Job:
        return Job(self.name, self.product, (Task(self.name, self.npu),), self.namespace)


def pod_request(pod: Obj) -> PodRequest:
    meta = pod.get("metadata") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    try:
        product = product_for_selector(
            {k: v for k, v in selector.items() if k == ACCELERATOR_TYPE_LABEL}
        )
    except ValueError as bad:
        raise BadPod(str(bad)) from None
    gang = (meta.get("labels") or {}).get(GANG_LABEL)
    size_text = (meta.get("annotations") or {}).get(GANG_SIZE_ANNOTATION, "1")
    if not size_text.isdigit() or int(size_text) < 1:
        raise BadPod(f"{GANG_SIZE_ANNOTATION} {size_text!r} is not a positive number")
    return PodRequest(
        meta.get("namespace", "default"),
        meta.get("name", ""),
        meta.get("uid", ""),
        npu_limit(pod),
        product.name,
        gang,
        int(size_text) if gang else 1,
        dict(meta.get("labels") or {}),
        dict(meta.get("annotations") or {}),
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
