"""The start-up check of the admission policies (infra/kube/policies.py): a policy counts only
when it exists and a binding of its name makes it deny."""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

import pytest
import yaml

from contract.objects import Obj
from infra.kube import policies
from infra.metrics import exposition, registry
from simulation.cluster import wait_for
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


@pytest.mark.parametrize(
    ("flags", "by_default", "required"),
    [
        ([], False, False),  # the agent: a drop-in under Huawei's DaemonSets
        ([], True, True),  # the scheduler and the DRA driver
        (["--require-admission-policies"], False, True),
        (["--require-admission-policies=false"], True, False),
        (["--allow-missing-policies"], True, False),
        (["--allow-missing-policies=false"], False, True),
        (["--require-admission-policies", "--allow-missing-policies=false"], False, True),
    ],
)
def test_require_and_allow_decide_over_each_components_default(
    flags: list[str], by_default: bool, required: bool
) -> None:
    parser = argparse.ArgumentParser()
    policies.add_flag(parser, required_by_default=by_default)
    assert policies.required(parser.parse_args(flags), by_default) is required


def test_require_and_allow_both_true_contradict() -> None:
    parser = argparse.ArgumentParser()
    policies.add_flag(parser, required_by_default=False)
    args = parser.parse_args(["--require-admission-policies", "--allow-missing-policies"])
    with pytest.raises(ValueError, match="contradict"):
        policies.required(args, False)


def test_policies_that_cannot_be_read_count_each_and_say_what_they_guard() -> None:
    api = MemoryCluster()
    api.reachable = False
    gone = policies.missing(api, policies.AGENT_POLICIES)
    assert len(gone) == 2 and all("could not be read" in why for why in gone)
    text = policies.summary(policies.AGENT_POLICIES, gone)
    for name in policies.AGENT_POLICIES:
        assert f"{name} ({policies.GUARDS[name]})" in text


def test_the_watch_rereads_until_they_are_installed(caplog: pytest.LogCaptureFixture) -> None:
    api = MemoryCluster()
    gone, _ = policies.check(api, policies.AGENT_POLICIES, allow_missing=True)
    watch = policies.PolicyWatch(api, policies.AGENT_POLICIES, gone, period=0.05)
    metrics = registry()
    watch.report(metrics, "ascend_agent")
    assert "ascend_agent_admission_policies_missing 2" in exposition(metrics)
    stop = threading.Event()
    with caplog.at_level(logging.INFO):
        watch.start(stop)
        try:
            assert wait_for(lambda: "still WITHOUT" in caplog.text, timeout=10)
            install(api, policies.AGENT_POLICIES)
            assert wait_for(lambda: watch.count == 0, timeout=10)
        finally:
            stop.set()
    assert "ascend_agent_admission_policies_missing 0" in exposition(metrics)
    assert "are enforced now" in caplog.text
