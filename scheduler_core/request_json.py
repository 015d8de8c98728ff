"""The JSON placement request / answer of ``python -m scheduler_core place``.

Every malformed value raises InvalidInput whose message starts with the path of the
offending field (``nodes[1].free[2]: ...``) so a script's author sees what to fix; so does
a key the request does not define (a misspelt ``unhealty`` would otherwise leave a faulty
chip free).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chip_topology.routing import product_by_name, product_for_resource
from contract.chip_names import (
    ASCEND910,
    KIND_OF_RESOURCE,
    ChipKind,
    InvalidInput,
    chip_name,
    parse_chip_name,
    quoted,
)
from scheduler_core.engine.model import Decision, Job, NodeState, Task
from scheduler_core.engine.session import check_node_chips


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    nodes: tuple[NodeState, ...]
    job: Job


# The keys each object of a request may have (``place --help`` lists them).
REQUEST_KEYS = ("nodes", "job")
NODE_KEYS = (
    "name",
    "product",
    "allocatable",
    "free",
    "unhealthy",
    "network_unhealthy",
    "card_sub_healthy",
    "switch_sub_healthy",
)
JOB_KEYS = (
    "name",
    "product",
    "resource",
    "selector",
    "tasks",
    "namespace",
    "labels",
    "annotations",
)
TASK_KEYS = ("name", "npu")


def _field(obj: Mapping[str, Any], key: str, path: str, kind: type, required: bool = True) -> Any:
    if key not in obj:
        if required:
            raise InvalidInput(f"{path}.{key}: missing")
        return None
    value = obj[key]
    # bool is an int subclass; a count of True chips is a mistake, not a number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInput(f"{path}.{key}: expected {kind.__name__}, got {json.dumps(value)}")
    return value


def _object(value: Any, path: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{path}: expected an object")
    unknown = sorted(k for k in value if k not in keys)
    if unknown:
        named = ", ".join(quoted(k) for k in unknown[:5])
        if len(unknown) > 5:
            named += f" and {len(unknown) - 5} more"
        raise InvalidInput(
            f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {named} "
            f"(allowed: {', '.join(keys)})"
        )
    return value


def _chips(obj: Mapping[str, Any], key: str, path: str, kind: ChipKind) -> tuple[int, ...]:
    names = _field(obj, key, path, list, required=key == "free") or []
    chips: list[int] = []
    for i, name in enumerate(names):
        try:
            chips.append(parse_chip_name(name, kind=kind))
        except InvalidInput as bad:
            raise InvalidInput(f"{path}.{key}[{i}]: {bad}") from None
    if len(set(chips)) != len(chips):
        raise InvalidInput(f"{path}.{key}: names a chip twice")
    return tuple(chips)


def _strings(obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    value = _field(obj, key, path, dict, required=False) or {}
    for k, v in value.items():
        if not isinstance(v, str):
            raise InvalidInput(f"{path}.{key}.{k}: expected str, got {json.dumps(v)}")
    return dict(value)


def _node(raw: Any, path: str) -> NodeState:
    obj = _object(raw, path, NODE_KEYS)
    name = _field(obj, "name", path, str)
    product_name = _field(obj, "product", path, str)
    try:
        product = product_by_name(product_name)
    except InvalidInput as bad:
        raise InvalidInput(f"{path}.product: {bad}") from None
    unhealthy = _chips(obj, "unhealthy", path, product.kind)
    allocatable = _field(obj, "allocatable", path, int, required=False)
    if allocatable is None:
        allocatable = product.capacity - len(unhealthy)
    free = _chips(obj, "free", path, product.kind)
    network_unhealthy = _chips(obj, "network_unhealthy", path, product.kind)
    card_sub = _field(obj, "card_sub_healthy", path, bool, required=False) or False
    switch_sub = _field(obj, "switch_sub_healthy", path, bool, required=False) or False
    try:
        node = NodeState(
            name=name,
            product=product_name,
            free=free,
            allocatable=allocatable,
            unhealthy=frozenset(unhealthy),
            network_unhealthy=frozenset(network_unhealthy),
            card_sub_healthy=card_sub,
            switch_sub_healthy=switch_sub,
        )
        check_node_chips(node)
    except InvalidInput as bad:
        raise InvalidInput(f"{path}: {bad}") from None
    return node


def _task(raw: Any, path: str) -> Task:
    obj = _object(raw, path, TASK_KEYS)
    name = _field(obj, "name", path, str)
    npu = _field(obj, "npu", path, int)
    try:
        return Task(name, npu)
    except InvalidInput as bad:
        raise InvalidInput(f"{path}: {bad}") from None


def _job(raw: Any) -> Job:
    obj = _object(raw, "job", JOB_KEYS)
    selector = _strings(obj, "selector", "job")
    labels = _strings(obj, "labels", "job")
    annotations = _strings(obj, "annotations", "job")
    product = _field(obj, "product", "job", str, required=False)
    resource = _field(obj, "resource", "job", str, required=False)
    if resource is not None and resource not in KIND_OF_RESOURCE:
        known = ", ".join(KIND_OF_RESOURCE)
        raise InvalidInput(f"job.resource: {quoted(resource)} is not one of {known}")
    try:
        if product:
            handler = product_by_name(product)
            if resource is not None and handler.kind.resource != resource:
                raise InvalidInput(
                    f"{product} is a handler of {handler.kind.resource}, not {resource}"
                )
            product = handler.name
        else:  # routed as the scheduler routes a pod asking ``resource`` (the table's order)
            asked = resource or ASCEND910.resource
            product = product_for_resource(asked, labels, annotations, selector).name
    except InvalidInput as bad:
        raise InvalidInput(f"job.product: {bad}") from None
    tasks = tuple(
        _task(t, f"job.tasks[{i}]") for i, t in enumerate(_field(obj, "tasks", "job", list))
    )
    name = _field(obj, "name", "job", str)
    namespace = _field(obj, "namespace", "job", str, required=False) or "default"
    try:
        return Job(name, product, tasks, namespace, labels, selector)
    except InvalidInput as bad:
        raise InvalidInput(f"job: {bad}") from None


def parse_request(text: str) -> PlacementRequest:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as bad:
        raise InvalidInput(f"request: not JSON ({bad})") from None
    except RecursionError:
        raise InvalidInput("request: nested too deep") from None
    except ValueError:  # a number of more digits than Python converts (4,300)
        raise InvalidInput("request: a number has too many digits") from None
    obj = _object(raw, "request", REQUEST_KEYS)
    nodes = _field(obj, "nodes", "request", list)
    parsed = tuple(_node(n, f"nodes[{i}]") for i, n in enumerate(nodes))
    seen: set[str] = set()
    for i, node in enumerate(parsed):
        if node.name in seen:
            raise InvalidInput(f"nodes[{i}].name: {quoted(node.name)} appears twice")
        seen.add(node.name)
    if "job" not in obj:
        raise InvalidInput("request.job: missing")
    return PlacementRequest(parsed, _job(obj["job"]))


def decision_to_json(decision: Decision, kind: ChipKind = ASCEND910) -> dict[str, Any]:
    """The answer, chips named as on the wire for the job's chip kind."""
    if not decision.feasible:
        answer: dict[str, Any] = {"feasible": False, "reason": decision.reason}
        if decision.rejected:
            answer["rejected"] = dict(sorted(decision.rejected.items()))
        return answer
    return {
        "feasible": True,
        "placements": [
            {"task": p.task, "node": p.node, "chips": [chip_name(c, kind) for c in p.chips]}
            for p in decision.placements
        ],
        "scores": dict(sorted(decision.scores.items())),
        "rejected": dict(sorted(decision.rejected.items())),
    }
