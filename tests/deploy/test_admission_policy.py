"""The admission policies, evaluated as the API server would: every CEL expression of
daemonset/base/admission-policy.yaml, of the scheduler overlays' npu-pod-policy.yaml (and of
the DRA overlay's, in test_dra_admission_policy.py) on AdmissionRequests that must be allowed
and refused.

The evaluator is cel-python; of the Kubernetes CEL libraries only ``<list>.join(<sep>)``
(Kubernetes' strings library) is used, and it is given to the evaluator here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel

from contract.annotations import (
    DELETING_ANNOTATION,
    SERVER_TYPE_LABEL,
    SET_AT_CREATION,
    WRITER_LABEL,
    WRITTEN_BY_US,
)
from contract.chip_names import RESOURCE_DOMAIN
from contract.objects import PLACED_RESOURCES, is_npu_resource
from contract.vnpu import _VIRTUAL_TYPE, CHIP_NAME_LABEL
from scheduler_core.service.election import LEADER_LABEL
from testbed.manifests import helm_template, kustomize

ROOT = Path(__file__).parents[2]
OVERLAYS = ROOT / "daemonset" / "overlays"
POLICY_FILES = (
    ROOT / "daemonset" / "base" / "admission-policy.yaml",
    OVERLAYS / "kube-scheduler" / "npu-pod-policy.yaml",
    OVERLAYS / "dra" / "dra-admission-policy.yaml",
)


def policies(*paths: Path) -> dict[str, Any]:
    return policies_of(d for path in paths for d in yaml.safe_load_all(path.read_text()))


def policies_of(documents: Iterable[Any]) -> dict[str, Any]:
    return {
        d["metadata"]["name"]: d["spec"]
        for d in documents
        if d and d["kind"] == "ValidatingAdmissionPolicy"
    }


POLICIES = policies(*POLICY_FILES)
SCHEDULER = "system:serviceaccount:kube-system:ascend-npu-scheduler"
AGENT = "system:serviceaccount:kube-system:ascend-npu-agent"
NODE_NAME = "authentication.kubernetes.io/node-name"


def join(items: celtypes.ListType, separator: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType(separator.join(str(i) for i in items))


ENVIRONMENT = celpy.Environment()


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    program = ENVIRONMENT.program(ENVIRONMENT.compile(expression), functions={"join": join})
    return program.evaluate(activation)


@dataclass(frozen=True)
class Verdict:
    applies: bool
    refusals: tuple[str, ...]  # the messages of the failed validations

    @property
    def allowed(self) -> bool:
        return not self.refusals


def admit(policy: str, request: dict[str, Any], among: dict[str, Any] = POLICIES) -> Verdict:
    spec = among[policy]
    activation: dict[str, Any] = {
        "request": json_to_cel(request),
        "object": json_to_cel(request.get("object")),
        "oldObject": json_to_cel(request.get("oldObject")),
    }
    rules = spec["matchConstraints"]["resourceRules"]
    resource = request["resource"]["resource"]
    if request.get("subResource"):
        resource += "/" + request["subResource"]
    if not any(
        resource in rule["resources"] and request["operation"] in rule["operations"]
        for rule in rules
    ):
        return Verdict(False, ())
    if not all(evaluate(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return Verdict(False, ())
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celtypes.MapType(
            {celtypes.StringType(k): v for k, v in variables.items()}
        )
        try:
            variables[variable["name"]] = evaluate(variable["expression"], activation)
        except celpy.evaluation.CELEvalError as failed:
            # The API server evaluates a variable when an expression first reads it: one that
            # fails where no validation reads it (oldObject on a CREATE) fails nothing.
            variables[variable["name"]] = failed
    activation["variables"] = celtypes.MapType(
        {celtypes.StringType(k): v for k, v in variables.items()}
    )
    refusals = []
    for validation in spec["validations"]:
        if not evaluate(validation["expression"], activation):
            message = validation.get("message") or str(
                evaluate(validation["messageExpression"], activation)
            )
            refusals.append(message)
    return Verdict(True, tuple(refusals))


def pod(
    annotations: dict[str, str] | None = None,
    node: str = "node-a",
    labels: dict[str, str] | None = None,
    *,
    npus: dict[str, str] | None = None,
    init: bool = False,
    field: str = "limits",
    scheduler: str | None = None,
) -> Any:
    """A pod on ``node`` ("": unbound); ``npus``: the resources its container asks (in
    ``field``: limits or requests), of its init container when ``init``."""
    container: dict[str, Any] = {"name": "c", "image": "train:1"}
    if npus:
        container["resources"] = {field: npus}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "train:1"}]}
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"] = [container]
    if node:
        spec["nodeName"] = node
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "team",
            **({"annotations": annotations} if annotations is not None else {}),
            **({"labels": labels} if labels else {}),
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


NPUS = {"huawei.com/Ascend910": "2"}


def request(
    operation: str,
    resource: str,
    user: str,
    obj: Any = None,
    old: Any = None,
    *,
    namespace: str = "team",
    name: str = "p",
    sub: str = "",
    node: str | None = None,
) -> dict[str, Any]:
    user_info: dict[str, Any] = {"username": user}
    if node is not None:
        user_info["extra"] = {NODE_NAME: [node]}
    # As the API server sends it: no subResource key for the object itself.
    return {
        **({"subResource": sub} if sub else {}),
        "operation": operation,
        "resource": {"group": "", "version": "v1", "resource": resource},
        "namespace": namespace,
        "name": name,
        "userInfo": user_info,
        "object": obj,
        "oldObject": old,
    }


CHOSEN = {"huawei.com/Ascend910": "Ascend910-0", "predicate-time": "1"}
RANK = "hccl/rankIndex"


def variable(policy: str, name: str) -> Any:
    """A variable of the policy that needs no request (a constant)."""
    (found,) = [v for v in POLICIES[policy]["variables"] if v["name"] == name]
    return evaluate(found["expression"], {})


def test_the_policies_protect_exactly_the_annotations_our_components_write() -> None:
    protected = list(WRITTEN_BY_US)
    creating = request("CREATE", "pods", "alice", pod())
    (found,) = [
        v for v in POLICIES["ascend-npu-annotations"]["variables"] if v["name"] == "creatable"
    ]
    creatable = evaluate(found["expression"], {"request": json_to_cel(creating)})
    assert [str(k) for k in creatable] == list(SET_AT_CREATION)
    assert [str(k) for k in variable("ascend-npu-annotations", "protected")] == protected
    assert [str(k) for k in variable("ascend-npu-scheduler-scope", "ours")] == protected
    # The deletion mark is the scheduler's alone.
    assert DELETING_ANNOTATION in protected
    agents = [k for k in protected if k != DELETING_ANNOTATION]
    assert [str(k) for k in variable("ascend-npu-agent-scope", "ours")] == agents


def test_the_policies_know_the_npu_resources_the_code_knows() -> None:
    # contract.objects.is_npu_resource: the placed resources and a static vNPU type's.
    vnpu = "^" + re.escape(RESOURCE_DOMAIN) + _VIRTUAL_TYPE.pattern.removeprefix("^")
    for policy in ("ascend-npu-pods", "ascend-npu-scheduler-scope"):
        assert [str(r) for r in variable(policy, "npuResources")] == list(PLACED_RESOURCES)
        assert str(variable(policy, "vnpuResource")) == vnpu


@pytest.mark.parametrize(
    "resource",
    [
        *PLACED_RESOURCES,
        "huawei.com/Ascend910-4c",
        "huawei.com/Ascend910-16c",
        "huawei.com/Ascend310P-2c.1cpu",
        "huawei.com/Ascend910-7c",
        "huawei.com/Ascend",
        "nvidia.com/gpu",
        "cpu",
        "xhuawei.com/Ascend910",
    ],
)
def test_a_pod_asks_npus_exactly_when_the_code_says_it_does(resource: str) -> None:
    asks = admit("ascend-npu-pods", request("CREATE", "pods", "alice", pod(npus={resource: "1"})))
    assert asks.allowed != is_npu_resource(resource), resource


@pytest.mark.parametrize(
    ("case", "admission", "allowed"),
    [
        ("a plain pod", request("CREATE", "pods", "alice", pod()), True),
        (
            "a pod with its own annotation",
            request("CREATE", "pods", "alice", pod({"a": "b"})),
            True,
        ),
        (
            "a pod carrying the scheduler's choice",
            request("CREATE", "pods", "alice", pod(CHOSEN)),
            False,
        ),
        (
            "a pod created with its rank, as the Ascend Operator and Volcano's hcclrank write it",
            request("CREATE", "pods", "alice", pod({"hccl/rankIndex": "0"})),
            True,
        ),
        (
            "a pod's rank changed later",
            request(
                "UPDATE",
                "pods",
                "alice",
                pod({"hccl/rankIndex": "1"}),
                pod({"hccl/rankIndex": "0"}),
            ),
            False,
        ),
        (
            "a rank added later",
            request("UPDATE", "pods", "alice", pod({"hccl/rankIndex": "1"}), pod()),
            False,
        ),
        (
            "a Binding carrying a rank",
            request(
                "CREATE",
                "pods",
                "alice",
                {"kind": "Binding", "metadata": {"name": "p", "annotations": {RANK: "0"}}},
                sub="binding",
            ),
            False,
        ),
        (
            "a user changing AscendReal",
            request(
                "UPDATE",
                "pods",
                "alice",
                pod({"huawei.com/AscendReal": "Ascend910-1"}),
                pod({"huawei.com/AscendReal": "Ascend910-0"}),
            ),
            False,
        ),
        (
            "a user removing predicate-time",
            request("UPDATE", "pods", "alice", pod({}), pod({"predicate-time": "1"})),
            False,
        ),
        (
            "a user editing another annotation, ours unchanged",
            request(
                "UPDATE", "pods", "alice", pod({**CHOSEN, "x": "2"}), pod({**CHOSEN, "x": "1"})
            ),
            True,
        ),
        (
            "a controller updating a pod without annotations",
            request(
                "UPDATE", "pods", "system:serviceaccount:kube-system:job-controller", pod(), pod()
            ),
            True,
        ),
        (
            "a user's Binding smuggling annotations",
            request(
                "CREATE",
                "pods",
                "alice",
                {"kind": "Binding", "metadata": {"name": "p", "annotations": CHOSEN}},
                sub="binding",
            ),
            False,
        ),
        (
            "the scheduler's Binding",
            request("CREATE", "pods", SCHEDULER, pod(CHOSEN), sub="binding"),
            True,
        ),
        (
            "the agent consuming the pod",
            request("UPDATE", "pods", AGENT, pod({**CHOSEN, "predicate-time": "18"}), pod(CHOSEN)),
            True,
        ),
        (
            "a status update changing the scheduler's choice",
            request(
                "UPDATE",
                "pods",
                "system:node:node-a",
                pod({**CHOSEN, "huawei.com/Ascend910": "Ascend910-4"}),
                pod(CHOSEN),
                sub="status",
            ),
            False,
        ),
        (
            "a kubelet's status update",
            request("UPDATE", "pods", "system:node:node-a", pod(CHOSEN), pod(CHOSEN), sub="status"),
            True,
        ),
        (
            "a user marking a pod for the scheduler to delete",
            request("UPDATE", "pods", "alice", pod({DELETING_ANNOTATION: "NPUGangRestart"}), pod()),
            False,
        ),
    ],
)
def test_only_our_components_write_our_annotations(
    case: str, admission: dict[str, Any], allowed: bool
) -> None:
    verdict = admit("ascend-npu-annotations", admission)
    assert verdict.allowed == allowed, (case, verdict)
    if not allowed:
        assert verdict.refusals[0].startswith("only the Ascend NPU scheduler and agent may")


def test_a_refusal_names_the_annotations_touched() -> None:
    verdict = admit("ascend-npu-annotations", request("CREATE", "pods", "alice", pod(CHOSEN)))
    assert verdict.refusals == (
        "only the Ascend NPU scheduler and agent may set or change the annotations "
        "huawei.com/Ascend910, predicate-time",
    )


# --- NPU pods only through our schedulers -------------------------------------------------

PODS_POLICY = "ascend-npu-pods"
OURS = "ascend-npu-scheduler"  # the kube-scheduler overlay's profile
MIRROR = {"kubernetes.io/config.mirror": "0123"}


def created(user: str = "alice", **kw: Any) -> dict[str, Any]:
    return request("CREATE", "pods", user, pod(**kw))


@pytest.mark.parametrize(
    ("case", "admission", "allowed"),
    [
        ("an NPU pod of our scheduler", created(node="", npus=NPUS, scheduler=OURS), True),
        ("placed by its creator", created(npus=NPUS, scheduler=OURS), False),
        ("of the default scheduler", created(node="", npus=NPUS, scheduler=""), False),
        (
            "of another scheduler",
            created(node="", npus=NPUS, scheduler="default-scheduler"),
            False,
        ),
        ("asking NPUs by requests", created(npus=NPUS, field="requests", scheduler=OURS), False),
        ("asking NPUs in an init container", created(npus=NPUS, init=True, scheduler=OURS), False),
        ("asking vNPU cores", created(npus={"huawei.com/npu-core": "4"}), False),
        ("asking a static vNPU", created(npus={"huawei.com/Ascend310P-2c": "1"}), False),
        ("a pod asking no NPUs, placed", created(npus={"cpu": "1"}), True),
        ("a pod asking no NPUs, any scheduler", created(node="", scheduler="other"), True),
        (
            "a kubelet's mirror pod",
            created("system:node:node-a", annotations=MIRROR, npus=NPUS),
            True,
        ),
        ("a user posing as a mirror pod", created(annotations=MIRROR, npus=NPUS), False),
        ("a kubelet's pod not a mirror", created("system:node:node-a", npus=NPUS), False),
    ],
)
def test_an_npu_pod_is_created_only_unbound_and_for_our_scheduler(
    case: str, admission: dict[str, Any], allowed: bool
) -> None:
    assert admit(PODS_POLICY, admission).allowed == allowed, case


def test_the_refusals_say_why() -> None:
    placed = admit(PODS_POLICY, created(npus=NPUS, scheduler="default-scheduler"))
    assert placed.refusals == (
        "a pod asking NPUs is placed by the NPU scheduler, which chooses its chips: it may not "
        "be created with spec.nodeName set",
        "a pod asking NPUs is placed by the NPU scheduler, which chooses its chips: its "
        "schedulerName must be ascend-npu-scheduler, not default-scheduler",
    )


def test_each_overlay_admits_npu_pods_of_its_own_scheduler_only() -> None:
    volcano = policies(OVERLAYS / "volcano" / "npu-pod-policy.yaml")[PODS_POLICY]
    ours = evaluate(
        next(v for v in volcano["variables"] if v["name"] == "schedulers")["expression"], {}
    )
    assert [str(n) for n in ours] == ["volcano"]
    assert [str(n) for n in variable(PODS_POLICY, "schedulers")] == [OURS]


# --- the agent -----------------------------------------------------------------------------

AGENT_SCOPE = "ascend-npu-agent-scope"


def deviceinfo(node: str) -> Any:
    return {"kind": "ConfigMap", "metadata": {"name": f"mindx-dl-deviceinfo-{node}"}}


# What agent/node_annotations.py writes (every key of NODE_ANNOTATIONS).
DEVICE_PLUGIN_ANNOTATIONS = {
    "baseDeviceInfos": '{"npu-0":{"DeviceID":0,"IP":"10.0.0.10","SuperDeviceID":80}}',
    "superPodID": "2",
    "serverIndex": "5",
    "serverType": "npu",
    "rackID": "1",
}

# What agent/hot_reset.py writes when a hot reset failed.
RESET_INFO = {
    "ResetInfo": '{"ThirdPartyResetDevs":[],"ManualResetDevs":[{"CardId":-1,'
    '"DeviceId":-1,"AssociatedCardId":0,"PhyID":2,"LogicID":2}]}'
}


def a_node(
    name: str = "node-a",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> Any:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"taints": taints or []},
        "status": {"capacity": {"huawei.com/Ascend910": "8"}},
    }


def changed(obj: Any, **fields: Any) -> Any:
    """``obj`` with top-level ``spec``/``status`` or ``metadata`` fields replaced."""
    copied = copy.deepcopy(obj)
    for key, value in fields.items():
        if key in ("spec", "status"):
            copied[key] = value
        else:
            copied["metadata"][key] = value
    return copied


def by_agent(resource: str, new: Any, old: Any, *, sub: str = "", **kw: Any) -> dict[str, Any]:
    return request("UPDATE", resource, AGENT, new, old, node="node-a", sub=sub, **kw)


CONSUMED = {**CHOSEN, "predicate-time": "18", "huawei.com/AscendReal": "Ascend910-0"}
SERVER_TYPE = {SERVER_TYPE_LABEL: "Ascend910B-20"}
CHIP_NAME = {CHIP_NAME_LABEL: "910B3"}


@pytest.mark.parametrize(
    ("case", "admission", "allowed"),
    [
        ("its node's pod", by_agent("pods", pod(CONSUMED), pod(CHOSEN)), True),
        (
            "another node's pod",
            by_agent("pods", pod(CONSUMED, node="node-b"), pod(CHOSEN, node="node-b")),
            False,
        ),
        ("a token bound to no node", request("UPDATE", "pods", AGENT, pod(), pod()), False),
        ("a label of its node's pod", by_agent("pods", pod(labels={"x": "y"}), pod()), False),
        ("a user's annotation", by_agent("pods", pod({"x": "y"}), pod()), False),
        (
            "the scheduler's deletion mark",
            by_agent("pods", pod({DELETING_ANNOTATION: "x"}), pod()),
            False,
        ),
        (
            "the image of its node's pod",
            by_agent("pods", changed(pod(), spec={"nodeName": "node-a", "containers": []}), pod()),
            False,
        ),
        (
            "an owner of its node's pod",
            by_agent("pods", changed(pod(), ownerReferences=[{"uid": "u"}]), pod()),
            False,
        ),
        (
            "a finalizer of its node's pod",
            by_agent("pods", changed(pod(), finalizers=["x/y"]), pod()),
            False,
        ),
        (
            "a status update of its node's pod",
            by_agent("pods", changed(pod(), status={"phase": "Failed"}), pod(), sub="status"),
            False,
        ),
        (
            "our annotations by a status update",
            by_agent("pods", pod(CONSUMED), pod(CHOSEN), sub="status"),
            True,
        ),
        ("creating a pod", request("CREATE", "pods", AGENT, pod(), node="node-a"), False),
        (
            "its DeviceInfo",
            by_agent(
                "configmaps", deviceinfo("node-a"), deviceinfo("node-a"), namespace="kube-system"
            ),
            True,
        ),
        (
            "another node's DeviceInfo",
            by_agent(
                "configmaps", deviceinfo("node-b"), deviceinfo("node-b"), namespace="kube-system"
            ),
            False,
        ),
        (
            "another ConfigMap of kube-system",
            request(
                "CREATE",
                "configmaps",
                AGENT,
                {"metadata": {"name": "coredns"}},
                namespace="kube-system",
                node="node-a",
            ),
            False,
        ),
        ("its node's servertype", by_agent("nodes", a_node(labels=SERVER_TYPE), a_node()), True),
        ("its node's chip name", by_agent("nodes", a_node(labels=CHIP_NAME), a_node()), True),
        (
            "both labels at once",
            by_agent("nodes", a_node(labels={**SERVER_TYPE, **CHIP_NAME}), a_node()),
            True,
        ),
        (
            "another node's chip name",
            by_agent("nodes", a_node("node-b", CHIP_NAME), a_node("node-b")),
            False,
        ),
        (
            "another node.kubernetes.io label",
            by_agent("nodes", a_node(labels={"node.kubernetes.io/npu.chip.count": "8"}), a_node()),
            False,
        ),
        (
            "another node's servertype",
            by_agent("nodes", a_node("node-b", SERVER_TYPE), a_node("node-b")),
            False,
        ),
        (
            "a node-restriction label",
            by_agent(
                "nodes",
                a_node(labels={"node-restriction.kubernetes.io/x": "y", **SERVER_TYPE}),
                a_node(),
            ),
            False,
        ),
        (
            "a control-plane label",
            by_agent(
                "nodes", a_node(labels={"node-role.kubernetes.io/control-plane": ""}), a_node()
            ),
            False,
        ),
        (
            "removing another label",
            by_agent("nodes", a_node(labels=SERVER_TYPE), a_node(labels={**SERVER_TYPE, "a": "b"})),
            False,
        ),
        ("an annotation", by_agent("nodes", a_node(annotations={"a": "b"}), a_node()), False),
        (
            "Huawei's device-plugin annotations of its node",
            by_agent("nodes", a_node(annotations=DEVICE_PLUGIN_ANNOTATIONS), a_node()),
            True,
        ),
        (
            "those and another annotation",
            by_agent(
                "nodes", a_node(annotations={**DEVICE_PLUGIN_ANNOTATIONS, "a": "b"}), a_node()
            ),
            False,
        ),
        (
            "ResetInfo of its node (agent/hot_reset.py)",
            by_agent("nodes", a_node(annotations=RESET_INFO), a_node()),
            True,
        ),
        (
            "ResetInfo of another node",
            by_agent("nodes", a_node("node-b", annotations=RESET_INFO), a_node("node-b")),
            False,
        ),
        (
            "another node's baseDeviceInfos",
            by_agent(
                "nodes",
                a_node("node-b", annotations={"baseDeviceInfos": "{}"}),
                a_node("node-b"),
            ),
            False,
        ),
        (
            "removing a taint",
            by_agent("nodes", a_node(), a_node(taints=[{"key": "k", "effect": "NoSchedule"}])),
            False,
        ),
        (
            "creating a node",
            request("CREATE", "nodes", AGENT, a_node("node-a"), node="node-a"),
            False,
        ),
        ("someone else is not held by it", request("UPDATE", "nodes", "alice", a_node()), True),
    ],
)
def test_the_agent_writes_only_what_it_writes_on_its_own_node(
    case: str, admission: dict[str, Any], allowed: bool
) -> None:
    assert admit(AGENT_SCOPE, admission).allowed == allowed, case


def test_an_agent_refusal_names_what_it_may_not_change() -> None:
    labelled = a_node(labels={"node-restriction.kubernetes.io/x": "y", **SERVER_TYPE})
    verdict = admit(AGENT_SCOPE, by_agent("nodes", labelled, a_node()))
    assert verdict.refusals == (
        "the agent may change only the servertype, node.kubernetes.io/npu.chip.name labels and "
        "the baseDeviceInfos, superPodID, serverIndex, serverType, rackID, ResetInfo "
        "annotations of its node, not node-restriction.kubernetes.io/x",
    )


# --- the scheduler -------------------------------------------------------------------------

SCHEDULER_SCOPE = "ascend-npu-scheduler-scope"
WRITTEN = dict([WRITER_LABEL])


def configmap(name: str, labels: dict[str, str] | None = None) -> Any:
    return {"kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}}}


def by_scheduler(
    operation: str, resource: str, new: Any, old: Any = None, **kw: Any
) -> dict[str, Any]:
    return request(operation, resource, SCHEDULER, new, old, **kw)


def own_pod(labels: dict[str, str] | None = None, **kw: Any) -> Any:
    """A replica of the scheduler, as its Deployment makes it."""
    made = pod(labels=labels, **kw)
    made["metadata"]["namespace"] = "kube-system"
    made["spec"]["serviceAccountName"] = "ascend-npu-scheduler"
    return made


LEADER = dict([LEADER_LABEL])
MARKED = {DELETING_ANNOTATION: "NPUGangRestart"}


@pytest.mark.parametrize(
    ("case", "admission", "allowed"),
    [
        (
            "tor-share-cm",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("tor-share-cm"),
                configmap("tor-share-cm"),
                namespace="volcano-system",
            ),
            True,
        ),
        (
            "a job's fault-config, made",
            by_scheduler("CREATE", "configmaps", configmap("fault-config-train", WRITTEN)),
            True,
        ),
        (
            "a job's fault-config, replaced",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("fault-config-train", WRITTEN),
                configmap("fault-config-train", WRITTEN),
            ),
            True,
        ),
        (
            "a job's reset-config labelled reset=true, updated",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("reset-config-train", {"reset": "true"}),
                configmap("reset-config-train", {"reset": "true"}),
            ),
            True,
        ),
        (
            "a reset-config created",
            by_scheduler(
                "CREATE", "configmaps", configmap("reset-config-train", {"reset": "true"})
            ),
            False,
        ),
        (
            "a reset-config without label reset=true",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("reset-config-train", {"reset": "true"}),
                configmap("reset-config-train"),
            ),
            False,
        ),
        (
            "a reset-config in kube-system",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("reset-config-x", {"reset": "true"}),
                configmap("reset-config-x", {"reset": "true"}),
                namespace="kube-system",
            ),
            False,
        ),
        (
            "a fault-config made unlabelled",
            by_scheduler("CREATE", "configmaps", configmap("fault-config-train")),
            False,
        ),
        (
            "a tenant's own ConfigMap named fault-config-",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("fault-config-train", WRITTEN),
                configmap("fault-config-train"),
            ),
            False,
        ),
        (
            "a fault-config in kube-system",
            by_scheduler(
                "CREATE",
                "configmaps",
                configmap("fault-config-x", WRITTEN),
                namespace="kube-system",
            ),
            False,
        ),
        (
            "a fault-config in volcano-system",
            by_scheduler(
                "CREATE",
                "configmaps",
                configmap("fault-config-x", WRITTEN),
                namespace="volcano-system",
            ),
            False,
        ),
        (
            "someone's ConfigMap",
            by_scheduler(
                "UPDATE",
                "configmaps",
                configmap("coredns", WRITTEN),
                configmap("coredns"),
                namespace="kube-system",
            ),
            False,
        ),
        (
            "the Volcano path's choice on an NPU pod",
            by_scheduler("UPDATE", "pods", pod(CHOSEN, npus=NPUS), pod({}, npus=NPUS)),
            True,
        ),
        (
            "its deletion mark on an NPU pod",
            by_scheduler("UPDATE", "pods", pod(MARKED, npus=NPUS), pod({}, npus=NPUS)),
            True,
        ),
        (
            "our annotations on a pod asking no NPUs",
            by_scheduler("UPDATE", "pods", pod(MARKED), pod({})),
            False,
        ),
        (
            "a user's annotation of an NPU pod",
            by_scheduler("UPDATE", "pods", pod({"x": "y"}, npus=NPUS), pod({}, npus=NPUS)),
            False,
        ),
        (
            "a label of an NPU pod",
            by_scheduler("UPDATE", "pods", pod(labels={"x": "y"}, npus=NPUS), pod(npus=NPUS)),
            False,
        ),
        (
            "the image of an NPU pod",
            by_scheduler(
                "UPDATE",
                "pods",
                changed(pod(npus=NPUS), spec={"containers": [{"name": "c", "image": "evil"}]}),
                pod(npus=NPUS),
            ),
            False,
        ),
        (
            "the status of an NPU pod",
            by_scheduler(
                "UPDATE",
                "pods",
                changed(pod(npus=NPUS), status={"phase": "Failed"}),
                pod(npus=NPUS),
                sub="status",
            ),
            False,
        ),
        (
            "its leader label on its own pod",
            by_scheduler("UPDATE", "pods", own_pod(LEADER), own_pod(), namespace="kube-system"),
            True,
        ),
        (
            "its leader label taken off",
            by_scheduler("UPDATE", "pods", own_pod(), own_pod(LEADER), namespace="kube-system"),
            True,
        ),
        (
            "another label on its own pod",
            by_scheduler("UPDATE", "pods", own_pod({"x": "y"}), own_pod(), namespace="kube-system"),
            False,
        ),
        (
            "the leader label on a pod of kube-system",
            by_scheduler("UPDATE", "pods", pod(labels=LEADER), pod(), namespace="kube-system"),
            False,
        ),
        (
            "the image of a kube-system pod",
            by_scheduler(
                "UPDATE",
                "pods",
                changed(own_pod(), spec={"containers": [{"name": "c", "image": "evil"}]}),
                own_pod(),
                namespace="kube-system",
            ),
            False,
        ),
        (
            "deleting a marked NPU pod",
            by_scheduler("DELETE", "pods", None, pod(MARKED, npus=NPUS)),
            True,
        ),
        (
            "deleting a marked vNPU pod",
            by_scheduler("DELETE", "pods", None, pod(MARKED, npus={"huawei.com/npu-core": "2"})),
            True,
        ),
        (
            "deleting an NPU pod unmarked",
            by_scheduler("DELETE", "pods", None, pod({}, npus=NPUS)),
            False,
        ),
        (
            "deleting a fault job's pod unmarked",
            by_scheduler(
                "DELETE", "pods", None, pod(labels={"fault-scheduling": "force"}, npus=NPUS)
            ),
            False,
        ),
        (
            "deleting a marked pod asking no NPUs",
            by_scheduler("DELETE", "pods", None, pod(MARKED)),
            False,
        ),
    ],
)
def test_the_scheduler_writes_only_its_own_and_deletes_only_npu_pods_it_marked(
    case: str, admission: dict[str, Any], allowed: bool
) -> None:
    assert admit(SCHEDULER_SCOPE, admission).allowed == allowed, case


def a_binding(annotations: dict[str, str] | None, uid: str = "u-1", kind: str = "Node") -> Any:
    """A Binding as a scheduler posts it (our gateway's bind_pod: the pod's UID, a node)."""
    meta: dict[str, Any] = {"name": "p", "namespace": "team"}
    if uid:
        meta["uid"] = uid
    if annotations is not None:
        meta["annotations"] = annotations
    return {"kind": "Binding", "metadata": meta, "target": {"kind": kind, "name": "node-a"}}


@pytest.mark.parametrize(
    ("case", "bound", "allowed"),
    [
        ("the chips, by UID", a_binding(CHOSEN), True),
        ("a pre-created vNPU's pod: no annotation", a_binding(None), True),
        ("a rank and the chips", a_binding({**CHOSEN, RANK: "3"}), True),
        ("a foreign annotation", a_binding({**CHOSEN, "team.example.com/owner": "x"}), False),
        ("no UID: whatever pod bears the name", a_binding(CHOSEN, uid=""), False),
        ("a target not a node", a_binding(CHOSEN, kind="Pod"), False),
    ],
)
def test_the_schedulers_bindings_name_the_pod_and_carry_only_our_annotations(
    case: str, bound: Any, allowed: bool
) -> None:
    verdict = admit(SCHEDULER_SCOPE, by_scheduler("CREATE", "pods", bound, sub="binding"))
    assert verdict.applies and verdict.allowed == allowed, (case, verdict)


def test_a_binding_refusal_names_the_foreign_annotation() -> None:
    bound = a_binding({**CHOSEN, "team.example.com/owner": "x"})
    verdict = admit(SCHEDULER_SCOPE, by_scheduler("CREATE", "pods", bound, sub="binding"))
    (refusal,) = verdict.refusals
    assert "team.example.com/owner" in refusal and "team/p" in refusal


VOLCANO_SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"
KUBE_SCHEDULER = "system:serviceaccount:kube-system:ascend-npu-kube-scheduler"


def volcano_binding(annotations: dict[str, str]) -> Any:
    return {"kind": "Binding", "metadata": {"name": "p", "uid": "u-1", "annotations": annotations}}


@pytest.mark.parametrize(
    ("what", "user", "path", "allowed"),
    [
        ("Volcano's scheduler, on its path", VOLCANO_SCHEDULER, "volcano", True),
        ("another account, on Volcano's path", "system:serviceaccount:x:binder", "volcano", False),
        (
            "Volcano's scheduler, on kube-scheduler's path",
            VOLCANO_SCHEDULER,
            "kube-scheduler",
            False,
        ),
        ("kube-scheduler-ascend, on its path", KUBE_SCHEDULER, "kube-scheduler-plugin", True),
        ("kube-scheduler, behind the extender", KUBE_SCHEDULER, "kube-scheduler", False),
        ("kube-scheduler, on Volcano's path", KUBE_SCHEDULER, "volcano", False),
        (
            "Volcano's scheduler, on the plugin's path",
            VOLCANO_SCHEDULER,
            "kube-scheduler-plugin",
            False,
        ),
    ],
)
def test_a_schedulers_bindings_carry_our_annotations_on_its_path_only(
    what: str, user: str, path: str, allowed: bool
) -> None:
    """Volcano's scheduler binds with every annotation of its copy of the pod (the rank
    written at creation, our chips), kube-scheduler-ascend with the chips the service held
    (kube_scheduler_plugin/plugin.go Bind): on its own path a scheduler's Bindings may carry
    them; nobody else's, and not on another path (kustomize's overlay as applied)."""
    overlay = policies_of(kustomize(OVERLAYS / path))
    carried = volcano_binding({**CHOSEN, RANK: "1"})
    verdict = admit(
        "ascend-npu-annotations", request("CREATE", "pods", user, carried, sub="binding"), overlay
    )
    assert verdict.allowed == allowed, (what, verdict)
    # Only a Binding: the same account updating a pod's chips is refused on every path.
    changed = request(
        "UPDATE", "pods", user, pod({"huawei.com/Ascend910": "Ascend910-1"}), pod(CHOSEN)
    )
    assert not admit("ascend-npu-annotations", changed, overlay).allowed, what


@pytest.mark.parametrize(
    ("overlay", "values"),
    [
        ("volcano", ("schedulerPath=volcano",)),
        (
            "kube-scheduler-plugin",
            ("kubeScheduler.plugin=true", "kubeScheduler.pluginImage=registry.example/ks:1"),
        ),
    ],
)
def test_each_overlay_and_the_charts_path_ship_one_annotation_policy(
    overlay: str, values: tuple[str, ...]
) -> None:
    def words(value: Any) -> Any:  # kustomize and Helm fold the expressions' lines apart
        if isinstance(value, dict):
            return {k: words(v) for k, v in value.items()}
        if isinstance(value, list):
            return [words(v) for v in value]
        return " ".join(value.split()) if isinstance(value, str) else value

    chart = [d for d in yaml.safe_load_all(helm_template(*values)) if d]
    applied = kustomize(OVERLAYS / overlay)
    policy = "ascend-npu-annotations"
    assert words(policies_of(applied)[policy]) == words(policies_of(chart)[policy])
