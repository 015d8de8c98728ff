"""The start-up check of the admission policies (infra/kube/policies.py): a policy counts only
when it exists and a binding of its name makes it deny."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from contract.objects import Obj
from infra.kube import policies
from infra.metrics import exposition, registry
from simulation.memory import MemoryCluster

ROOT = Path(__file__).parents[2]


def policy(name: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {}}


def binding(name: str, actions: list[str] | None = None, bound: str | None = None) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"policyName": bound or name, "validationActions": actions or ["Deny"]},
    }


def install(api: MemoryCluster, names: tuple[str, ...], **bindings: Obj) -> None:
    """The policies ``names`` and their Deny bindings (``bindings``: others, by name with
    underscores), served by the loopback API server too."""
    api.apis.add(("admissionregistration.k8s.io", "v1"))
    for name in names:
        api.put(policies.POLICY, policy(name))
        api.put(policies.BINDING, bindings.get(name.replace("-", "_"), binding(name)))


def installed(names: tuple[str, ...], **bindings: Obj) -> MemoryCluster:
    api = MemoryCluster()
    install(api, names, **bindings)
    return api


@pytest.mark.parametrize(
    ("found", "bound", "why"),
    [
        (None, binding("p"), "ValidatingAdmissionPolicy p does not exist"),
        (policy("p"), None, "ValidatingAdmissionPolicyBinding p does not exist"),
        (policy("p"), binding("p", bound="other"), "binds 'other'"),
        (policy("p"), binding("p", ["Warn", "Audit"]), "does not Deny"),
        (policy("p"), {"metadata": {"name": "p"}}, "binds None"),
    ],
)
def test_a_policy_that_does_not_deny_is_missing(
    found: Obj | None, bound: Obj | None, why: str
) -> None:
    assert why in (policies.not_enforced("p", found, bound) or "")


def test_a_policy_bound_with_deny_is_enforced() -> None:
    assert policies.not_enforced("p", policy("p"), binding("p", ["Audit", "Deny"])) is None


def test_every_policy_and_binding_present_starts_quietly() -> None:
    api = installed(policies.AGENT_POLICIES)
    assert policies.check(api, policies.AGENT_POLICIES, allow_missing=False) == ([], None)


def test_a_missing_binding_refuses_in_one_line_naming_it() -> None:
    api = installed(policies.SCHEDULER_POLICIES)
    api.delete(policies.BINDING, "", "ascend-npu-scheduler-scope")
    gone, refusal = policies.check(api, policies.SCHEDULER_POLICIES, allow_missing=False)
    assert gone == ["ValidatingAdmissionPolicyBinding ascend-npu-scheduler-scope does not exist"]
    assert refusal is not None and "\n" not in refusal
    assert "ascend-npu-scheduler-scope" in refusal and "--allow-missing-policies" in refusal


def test_allowed_missing_policies_warn_and_show_in_the_gauge(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = installed(
        policies.DRA_DRIVER_POLICIES,
        ascend_npu_dra_slices=binding("ascend-npu-dra-slices", ["Warn"]),
    )
    with caplog.at_level(logging.WARNING):
        gone, refusal = policies.check(api, policies.DRA_DRIVER_POLICIES, allow_missing=True)
    assert refusal is None and len(gone) == 1
    assert "WITHOUT the admission policies" in caplog.text
    metrics = registry()
    policies.report(metrics, "ascend_dra_driver", gone)
    assert "ascend_dra_driver_admission_policies_missing 1" in exposition(metrics)


def test_an_api_server_that_cannot_be_asked_refuses_unless_allowed() -> None:
    api = MemoryCluster()
    api.reachable = False
    _, refusal = policies.check(api, policies.AGENT_POLICIES, allow_missing=False)
    assert refusal is not None and "could not be read" in refusal
    assert policies.check(api, policies.AGENT_POLICIES, allow_missing=True)[1] is None


@pytest.mark.parametrize(
    ("rbac", "names"),
    [
        ("agent-rbac.yaml", policies.AGENT_POLICIES),
        ("scheduler-rbac.yaml", policies.SCHEDULER_POLICIES),
        ("dra-rbac.yaml", policies.DRA_DRIVER_POLICIES),
    ],
)
def test_each_component_may_read_exactly_its_policies_and_they_are_shipped(
    rbac: str, names: tuple[str, ...]
) -> None:
    manifests = ROOT / "daemonset"
    rendered = {p.name: list(yaml.safe_load_all(p.read_text())) for p in manifests.rglob("*.yaml")}
    (role,) = [d for d in rendered[rbac] if d and d["kind"] == "ClusterRole"]
    (rule,) = [r for r in role["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    assert sorted(rule["resourceNames"]) == sorted(names)
    assert rule["verbs"] == ["get"]
    shipped = {
        (d["kind"], d["metadata"]["name"])
        for docs in rendered.values()
        for d in docs
        if d and d["kind"].startswith("ValidatingAdmissionPolicy")
    }
    for name in names:
        assert ("ValidatingAdmissionPolicy", name) in shipped
        assert ("ValidatingAdmissionPolicyBinding", name) in shipped
