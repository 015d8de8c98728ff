"""The start-up check of the admission policies each component relies on.

RBAC lets each component write more than it should (the agent its node's pods, the scheduler
ConfigMaps and pod annotations, the DRA driver ResourceSlices); the chart's
ValidatingAdmissionPolicies confine what it may change, and keep tenants off the annotations
that hand out chips. Without them the confinement silently disappears, so each component
checks at start that its policies and their bindings exist and deny (a binding whose
``validationActions`` lacks ``Deny`` only warns or audits: it counts as missing), and refuses
to start otherwise unless told ``--allow-missing-policies``. Each binding is named as its
policy (charts/ascend-npu/templates/admission-policy.yaml, dra-admission-policy.yaml); the
components may ``get`` exactly these names (the chart's RBAC).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from contract.objects import Obj
from infra.cli import bool_flag
from infra.kube.port import KubeError, KubeGateway, NotFound
from infra.metrics import Registry, owned

log = logging.getLogger(__name__)

POLICY = "validatingadmissionpolicies.admissionregistration.k8s.io/v1"
BINDING = "validatingadmissionpolicybindings.admissionregistration.k8s.io/v1"

ANNOTATIONS = "ascend-npu-annotations"  # only our components write our annotations
# What each component relies on: the policies that keep tenants off the annotations it reads
# and the one confining its own identity.
AGENT_POLICIES = (ANNOTATIONS, "ascend-npu-agent-scope")
SCHEDULER_POLICIES = (ANNOTATIONS, "ascend-npu-scheduler-scope")
DRA_DRIVER_POLICIES = ("ascend-npu-claims", "ascend-npu-dra-slices")

FLAG = "--allow-missing-policies"


def add_flag(parser: argparse.ArgumentParser) -> None:
    """``--allow-missing-policies``: start although a policy is missing (a test bed without
    the chart's policies), warning loudly."""
    parser.add_argument(
        FLAG,
        **bool_flag(False),
        help="start even when the chart's ValidatingAdmissionPolicies (or their Deny "
        "bindings) are missing, with a WARNING and the admission_policies_missing gauge "
        "(default: refuse to start, exit 2)",
    )


def not_enforced(name: str, policy: Obj | None, binding: Obj | None) -> str | None:
    """Why the policy ``name`` is not enforced (None: it is): absent, unbound, bound to
    another policy, or bound without ``Deny``."""
    if policy is None:
        return f"ValidatingAdmissionPolicy {name} does not exist"
    if binding is None:
        return f"ValidatingAdmissionPolicyBinding {name} does not exist"
    spec = binding.get("spec") or {}
    if spec.get("policyName") != name:
        return f"ValidatingAdmissionPolicyBinding {name} binds {spec.get('policyName')!r}"
    actions = spec.get("validationActions") or []
    if "Deny" not in actions:
        return (
            f"ValidatingAdmissionPolicyBinding {name} does not Deny (validationActions {actions})"
        )
    return None


def _get(gateway: KubeGateway, kind: str, name: str) -> Obj | None:
    try:
        return gateway.get_object(kind, "", name)
    except NotFound:
        return None


def missing(gateway: KubeGateway, names: Sequence[str]) -> list[str]:
    """What is wrong with each policy of ``names`` that is not enforced; KubeError when the
    API server cannot tell (unreachable, or this identity may not read them)."""
    found = []
    for name in names:
        why = not_enforced(name, _get(gateway, POLICY, name), _get(gateway, BINDING, name))
        if why is not None:
            found.append(why)
    return found


def check(
    gateway: KubeGateway, names: Sequence[str], allow_missing: bool
) -> tuple[list[str], str | None]:
    """The start-up check: what is missing, and the one-line refusal (None: start). With
    ``allow_missing`` a missing policy is logged as a WARNING instead of refused."""
    try:
        gone = missing(gateway, names)
    except KubeError as failed:
        problem = f"the admission policies {', '.join(names)} could not be read: {failed}"
        if not allow_missing:
            return [problem], f"{problem} (start anyway with {FLAG})"
        gone = [problem]
    if gone and not allow_missing:
        return gone, (
            f"refusing to start without the admission policies it relies on: {'; '.join(gone)} "
            f"(install the chart's policies, or start anyway with {FLAG})"
        )
    if gone:
        log.warning(
            "%s: starting WITHOUT the admission policies that confine this component: %s",
            FLAG,
            "; ".join(gone),
        )
    return gone, None


def report(of: Registry, prefix: str, gone: Sequence[str]) -> None:
    """The gauge ``<prefix>_admission_policies_missing``: how many were missing at start."""
    count = len(gone)
    of.register(
        owned(
            f"{prefix}_admission_policies_missing",
            "gauge",
            "Admission policies (or their Deny bindings) this component relies on that were "
            "missing at start (--allow-missing-policies).",
            lambda: count,
        )
    )
