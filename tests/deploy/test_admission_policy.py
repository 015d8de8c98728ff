"""The admission policies, evaluated as the API server would: every CEL expression of
daemonset/base/admission-policy.yaml (and of the DRA overlay's, in test_dra_admission_policy.py)
on AdmissionRequests that must be allowed and refused.

The evaluator is cel-python; of the Kubernetes CEL libraries only ``<list>.join(<sep>)``
(Kubernetes' strings library) is used, and it is given to the evaluator here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel

from contract.annotations import WRITTEN_BY_US

ROOT = Path(__file__).parents[2]
POLICY_FILES = (
    ROOT / "daemonset" / "base" / "admission-policy.yaml",
    ROOT / "daemonset" / "overlays" / "dra" / "dra-admission-policy.yaml",
)
POLICIES = {
    d["metadata"]["name"]: d["spec"]
    for path in POLICY_FILES
    for d in yaml.safe_load_all(path.read_text())
    if d["kind"] == "ValidatingAdmissionPolicy"
}
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


def admit(policy: str, request: dict[str, Any]) -> Verdict:
    spec = POLICIES[policy]
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
        variables[variable["name"]] = evaluate(variable["expression"], activation)
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
) -> Any:
    return {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "team",
            **({"annotations": annotations} if annotations is not None else {}),
            **({"labels": labels} if labels else {}),
        },
        "spec": {"nodeName": node},
    }


def failed_pod(resource: str, phase: str = "Failed") -> Any:
    """A pod asking for ``resource``, failed by the kubelet at admission (``phase``)."""
    limits = {"limits": {resource: "2"}}
    return {
        **pod(),
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "resources": limits}]},
        "status": {"phase": phase, "reason": "UnexpectedAdmissionError"},
    }


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
    return {
        "operation": operation,
        "resource": {"group": "", "version": "v1", "resource": resource},
        "subResource": sub,
        "namespace": namespace,
        "name": name,
        "userInfo": user_info,
        "object": obj,
        "oldObject": old,
    }


CHOSEN = {"huawei.com/Ascend910": "Ascend910-0", "predicate-time": "1"}


def test_the_policy_protects_exactly_the_annotations_our_components_write() -> None:
    variable = next(
        v for v in POLICIES["ascend-npu-annotations"]["variables"] if v["name"] == "protected"
    )
    assert [str(k) for k in evaluate(variable["expression"], {})] == list(WRITTEN_BY_US)


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
            "a pod naming its own rank",
            request("CREATE", "pods", "alice", pod({"hccl/rankIndex": "0"})),
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


def deviceinfo(node: str) -> Any:
    return {"kind": "ConfigMap", "metadata": {"name": f"mindx-dl-deviceinfo-{node}"}}


@pytest.mark.parametrize(
    ("case", "admission", "allowed"),
    [
        ("its node's pod", request("UPDATE", "pods", AGENT, pod(), pod(), node="node-a"), True),
        (
            "another node's pod",
            request("UPDATE", "pods", AGENT, pod(node="node-b"), pod(node="node-b"), node="node-a"),
            False,
        ),
        ("a token bound to no node", request("UPDATE", "pods", AGENT, pod(), pod()), False),
        (
            "its DeviceInfo",
            request(
                "UPDATE",
                "configmaps",
                AGENT,
                deviceinfo("node-a"),
                namespace="kube-system",
                node="node-a",
            ),
            True,
        ),
        (
            "another node's DeviceInfo",
            request(
                "UPDATE",
                "configmaps",
                AGENT,
                deviceinfo("node-b"),
                namespace="kube-system",
                node="node-a",
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
        (
            "its node's label",
            request("UPDATE", "nodes", AGENT, {"metadata": {"name": "node-a"}}, node="node-a"),
            True,
        ),
        (
            "another node's label",
            request("UPDATE", "nodes", AGENT, {"metadata": {"name": "node-b"}}, node="node-a"),
            False,
        ),
        (
            "someone else is not held by it",
            request("UPDATE", "nodes", "alice", {"metadata": {}}),
            True,
        ),
    ],
)
def test_the_agent_writes_only_on_its_own_node(
    case: str, admission: dict[str, Any], allowed: bool
) -> None:
    assert admit("ascend-npu-agent-scope", admission).allowed == allowed, case


@pytest.mark.parametrize(
    ("case", "admission", "allowed"),
    [
        (
            "tor-share-cm",
            request(
                "UPDATE",
                "configmaps",
                SCHEDULER,
                {"metadata": {"name": "tor-share-cm"}},
                namespace="volcano-system",
            ),
            True,
        ),
        (
            "a job's fault-config",
            request(
                "CREATE", "configmaps", SCHEDULER, {"metadata": {"name": "fault-config-train"}}
            ),
            True,
        ),
        (
            "someone's ConfigMap",
            request(
                "UPDATE",
                "configmaps",
                SCHEDULER,
                {"metadata": {"name": "coredns"}},
                namespace="kube-system",
            ),
            False,
        ),
        (
            "a fault job's pod",
            request("DELETE", "pods", SCHEDULER, None, pod(labels={"fault-scheduling": "force"})),
            True,
        ),
        ("any other pod", request("DELETE", "pods", SCHEDULER, None, pod()), False),
        (
            "a pod whose label asks for nothing",
            request("DELETE", "pods", SCHEDULER, None, pod(labels={"fault-scheduling": "off"})),
            False,
        ),
        (
            "an npu-core pod failed at admission",
            request("DELETE", "pods", SCHEDULER, None, failed_pod("huawei.com/npu-core")),
            True,
        ),
        (
            "an npu-core pod running",
            request(
                "DELETE", "pods", SCHEDULER, None, failed_pod("huawei.com/npu-core", "Running")
            ),
            False,
        ),
        (
            "a 910 pod failed at admission",
            request("DELETE", "pods", SCHEDULER, None, failed_pod("huawei.com/Ascend910")),
            False,
        ),
    ],
)
def test_the_scheduler_writes_only_its_configmaps_and_deletes_only_fault_job_pods(
    case: str, admission: dict[str, Any], allowed: bool
) -> None:
    assert admit("ascend-npu-scheduler-scope", admission).allowed == allowed, case
