"""The manifests as shipped, on the real control plane: each overlay and the base rendered by
the real kustomize and applied server-side (and again, changing nothing); the RBAC of each
component's ServiceAccount, as the real authorizer answers for its real token, granting every
call the code makes and nothing else; and the admission policies evaluated by the real API
server on the requests tests/deploy evaluates offline, made by the identities that make them.

What cannot be a real request is left to the offline tests: a constraint naming another
request of the claim is refused by the claim's own validation before admission, and so is a
slice moved to another node (spec.nodeName is immutable), checked here only as refused.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent.allocation.handshake_rules import consumed_record
from agent.faults.pipeline import CONFIG_NAME as FAULT_CONFIG_NAME
from agent.node_annotations import NODE_ANNOTATIONS, annotate_node, node_annotations
from chip_drivers.chips import Chip, NodeChips
from contract.annotations import (
    CHIPS_ANNOTATION,
    DELETING_ANNOTATION,
    FAULT_CONFIG_PREFIX,
    FAULT_RECORD,
    PREDICATE_TIME,
    REAL_ANNOTATION,
    SERVER_TYPE_LABEL,
    SET_AT_CREATION,
    TOR_SHARE_CONFIGMAP,
    WRITER_LABEL,
    WRITTEN_BY_US,
)
from contract.chip_names import NPU, RESOURCE_NAME
from contract.deviceinfo import configmap_name
from contract.dra import DEFAULT_DRIVER
from contract.vnpu import CHIP_NAME_LABEL, NPU_CORE_RESOURCE
from infra.kube.client import KubernetesGateway, api_client
from infra.kube.policies import AGENT_POLICIES, DRA_DRIVER_POLICIES, SCHEDULER_POLICIES
from infra.kube.port import KubeError
from scheduler_core.certs import SecretNames
from scheduler_core.engine.rescheduling import GANG_RESTART_REASON
from scheduler_core.service.controllers.creations import CHIP_CUT_ERROR
from scheduler_core.service.controllers.deletions import delete_marked
from scheduler_core.service.election import LEADER_LABEL, Election
from testbed.cluster import (
    AGENT_ACCOUNT,
    NAMESPACE,
    SCHEDULER_ACCOUNT,
    SCHEDULER_PROFILE,
    apply,
    bound_agent_token,
)
from testbed.control_plane import ControlPlane, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj, Rest, RestError
from tests.deploy.test_manifests import (
    CLUSTER_WIDE_CALLS,
    COMPONENTS,
    DIRECT_CALLS,
    OVERLAYS,
    RBAC_OF_CALL,
    WATCHED,
    calls_in_code,
    source_of,
)

DRA_ACCOUNT = "ascend-npu-dra-driver"
VOLCANO_CONFIG_ACCOUNT = "ascend-npu-volcano-config"
CERTS_ACCOUNT = "ascend-npu-scheduler-certs"
SECRET_NAMES = astuple(SecretNames())
CA_CONFIGMAP = "ascend-npu-scheduler-ca"  # the merge Job's --ca-configmap, as the chart names it
VOLCANO = "volcano-system"
TEAM = "team"
NODE_A, NODE_B = "node-a", "node-b"
DEADLINE = 120.0  # seconds: a shared 2-core machine
CHOSEN = {CHIPS_ANNOTATION: "Ascend910-0", PREDICATE_TIME: "1"}
CLAIM_CLASS = "ascend910.npu.ascend.example.com"
RING = "npu.ascend.example.com/hccsRing"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSRR = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
# Rules RBAC limits to named objects (resourceNames): the scheduler watches its fault record
# by name and elects its leader on its own Lease.
RESOURCE_NAMES: dict[tuple[str, str, str, str | None], tuple[str, ...]] = {
    (SCHEDULER_ACCOUNT, "configmaps", "list", None): (FAULT_RECORD[1],),
    (SCHEDULER_ACCOUNT, "configmaps", "watch", None): (FAULT_RECORD[1],),
    (SCHEDULER_ACCOUNT, "leases.coordination.k8s.io", "get", NAMESPACE): (Election().name,),
    # Volcano's scheduler ConfigMap, read at start on the Volcano path (--volcano-config).
    (SCHEDULER_ACCOUNT, "configmaps", "get", VOLCANO): ("volcano-scheduler-configmap",),
    (SCHEDULER_ACCOUNT, "leases.coordination.k8s.io", "update", NAMESPACE): (Election().name,),
    # The Volcano overlay's Job: Volcano's scheduler ConfigMap and Deployment, and the
    # service's CA it puts beside them.
    (VOLCANO_CONFIG_ACCOUNT, "configmaps", "get", VOLCANO): ("volcano-scheduler-configmap",),
    (VOLCANO_CONFIG_ACCOUNT, "configmaps", "update", VOLCANO): (
        "volcano-scheduler-configmap",
        CA_CONFIGMAP,
    ),
    (VOLCANO_CONFIG_ACCOUNT, "configmaps", "delete", VOLCANO): (CA_CONFIGMAP,),
    (VOLCANO_CONFIG_ACCOUNT, "deployments.apps", "get", VOLCANO): ("volcano-scheduler",),
    (VOLCANO_CONFIG_ACCOUNT, "deployments.apps", "update", VOLCANO): ("volcano-scheduler",),
    # The agent gets no ConfigMap but the fault-code override (its own DeviceInfo it reads
    # through a patch its policy pins).
    (AGENT_ACCOUNT, "configmaps", "get", NAMESPACE): (FAULT_CONFIG_NAME,),
    # The certs Job reads and fills only its own three Secrets (the manifests make them).
    (CERTS_ACCOUNT, "secrets", "get", NAMESPACE): SECRET_NAMES,
    (CERTS_ACCOUNT, "secrets", "update", NAMESPACE): SECRET_NAMES,
}
# Each component's start-up check reads its admission policies and their bindings by name.
POLICY_NAMES = {
    AGENT_ACCOUNT: AGENT_POLICIES,
    SCHEDULER_ACCOUNT: SCHEDULER_POLICIES,
    DRA_ACCOUNT: DRA_DRIVER_POLICIES,
}


def names_of(component: str, rule: tuple[str, str, str | None]) -> tuple[str, ...]:
    """The objects RBAC names for the component's rule ("": any)."""
    if rule[0].endswith(".admissionregistration.k8s.io"):
        return POLICY_NAMES[component]
    return RESOURCE_NAMES.get((component, *rule), ("",))


# --- requests and their answers ----------------------------------------------------------


def attempt(
    rest: Rest,
    method: str,
    path: str,
    body: Any = None,  # an object, or a JSON patch's list of operations
    *,
    patch: str = "merge",
    dry_run: bool = False,
) -> tuple[int, str]:
    """The status code and message of a call (200 when it succeeded)."""
    types = {"merge": "application/merge-patch+json", "json": "application/json-patch+json"}
    content = types[patch] if method == "PATCH" else "application/json"
    try:
        rest.request(
            method, path, body, query={"dryRun": "All"} if dry_run else None, content_type=content
        )
    except RestError as refused:
        return refused.status, refused.message
    return 200, ""


def allowed(rest: Rest, method: str, path: str, body: Obj | None = None, **kw: Any) -> None:
    status, message = attempt(rest, method, path, body, **kw)
    assert status == 200, f"{method} {path}: {status} {message}"


def denied_by_policy(
    rest: Rest,
    policy: str,
    method: str,
    path: str,
    body: Obj | None = None,
    *,
    status: int = 403,
    says: str = "",
    **kw: Any,
) -> None:
    """Refused by ``policy`` (not by RBAC, not by validation): the API server's message is
    "ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: ..."
    (staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go)."""
    code, message = attempt(rest, method, path, body, **kw)
    assert (code, f"ValidatingAdmissionPolicy '{policy}'" in message) == (status, True), (
        f"{method} {path}: {code} {message}"
    )
    assert says in message, message


def denied_by_rbac(rest: Rest, method: str, path: str, body: Obj | None = None) -> None:
    """Refused by the authorizer: 403 with RBAC's "cannot <verb> resource" message."""
    code, message = attempt(rest, method, path, body)
    assert code == 403 and " cannot " in message, f"{method} {path}: {code} {message}"


# --- objects -------------------------------------------------------------------------------


def pod(
    name: str,
    node: str | None = None,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    scheduler: str | None = None,
    init: bool = False,
) -> Obj:
    """A pod; ``limits``: what its container asks (its init container's when ``init``)."""
    container: Obj = {"name": "main", "image": "ascend-training:latest"}
    asking = {**container, "name": "init"} if init else container
    if limits:
        asking["resources"] = {"limits": limits}
    spec: Obj = {
        "containers": [container],
        # The nodes have no kubelet: tolerate their unreachable taints (no eviction).
        "tolerations": [{"operator": "Exists"}],
    }
    if init:
        spec["initContainers"] = [asking]
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": spec,
    }


def npu_pod(name: str, chips: str = "1", resource: str = RESOURCE_NAME, **kw: Any) -> Obj:
    """An NPU pod as the policy admits it: unbound, of our scheduler (kube-scheduler's
    profile, the scheduler the cluster fixture leaves in force)."""
    return pod(name, limits={resource: chips}, scheduler=SCHEDULER_PROFILE, **kw)


def placed(rest: Rest, name: str, node: str, **kw: Any) -> str:
    """An NPU pod made and bound to ``node`` (a Binding, as a scheduler binds): its path."""
    allowed(rest, "POST", PODS, npu_pod(name, **kw))
    allowed(rest, "POST", f"{PODS}/{name}/binding", binding(name, node))
    return f"{PODS}/{name}"


def configmap(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": {},
    }


def a_slice(
    name: str, node: str, devices: int = 0, *, driver: str = DEFAULT_DRIVER, pool: str = ""
) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"npu-{i}"} for i in range(devices)],
        },
    }


def claim(name: str, count: int | None, *, ring: bool = False, mode: str | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": CLAIM_CLASS}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    devices: Obj = {"requests": [{"name": "npus", "exactly": exactly}]}
    if ring:
        devices["constraints"] = [{"requests": ["npus"], "matchAttribute": RING}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }


PODS = f"/api/v1/namespaces/{TEAM}/pods"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


# --- the cluster ---------------------------------------------------------------------------


def marks(admin: Rest, documents: list[Obj]) -> dict[str, str]:
    """What changes when an object is written: its generation where it has one (status
    writes of the controllers leave it), else its resourceVersion."""
    found = {}
    for document in documents:
        meta = document["metadata"]
        path = admin.path(
            document["apiVersion"], document["kind"], meta["name"], meta.get("namespace", "")
        )
        stored = admin.get(path)["metadata"]
        found[path] = str(stored.get("generation") or stored["resourceVersion"])
    return found


def apply_twice(plane: ControlPlane, documents: list[Obj]) -> None:
    apply(plane, documents)
    first = marks(plane.rest(), documents)
    apply(plane, documents)
    assert marks(plane.rest(), documents) == first, "a second apply changes nothing"


def test_the_base_applies_server_side_and_again_changing_nothing(
    control_plane: ControlPlane,
) -> None:
    apply_twice(control_plane, kustomize(MANIFESTS / "base"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_applies_server_side_and_again_changing_nothing(
    control_plane: ControlPlane, overlay: str
) -> None:
    rendered = kustomize(MANIFESTS / "overlays" / overlay)
    if overlay == "volcano":
        # Volcano's own install makes its namespace; the overlay only replaces its ConfigMap.
        assert {d["metadata"].get("namespace") for d in rendered} >= {"volcano-system"}
        control_plane.rest().ensure_namespace("volcano-system")
    apply_twice(control_plane, rendered)


def bound_token(plane: ControlPlane, account: str, node: str) -> Path:
    """A kubeconfig holding a token of ``kube-system/account`` bound to a pod of that account
    on ``node``: the API server names the node in it (``authentication.kubernetes.io/
    node-name``, pkg/serviceaccount/claims.go), as in the kubelet's projected token."""
    if account == AGENT_ACCOUNT:
        return plane.token_kubeconfig(bound_agent_token(plane, node), f"{account}-{node}")
    admin = plane.rest()
    name = f"{account}-{node}"
    body = pod(name, node)
    body["spec"]["serviceAccountName"] = account
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    try:
        created = admin.create(path, body)
    except RestError as exists:
        if exists.status != 409:
            raise
        created = admin.get(f"{path}/{name}")
    token = plane.token(NAMESPACE, account, bound_to=created)
    return plane.token_kubeconfig(token, name)


@dataclass
class Cluster:
    plane: ControlPlane
    admin: Rest
    alice: Rest  # a tenant: pods, bindings and claims in its namespace
    scheduler: Rest
    agent: Rest  # bound to node-a
    agent_unbound: Rest
    dra: Rest  # bound to node-a
    dra_unbound: Rest
    volcano_config: Rest  # the Volcano overlay's Job
    certs: Rest  # the Job making the extender's certificates and token
    kubelet: Rest  # node-a's kubelet (system:node:node-a, as NodeRestriction knows it)


PODS_POLICY = "ascend-npu-pods"


def use_pod_policy(cluster: Cluster, overlay: str) -> None:
    """Apply ``overlay``'s NPU pod policy and wait until it is in force: an NPU pod of the
    other overlay's scheduler is refused."""
    (policy,) = [
        d
        for d in kustomize(MANIFESTS / "overlays" / overlay)
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == PODS_POLICY
    ]
    cluster.admin.apply(policy)
    other = {"kube-scheduler": "volcano", "volcano": SCHEDULER_PROFILE}[overlay]
    probe = pod("probe", limits={RESOURCE_NAME: "1"}, scheduler=other)
    wait_refused(cluster.alice, PODS_POLICY, "POST", PODS, probe)


def wait_refused(rest: Rest, policy: str, method: str, path: str, body: Obj) -> None:
    """A policy's binding takes effect once the API server's policy informer has it (a
    moment after its creation): wait until a request it refuses is refused (dry run)."""

    def refused() -> bool:
        _, message = attempt(rest, method, path, body, dry_run=True)
        return f"ValidatingAdmissionPolicy '{policy}'" in message

    wait_until(refused, DEADLINE, f"the policy {policy} in force")


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Cluster]:
    plane = control_plane
    admin = plane.rest()
    admin.ensure_namespace(VOLCANO)
    for overlay in OVERLAYS:
        apply(plane, kustomize(MANIFESTS / "overlays" / overlay))
    for node in (NODE_A, NODE_B):
        try:
            admin.create("/api/v1/nodes", {"metadata": {"name": node}})
        except RestError as exists:
            if exists.status != 409:
                raise
    admin.ensure_namespace(TEAM)
    tenant_rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "patch", "update"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "verbs": ["create"],
        },
    ]
    for document in (
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "tenant", "namespace": TEAM},
            "rules": tenant_rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant", "namespace": TEAM},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
            ],
        },
    ):
        admin.apply(document)
    found = Cluster(
        plane=plane,
        admin=admin,
        alice=plane.rest(plane.user("alice", "alice")),
        scheduler=plane.rest(plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT)),
        agent=plane.rest(bound_token(plane, AGENT_ACCOUNT, NODE_A)),
        agent_unbound=plane.rest(plane.service_account(NAMESPACE, AGENT_ACCOUNT)),
        dra=plane.rest(bound_token(plane, DRA_ACCOUNT, NODE_A)),
        dra_unbound=plane.rest(plane.service_account(NAMESPACE, DRA_ACCOUNT)),
        volcano_config=plane.rest(plane.service_account(NAMESPACE, VOLCANO_CONFIG_ACCOUNT)),
        certs=plane.rest(plane.service_account(NAMESPACE, CERTS_ACCOUNT)),
        kubelet=plane.rest(plane.user("kubelet-node-a", f"system:node:{NODE_A}", "system:nodes")),
    )
    # Each scheduler's overlay admits NPU pods of its own scheduler (the last applied, the
    # Volcano overlay's, is in force): kube-scheduler's here, as most tests create them.
    use_pod_policy(found, "kube-scheduler")
    wait_refused(
        found.alice, "ascend-npu-annotations", "POST", PODS, pod("probe", annotations=CHOSEN)
    )
    # Each probe is a request its policy refuses for the most basic of its reasons (an
    # unbound token, a ConfigMap not the scheduler's, a count never allowed).
    label = {"metadata": {"labels": {"probe": "1"}}}
    unbound = found.agent_unbound
    wait_refused(unbound, "ascend-npu-agent-scope", "PATCH", f"/api/v1/nodes/{NODE_A}", label)
    system = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    wait_refused(found.scheduler, "ascend-npu-scheduler-scope", "POST", system, configmap("probe"))
    wait_refused(
        found.dra_unbound, "ascend-npu-dra-slices", "POST", SLICES, a_slice("probe", NODE_A)
    )
    claims = f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaims"
    wait_refused(found.alice, "ascend-npu-claims", "POST", claims, claim("probe", 3))
    yield found


# --- RBAC ----------------------------------------------------------------------------------

Rule = tuple[str, str, str | None]


def needed(component: str) -> set[Rule]:
    """What the component's code calls, as tests/deploy/test_manifests.py derives it."""
    rules: set[Rule] = set()
    for call in calls_in_code(component):
        rules |= CLUSTER_WIDE_CALLS.get(component, {}).get(call) or RBAC_OF_CALL[call]
    for call, direct in DIRECT_CALLS.get(component, {}).items():
        if f".{call}(" in source_of(component):
            rules |= direct
    return rules | {(r, verb, ns) for r, ns in WATCHED[component] for verb in ("list", "watch")}


def identity(cluster: Cluster, component: str) -> Rest:
    return {
        SCHEDULER_ACCOUNT: cluster.scheduler,
        AGENT_ACCOUNT: cluster.agent,
        DRA_ACCOUNT: cluster.dra,
        VOLCANO_CONFIG_ACCOUNT: cluster.volcano_config,
        CERTS_ACCOUNT: cluster.certs,
    }[component]


def may(rest: Rest, resource: str, verb: str, namespace: str | None, name: str = "") -> bool:
    """SelfSubjectAccessReview: whether the caller may (namespace "" is every namespace)."""
    plural, _, group = resource.partition(".")
    plural, _, sub = plural.partition("/")
    attributes = {
        "group": group,
        "resource": plural,
        "subresource": sub,
        "verb": verb,
        "namespace": namespace or "",
        "name": name,
    }
    review = rest.create(SSAR, {"spec": {"resourceAttributes": attributes}})
    return bool(review["status"]["allowed"])


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_each_component_may_make_every_call_its_code_makes(
    cluster: Cluster, component: str
) -> None:
    rest = identity(cluster, component)
    refused = [
        rule
        for rule in sorted(needed(component), key=str)
        if not all(may(rest, *rule, name=name) for name in names_of(component, rule))
    ]
    assert not refused, f"{component} may not: {refused}"


Flat = tuple[str, str, str, str]  # (group, resource, verb, name or "")


def flatten(rules: list[Obj]) -> set[Flat]:
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [""]
    }


def rules_in(rest: Rest, namespace: str) -> set[Flat]:
    """SelfSubjectRulesReview: every resource rule the caller holds in ``namespace``."""
    review = rest.create(SSRR, {"spec": {"namespace": namespace}})
    assert not review["status"].get("incomplete"), review["status"]
    return flatten(review["status"]["resourceRules"])


@pytest.mark.parametrize("component", sorted(COMPONENTS))
@pytest.mark.parametrize("namespace", [NAMESPACE, TEAM, VOLCANO])
def test_each_component_holds_no_rule_its_code_does_not_need(
    cluster: Cluster, component: str, namespace: str
) -> None:
    # What every ServiceAccount holds (system:basic-user: its own access reviews), read from
    # an account bound to nothing.
    nobody = cluster.plane.rest(cluster.plane.service_account(NAMESPACE, "testbed-nobody"))
    baseline = rules_in(nobody, namespace)
    held = rules_in(identity(cluster, component), namespace) - baseline
    expected = set()
    for resource, verb, where in needed(component):
        if where in (None, namespace):
            plural, _, group = resource.partition(".")
            for name in names_of(component, (resource, verb, where)):
                expected.add((group, plural, verb, name))
    # Exactly: kube-scheduler (the kube-scheduler overlay) has an account of its own.
    assert held == expected


def test_the_agent_is_refused_what_it_does_not_do(cluster: Cluster) -> None:
    agent, admin = cluster.agent, cluster.admin
    allowed(admin, "POST", PODS, pod("agent-victim", NODE_A))
    denied_by_rbac(agent, "GET", "/api/v1/secrets")
    denied_by_rbac(agent, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets")
    denied_by_rbac(agent, "DELETE", f"{PODS}/agent-victim")  # even its own node's pod
    denied_by_rbac(agent, "GET", "/api/v1/nodes")
    denied_by_rbac(agent, "POST", f"/api/v1/namespaces/{TEAM}/configmaps", configmap("x"))
    # RBAC grants patching nodes (its own); the admission policy holds the others.
    denied_by_policy(
        agent,
        "ascend-npu-agent-scope",
        "PATCH",
        f"/api/v1/nodes/{NODE_B}",
        {"metadata": {"labels": {"x": "y"}}},
    )
    # No kube-system ConfigMap but the fault-code override is read by name, and its own
    # DeviceInfo only through an (empty) patch, which the policy refuses on any other.
    system = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    others = ("kube-proxy-like", f"mindx-dl-deviceinfo-{NODE_B}")
    for name in others:
        allowed(admin, "POST", system, configmap(name))
        denied_by_rbac(agent, "GET", f"{system}/{name}")
        denied_by_policy(agent, "ascend-npu-agent-scope", "PATCH", f"{system}/{name}", {})
    denied_by_rbac(agent, "GET", system)


def test_the_scheduler_is_refused_what_it_does_not_do(cluster: Cluster) -> None:
    scheduler = cluster.scheduler
    denied_by_rbac(scheduler, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/anything")
    denied_by_rbac(scheduler, "GET", "/api/v1/secrets")
    denied_by_rbac(scheduler, "DELETE", f"/api/v1/nodes/{NODE_B}")
    denied_by_rbac(scheduler, "PATCH", f"/api/v1/nodes/{NODE_B}", {"metadata": {"labels": {}}})
    denied_by_rbac(scheduler, "DELETE", f"/api/v1/namespaces/{NAMESPACE}/configmaps/anything")
    assert cluster.admin.get(f"/api/v1/nodes/{NODE_B}")["metadata"]["name"] == NODE_B


def test_the_dra_driver_is_refused_what_it_does_not_do(cluster: Cluster) -> None:
    dra = cluster.dra
    denied_by_rbac(dra, "GET", "/api/v1/pods")
    denied_by_rbac(dra, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/anything")
    denied_by_rbac(dra, "PATCH", f"/api/v1/nodes/{NODE_A}", {"metadata": {"labels": {}}})
    denied_by_rbac(dra, "POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", configmap("x"))
    denied_by_rbac(dra, "DELETE", f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaims/c")


# --- the annotations policy ----------------------------------------------------------------

ANNOTATIONS = "ascend-npu-annotations"
REFUSAL = "only the Ascend NPU scheduler and agent may set or change the annotations "


def test_a_tenant_creates_its_pods_but_none_carrying_our_annotations(cluster: Cluster) -> None:
    alice = cluster.alice
    allowed(alice, "POST", PODS, pod("plain"))
    allowed(alice, "POST", PODS, pod("own", annotations={"a": "b"}))
    denied_by_policy(
        alice,
        ANNOTATIONS,
        "POST",
        PODS,
        pod("chosen", annotations=CHOSEN),
        says=REFUSAL + "huawei.com/Ascend910, predicate-time",
    )
    for key in WRITTEN_BY_US:
        if key in SET_AT_CREATION:  # a rank, as Huawei's operator writes it: creation only
            allowed(alice, "POST", PODS, pod("ranked", annotations={key: "0"}))
            denied_by_policy(
                alice,
                ANNOTATIONS,
                "PATCH",
                f"{PODS}/ranked",
                {"metadata": {"annotations": {key: "1"}}},
                says=key,
            )
            continue
        denied_by_policy(
            alice, ANNOTATIONS, "POST", PODS, pod("one", annotations={key: "0"}), says=key
        )


def test_a_tenant_may_not_change_or_remove_what_the_scheduler_wrote(cluster: Cluster) -> None:
    alice, admin = cluster.alice, cluster.admin
    allowed(alice, "POST", PODS, npu_pod("placed"))
    written = {**CHOSEN, REAL_ANNOTATION: "Ascend910-0"}
    path = f"{PODS}/placed"
    allowed(cluster.scheduler, "PATCH", path, {"metadata": {"annotations": written}})
    denied_by_policy(
        alice,
        ANNOTATIONS,
        "PATCH",
        path,
        {"metadata": {"annotations": {REAL_ANNOTATION: "Ascend910-1"}}},
        says=REAL_ANNOTATION,
    )
    denied_by_policy(
        alice,
        ANNOTATIONS,
        "PATCH",
        path,
        {"metadata": {"annotations": {PREDICATE_TIME: None}}},
        says=PREDICATE_TIME,
    )
    # Other annotations and labels, ours left as they are: the tenant's and anyone's.
    allowed(alice, "PATCH", path, {"metadata": {"annotations": {"x": "2"}}})
    allowed(admin, "PATCH", path, {"metadata": {"labels": {"team": "a"}}})
    annotations = admin.get(path)["metadata"]["annotations"]
    assert {k: annotations[k] for k in written} == written
    assert annotations["x"] == "2"


def binding(
    name: str, node: str, annotations: dict[str, str] | None = None, *, uid: str = ""
) -> Obj:
    """A Binding of pod ``name``; with ``uid``, of that very pod (the API server checks it)."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": name,
            "annotations": annotations or {},
            **({"uid": uid} if uid else {}),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def test_only_the_scheduler_binds_with_our_annotations(cluster: Cluster) -> None:
    alice, admin = cluster.alice, cluster.admin
    for name in ("bound-by-alice", "bound-by-scheduler"):
        allowed(alice, "POST", PODS, pod(name))
    # A Binding's annotations land on the pod (pkg/registry/core/pod/storage/storage.go,
    # setPodNodeAndMetadata): the policy holds the binding subresource too.
    path = f"{PODS}/bound-by-alice/binding"
    denied_by_policy(alice, ANNOTATIONS, "POST", path, binding("bound-by-alice", NODE_A, CHOSEN))
    allowed(alice, "POST", path, binding("bound-by-alice", NODE_A))
    path = f"{PODS}/bound-by-scheduler/binding"
    uid = admin.get(f"{PODS}/bound-by-scheduler")["metadata"]["uid"]
    scheduled = binding("bound-by-scheduler", NODE_A, CHOSEN, uid=uid)
    allowed(cluster.scheduler, "POST", path, scheduled)
    placed = admin.get(f"{PODS}/bound-by-scheduler")
    assert placed["spec"]["nodeName"] == NODE_A
    assert {k: placed["metadata"]["annotations"][k] for k in CHOSEN} == CHOSEN


# --- NPU pods only through our schedulers -------------------------------------------------

TWO = {RESOURCE_NAME: "2"}


def test_no_one_places_an_npu_pod_but_our_scheduler(cluster: Cluster) -> None:
    alice, admin = cluster.alice, cluster.admin
    # The theft: a pod made on the node where another tenant's pod was just given chips 4,5,
    # asking as many, would be handed them by the agent. Refused, whoever makes it.
    ours = SCHEDULER_PROFILE
    refused = {
        "placed on a node": pod("thief", NODE_A, limits=TWO, scheduler=ours),
        "of the default scheduler": pod("thief", limits=TWO),
        "of another scheduler": pod("thief", limits=TWO, scheduler="my-scheduler"),
        "asking in an init container": pod("thief", NODE_A, limits=TWO, init=True),
        "asking vNPU cores": pod("thief", NODE_A, limits={NPU_CORE_RESOURCE: "4"}),
        "asking a static vNPU": pod("thief", NODE_A, limits={"huawei.com/Ascend310P-2c": "1"}),
    }
    for case, body in refused.items():
        for who in (alice, admin):
            code, message = attempt(who, "POST", PODS, body)
            assert code == 403 and f"ValidatingAdmissionPolicy '{PODS_POLICY}'" in message, case
    allowed(alice, "POST", PODS, npu_pod("honest", "2"))
    allowed(alice, "POST", PODS, pod("no-npus-placed", NODE_A))
    allowed(alice, "POST", PODS, pod("no-npus-elsewhere", scheduler="my-scheduler"))
    # Nor later: an update cannot set either (both immutable), only a Binding places it.
    for change in ({"nodeName": NODE_A}, {"schedulerName": "my-scheduler"}):
        code, message = attempt(alice, "PATCH", f"{PODS}/honest", {"spec": change})
        assert code == 422 and "Forbidden: pod updates may not change fields" in message, message
    assert admin.get(f"{PODS}/honest")["spec"]["schedulerName"] == ours


def test_each_scheduler_overlay_admits_npu_pods_of_its_own_scheduler(cluster: Cluster) -> None:
    alice = cluster.alice
    use_pod_policy(cluster, "volcano")
    try:
        allowed(alice, "POST", PODS, pod("volcanos", limits=TWO, scheduler="volcano"))
        denied_by_policy(
            alice,
            PODS_POLICY,
            "POST",
            PODS,
            npu_pod("kube-schedulers"),
            says=f"its schedulerName must be volcano, not {SCHEDULER_PROFILE}",
        )
    finally:
        use_pod_policy(cluster, "kube-scheduler")


def test_a_kubelets_mirror_pod_is_its_own_and_its_status_writes_leave_our_annotations(
    cluster: Cluster,
) -> None:
    kubelet, admin = cluster.kubelet, cluster.admin
    mirror = pod(
        "static-npu",
        NODE_A,
        limits=TWO,
        annotations={"kubernetes.io/config.mirror": "0123456789abcdef"},
    )
    # As NodeRestriction admits a node's pods: a mirror, owned by its node.
    node = admin.get(f"/api/v1/nodes/{NODE_A}")["metadata"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": NODE_A, "uid": node["uid"]}
    mirror["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    allowed(kubelet, "POST", PODS, mirror)
    # A status update may change the pod's annotations (the pod status strategy keeps the new
    # metadata): the annotation policy holds pods/status too.
    path = placed(admin, "watched", NODE_A)
    allowed(cluster.scheduler, "PATCH", path, {"metadata": {"annotations": CHOSEN}})

    def reported() -> bool:  # the Node authorizer's graph learns of the binding first
        code, _ = attempt(kubelet, "PATCH", f"{path}/status", {"status": {"message": "up"}})
        return code == 200

    wait_until(reported, DEADLINE, "the kubelet may write its pod's status")
    denied_by_policy(
        kubelet,
        ANNOTATIONS,
        "PATCH",
        f"{path}/status",
        {"metadata": {"annotations": {CHIPS_ANNOTATION: "Ascend910-4"}}},
        says=CHIPS_ANNOTATION,
    )
    assert admin.get(path)["metadata"]["annotations"][CHIPS_ANNOTATION] == "Ascend910-0"


# --- the agent's scope ---------------------------------------------------------------------

AGENT_SCOPE = "ascend-npu-agent-scope"


def test_the_agent_writes_only_the_pods_of_its_node(cluster: Cluster) -> None:
    agent, admin = cluster.agent, cluster.admin
    for name, node in (("on-a", NODE_A), ("on-b", NODE_B)):
        path = placed(admin, name, node)
        allowed(cluster.scheduler, "PATCH", path, {"metadata": {"annotations": CHOSEN}})
    consumed = {"metadata": {"annotations": {PREDICATE_TIME: str(2**64 - 1)}}}
    allowed(agent, "PATCH", f"{PODS}/on-a", consumed)
    assert admin.get(f"{PODS}/on-a")["metadata"]["annotations"][PREDICATE_TIME] == str(2**64 - 1)
    denied_by_policy(
        agent,
        AGENT_SCOPE,
        "PATCH",
        f"{PODS}/on-b",
        consumed,
        says=f"the agent of {NODE_A} may write only the pods of its node",
    )
    denied_by_policy(
        cluster.agent_unbound,
        AGENT_SCOPE,
        "PATCH",
        f"{PODS}/on-a",
        consumed,
        says="the agent's service-account token must be bound to its node",
    )


def test_the_agent_labels_only_its_own_node(cluster: Cluster) -> None:
    agent = cluster.agent
    label = {"metadata": {"labels": {"servertype": "Ascend910B-20"}}}
    allowed(agent, "PATCH", f"/api/v1/nodes/{NODE_A}", label)
    denied_by_policy(
        agent, AGENT_SCOPE, "PATCH", f"/api/v1/nodes/{NODE_B}", label, says="only its own node"
    )
    denied_by_policy(cluster.agent_unbound, AGENT_SCOPE, "PATCH", f"/api/v1/nodes/{NODE_A}", label)
    # The policy holds the agent alone: anyone else is left to RBAC.
    allowed(cluster.admin, "PATCH", f"/api/v1/nodes/{NODE_B}", label)
    # The chip name as Huawei's device plugin labels it, and no other node.kubernetes.io key.
    chip_name = {"metadata": {"labels": {CHIP_NAME_LABEL: "910B3"}}}
    allowed(agent, "PATCH", f"/api/v1/nodes/{NODE_A}", chip_name)
    assert (
        cluster.admin.get(f"/api/v1/nodes/{NODE_A}")["metadata"]["labels"][CHIP_NAME_LABEL]
        == "910B3"
    )
    denied_by_policy(
        agent, AGENT_SCOPE, "PATCH", f"/api/v1/nodes/{NODE_B}", chip_name, says="only its own"
    )
    count = {"metadata": {"labels": {"node.kubernetes.io/npu.chip.count": "8"}}}
    denied_by_policy(
        agent, AGENT_SCOPE, "PATCH", f"/api/v1/nodes/{NODE_A}", count, says="npu.chip.count"
    )


def test_the_agent_writes_only_its_nodes_deviceinfo(cluster: Cluster) -> None:
    agent = cluster.agent
    configmaps = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    own = configmap(configmap_name(NODE_A))
    allowed(agent, "POST", configmaps, own)
    # Read back as the publisher reads it: an empty patch (RBAC gets it no ConfigMap it
    # cannot name), which keeps what an admin wrote.
    path = f"{configmaps}/{configmap_name(NODE_A)}"
    denied_by_rbac(agent, "GET", path)
    cluster.admin.patch(path, {"data": {"ManuallySeparateNPU": "Ascend910-3"}})
    stored = agent.patch(path, {})
    assert stored["data"] == {"ManuallySeparateNPU": "Ascend910-3"}
    stored["data"] = {**stored["data"], "DeviceInfoCfg": "{}"}
    allowed(agent, "PUT", f"{configmaps}/{configmap_name(NODE_A)}", stored)
    denied_by_policy(
        agent, AGENT_SCOPE, "POST", configmaps, configmap(configmap_name(NODE_B)), says=NODE_A
    )
    denied_by_policy(agent, AGENT_SCOPE, "POST", configmaps, configmap("coredns"))


def test_a_stolen_agent_token_does_no_more_than_a_kubelet_may(cluster: Cluster) -> None:
    agent, admin = cluster.agent, cluster.admin
    node = f"/api/v1/nodes/{NODE_A}"
    taint = {"key": "ascend-npu.io/maintenance", "effect": "NoSchedule"}
    admin.patch(node, {"spec": {"taints": [taint]}})
    # What NodeRestriction keeps from a kubelet (plugin/pkg/admission/noderestriction).
    for label in (
        "node-restriction.kubernetes.io/trusted",
        "node-role.kubernetes.io/control-plane",
    ):
        change = {"metadata": {"labels": {label: "true"}}}
        denied_by_policy(agent, AGENT_SCOPE, "PATCH", node, change, says=label)
    denied_by_policy(agent, AGENT_SCOPE, "PATCH", node, {"spec": {"taints": None}}, says="spec")
    denied_by_policy(
        agent, AGENT_SCOPE, "PATCH", node, {"metadata": {"annotations": {"x": "y"}}}, says="x"
    )
    stored = admin.get(node)
    assert stored["spec"]["taints"] == [taint]
    # The node may have no labels at all (this test alone, before the others label it).
    assert "node-restriction.kubernetes.io/trusted" not in stored["metadata"].get("labels", {})
    # Another tenant's pod on its node: labels, image, owners, finalizers stay.
    path = placed(admin, "tenant-b", NODE_A, labels={"app": "b"})
    changes: tuple[tuple[str, Any, str], ...] = (
        ("a label", {"metadata": {"labels": {"app": "stolen"}}}, "merge"),
        ("a user's annotation", {"metadata": {"annotations": {"x": "y"}}}, "merge"),
        ("a finalizer", {"metadata": {"finalizers": ["x.io/hold"]}}, "merge"),
        (
            "the image",
            [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}],
            "json",
        ),
    )
    for case, change, kind in changes:
        code, message = attempt(agent, "PATCH", path, change, patch=kind)
        assert code == 403 and f"ValidatingAdmissionPolicy '{AGENT_SCOPE}'" in message, case
    kept = admin.get(path)
    assert kept["metadata"]["labels"] == {"app": "b"}
    assert kept["spec"]["containers"][0]["image"] == "ascend-training:latest"
    # What the agent does, by its own client: its node's labels, the pod consumed.
    gateway = KubernetesGateway(api_client(bound_token(cluster.plane, AGENT_ACCOUNT, NODE_A)))
    gateway.patch_node_labels(
        NODE_A, {SERVER_TYPE_LABEL: "Ascend910B-20", CHIP_NAME_LABEL: "910B3"}
    )
    allowed(cluster.scheduler, "PATCH", path, {"metadata": {"annotations": CHOSEN}})
    version = admin.get(path)["metadata"]["resourceVersion"]
    record = consumed_record("Ascend910-0", ["Ascend910-0"])
    gateway.patch_pod_annotations(TEAM, "tenant-b", record, version)
    assert admin.get(path)["metadata"]["annotations"][REAL_ANNOTATION] == "Ascend910-0"


def test_the_agent_writes_huaweis_node_annotations_and_no_other(cluster: Cluster) -> None:
    # A 950 SuperPoD server: every annotation agent/node_annotations.py writes, rackID too.
    chips = NodeChips(
        NPU.name,
        None,
        tuple(Chip(i, i, ip=f"10.0.1.{i}", super_device_id=200 + i) for i in range(2)),
        super_pod_id=3,
        server_index=7,
        rack_id=1,
    )
    gateway = KubernetesGateway(api_client(bound_token(cluster.plane, AGENT_ACCOUNT, NODE_A)))
    assert annotate_node(gateway, NODE_A, chips)
    written = cluster.admin.get(f"/api/v1/nodes/{NODE_A}")["metadata"]["annotations"]
    assert {key: written[key] for key in NODE_ANNOTATIONS} == node_annotations(chips)
    assert not annotate_node(gateway, NODE_A, chips), "unchanged: nothing written"
    denied_by_policy(
        cluster.agent,
        "ascend-npu-agent-scope",
        "PATCH",
        f"/api/v1/nodes/{NODE_A}",
        # A key no controller writes: kube-controller-manager's TTL controller may already have
        # set node.alpha.kubernetes.io/ttl to "0", and an unchanged key is no change to refuse.
        {"metadata": {"annotations": {"superPodID": "4", "example.com/owner": "tenant-b"}}},
    )
    denied_by_policy(
        cluster.agent,
        "ascend-npu-agent-scope",
        "PATCH",
        f"/api/v1/nodes/{NODE_B}",
        {"metadata": {"annotations": {"superPodID": "4"}}},
    )


# --- the scheduler's scope -----------------------------------------------------------------

SCHEDULER_SCOPE = "ascend-npu-scheduler-scope"


def test_the_scheduler_writes_only_its_own_configmaps(cluster: Cluster) -> None:
    scheduler, admin = cluster.scheduler, cluster.admin
    for namespace, name in (TOR_SHARE_CONFIGMAP, FAULT_RECORD):
        configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
        allowed(scheduler, "POST", configmaps, configmap(name))
        stored = admin.get(f"{configmaps}/{name}")
        stored["data"] = {"k": "v"}
        allowed(scheduler, "PUT", f"{configmaps}/{name}", stored)
    allowed(
        scheduler,
        "POST",
        f"/api/v1/namespaces/{TEAM}/configmaps",
        configmap(f"{FAULT_CONFIG_PREFIX}train", dict([WRITER_LABEL])),
    )
    system = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    allowed(admin, "POST", system, configmap("someones"))
    stored = admin.get(f"{system}/someones")
    stored["data"] = {"taken": "over"}
    denied_by_policy(
        scheduler,
        SCHEDULER_SCOPE,
        "PUT",
        f"{system}/someones",
        stored,
        says="may not write the ConfigMap kube-system/someones",
    )
    denied_by_policy(scheduler, SCHEDULER_SCOPE, "POST", system, configmap("tor-share-cm"))
    volcano = f"/api/v1/namespaces/{TOR_SHARE_CONFIGMAP[0]}/configmaps"
    denied_by_policy(scheduler, SCHEDULER_SCOPE, "POST", volcano, configmap("other"))


IMAGE = [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}]


def test_a_stolen_scheduler_token_changes_no_pod_but_ours(cluster: Cluster) -> None:
    scheduler, admin = cluster.scheduler, cluster.admin
    # RBAC grants pods patch cluster-wide (the Volcano path's annotations, the deletion mark,
    # the leader label); the policy holds the rest: a kube-system pod's image stays.
    system = f"/api/v1/namespaces/{NAMESPACE}/pods"
    cluster.plane.service_account(NAMESPACE, "coredns")  # no controller makes "default"
    privileged = pod("privileged", NODE_A)
    privileged["spec"]["serviceAccountName"] = "coredns"
    allowed(admin, "POST", system, privileged)
    path = f"{system}/privileged"
    code, message = attempt(scheduler, "PATCH", path, IMAGE, patch="json")
    assert code == 403 and f"ValidatingAdmissionPolicy '{SCHEDULER_SCOPE}'" in message, message
    assert admin.get(path)["spec"]["containers"][0]["image"] == "ascend-training:latest"
    key, value = LEADER_LABEL
    denied_by_policy(
        scheduler, SCHEDULER_SCOPE, "PATCH", path, {"metadata": {"labels": {key: value}}}
    )
    # A pod asking no NPUs: not even our annotations.
    allowed(admin, "POST", PODS, pod("cpu-only", NODE_A))
    denied_by_policy(
        scheduler,
        SCHEDULER_SCOPE,
        "PATCH",
        f"{PODS}/cpu-only",
        {"metadata": {"annotations": CHOSEN}},
    )
    # An NPU pod: our annotations (the Volcano path's choice), no label, no image.
    npu = placed(admin, "npu-pod", NODE_A)
    allowed(scheduler, "PATCH", npu, {"metadata": {"annotations": CHOSEN}})
    denied_by_policy(scheduler, SCHEDULER_SCOPE, "PATCH", npu, {"metadata": {"labels": {"a": "b"}}})
    code, message = attempt(scheduler, "PATCH", npu, IMAGE, patch="json")
    assert code == 403 and f"ValidatingAdmissionPolicy '{SCHEDULER_SCOPE}'" in message, message
    # Its own replica's pod: the leader label, by its own client, and nothing else.
    own = bound_token(cluster.plane, SCHEDULER_ACCOUNT, NODE_B).stem
    gateway = scheduler_gateway(cluster)
    gateway.patch_pod_labels(NAMESPACE, own, {key: value})
    assert admin.get(f"{system}/{own}")["metadata"]["labels"][key] == value
    gateway.patch_pod_labels(NAMESPACE, own, {key: None})
    assert key not in (admin.get(f"{system}/{own}")["metadata"].get("labels") or {})
    denied_by_policy(
        scheduler, SCHEDULER_SCOPE, "PATCH", f"{system}/{own}", {"metadata": {"labels": {"a": "b"}}}
    )


def test_a_stolen_scheduler_token_binds_only_by_uid_and_with_only_our_annotations(
    cluster: Cluster,
) -> None:
    """A Binding's annotations land on the pod unseen by any policy on pods: the scheduler's
    own are pinned (security.md: a stolen scheduler token binds any pending pod)."""
    scheduler, admin = cluster.scheduler, cluster.admin
    allowed(admin, "POST", PODS, npu_pod("bound-by-uid"))
    uid = admin.get(f"{PODS}/bound-by-uid")["metadata"]["uid"]
    path = f"{PODS}/bound-by-uid/binding"
    # Another tenant's annotation, or one Kubernetes acts on, carried by a Binding: refused.
    for foreign in ({"team.example.com/owner": "mallory"}, {"kubernetes.io/psp": "privileged"}):
        denied_by_policy(
            scheduler,
            SCHEDULER_SCOPE,
            "POST",
            path,
            binding("bound-by-uid", NODE_A, uid=uid, annotations={**CHOSEN, **foreign}),
            says=next(iter(foreign)),
        )
    # A Binding without the pod's UID (a bind of whatever pod bears the name): refused.
    denied_by_policy(
        scheduler,
        SCHEDULER_SCOPE,
        "POST",
        path,
        binding("bound-by-uid", NODE_A, annotations=CHOSEN),
    )
    assert not admin.get(f"{PODS}/bound-by-uid")["spec"].get("nodeName")
    # What the service writes (extender.py bind: UID, node, the chips): bound.
    allowed(scheduler, "POST", path, binding("bound-by-uid", NODE_A, uid=uid, annotations=CHOSEN))
    stored = admin.get(f"{PODS}/bound-by-uid")
    assert stored["spec"]["nodeName"] == NODE_A
    assert stored["metadata"]["annotations"][CHIPS_ANNOTATION] == CHOSEN[CHIPS_ANNOTATION]


def test_the_scheduler_writes_a_jobs_fault_config_only_where_it_made_it(cluster: Cluster) -> None:
    scheduler, admin = cluster.scheduler, cluster.admin
    team = f"/api/v1/namespaces/{TEAM}/configmaps"
    # A tenant's own ConfigMap that happens to bear the name: never overwritten.
    allowed(admin, "POST", team, configmap(f"{FAULT_CONFIG_PREFIX}tenants"))
    stored = admin.get(f"{team}/{FAULT_CONFIG_PREFIX}tenants")
    stored["metadata"]["labels"] = dict([WRITER_LABEL])
    stored["data"] = {"taken": "over"}
    denied_by_policy(
        scheduler, SCHEDULER_SCOPE, "PUT", f"{team}/{FAULT_CONFIG_PREFIX}tenants", stored
    )
    assert admin.get(f"{team}/{FAULT_CONFIG_PREFIX}tenants").get("data") is None
    # Nor one unlabelled, nor in the namespaces of the system and of Volcano.
    denied_by_policy(scheduler, SCHEDULER_SCOPE, "POST", team, configmap(f"{FAULT_CONFIG_PREFIX}x"))
    for namespace in (NAMESPACE, VOLCANO):
        denied_by_policy(
            scheduler,
            SCHEDULER_SCOPE,
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            configmap(f"{FAULT_CONFIG_PREFIX}x", dict([WRITER_LABEL])),
        )


def scheduler_gateway(cluster: Cluster) -> KubernetesGateway:
    """The scheduler's own Kubernetes client, as its real token."""
    kubeconfig = cluster.plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT)
    return KubernetesGateway(api_client(kubeconfig))


def test_the_scheduler_deletes_an_npu_pod_only_once_it_marked_it(cluster: Cluster) -> None:
    scheduler, admin = cluster.scheduler, cluster.admin
    # Unmarked: not a fault job's pod, not a failed npu-core pod, not any NPU pod.
    for name, labels in (("gang-member", {}), ("fault-job", {"fault-scheduling": "force"})):
        path = placed(admin, name, NODE_A, labels=labels)
        denied_by_policy(scheduler, SCHEDULER_SCOPE, "DELETE", path, says="marked")
        assert admin.get(path)["metadata"]["name"] == name
    # The marker is the scheduler's alone: a tenant cannot set it to have a pod deleted.
    denied_by_policy(
        cluster.alice,
        ANNOTATIONS,
        "POST",
        PODS,
        npu_pod("self-marked", annotations={DELETING_ANNOTATION: GANG_RESTART_REASON}),
        says=DELETING_ANNOTATION,
    )
    # A pod asking no NPUs: neither marked nor deleted.
    allowed(admin, "POST", PODS, pod("plain-pod", NODE_A))
    gateway = scheduler_gateway(cluster)
    with pytest.raises(KubeError, match="403"):
        delete_marked(
            gateway, TEAM, "plain-pod", pod_uid(admin, "plain-pod"), grace_seconds=0, reason="x"
        )
    assert DELETING_ANNOTATION not in (
        admin.get(f"{PODS}/plain-pod")["metadata"].get("annotations") or {}
    )
    # The code's path: a gang restart's deletion and a failed npu-core pod's, marked and
    # deleted by the scheduler's own client (the Known gap: both were refused).
    placed(admin, "restarted", NODE_A, labels={"ascend.npu/gang": "g"})
    placed(admin, "core-failed", NODE_A, resource=NPU_CORE_RESOURCE, chips="2")
    for name, reason in (("restarted", GANG_RESTART_REASON), ("core-failed", CHIP_CUT_ERROR)):
        delete_marked(gateway, TEAM, name, pod_uid(admin, name), grace_seconds=0, reason=reason)
        wait_until(partial(gone, admin, f"{PODS}/{name}"), DEADLINE, f"{name} deleted")
    # Another pod now bears the name: it is neither marked nor deleted.
    path = placed(admin, "recreated", NODE_A)
    stale = pod_uid(admin, "recreated")
    admin.request("DELETE", path, {"gracePeriodSeconds": 0})  # no kubelet: at once
    wait_until(lambda: gone(admin, path), DEADLINE, "the first pod deleted")
    placed(admin, "recreated", NODE_A)
    with pytest.raises(KubeError):
        delete_marked(
            gateway, TEAM, "recreated", stale, grace_seconds=0, reason=GANG_RESTART_REASON
        )
    assert DELETING_ANNOTATION not in (admin.get(path)["metadata"].get("annotations") or {})


def pod_uid(admin: Rest, name: str) -> str:
    return str(admin.get(f"{PODS}/{name}")["metadata"]["uid"])


def gone(admin: Rest, path: str) -> bool:
    try:
        admin.get(path)
    except RestError as missing:
        if missing.status == 404:
            return True
        raise
    return False


# --- the DRA overlay's policies ------------------------------------------------------------

CLAIMS = "ascend-npu-claims"
DRA_SLICES = "ascend-npu-dra-slices"


@pytest.mark.parametrize(
    ("case", "obj", "admitted"),
    [
        ("one chip", claim("one", 1), True),
        ("one chip, count left to its default", claim("default", None), True),
        ("two chips on one ring", claim("two-ring", 2, ring=True), True),
        ("two chips anywhere", claim("two", 2), False),
        ("three chips", claim("three", 3, ring=True), False),
        ("four chips on one ring", claim("four-ring", 4, ring=True), True),
        ("four chips anywhere", claim("four", 4), False),
        ("the whole node", claim("eight", 8), True),
        ("every matching chip", claim("all", None, mode="All"), False),
        ("a whole 16-chip node (910B x16, A3)", claim("sixteen", 16), True),
        ("twelve chips", claim("twelve", 12), False),
    ],
)
def test_a_claim_asks_a_legal_count_and_keeps_two_or_four_chips_on_one_group(
    cluster: Cluster, case: str, obj: Obj, admitted: bool
) -> None:
    claims = f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaims"
    if admitted:
        allowed(cluster.alice, "POST", claims, obj)
    else:
        # reason: Invalid in the policy: 422, as the claim's own validation answers.
        denied_by_policy(cluster.alice, CLAIMS, "POST", claims, obj, status=422)


def test_every_deployed_claim_template_is_admitted_and_a_ladder_rung_needs_its_ring(
    cluster: Cluster,
) -> None:
    templates = [
        d for d in kustomize(MANIFESTS / "overlays" / "dra") if d["kind"] == "ResourceClaimTemplate"
    ]
    path = f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaimtemplates"
    for template in templates:
        copied = copy.deepcopy(template)
        copied["metadata"]["namespace"] = TEAM
        allowed(cluster.alice, "POST", path, copied)
    (ladder,) = [t for t in templates if t["metadata"]["name"] == "npu-2-fit"]
    unconstrained = copy.deepcopy(ladder)
    unconstrained["metadata"] = {"name": "npu-2-fit-anywhere", "namespace": TEAM}
    del unconstrained["spec"]["spec"]["devices"]["constraints"]
    denied_by_policy(cluster.alice, CLAIMS, "POST", path, unconstrained, status=422)


def test_a_nodes_dra_driver_writes_only_its_nodes_slices(cluster: Cluster) -> None:
    dra, admin = cluster.dra, cluster.admin
    allowed(dra, "POST", SLICES, a_slice("own", NODE_A))
    stored = admin.get(f"{SLICES}/own")  # the driver lists and watches; it gets none
    stored["spec"]["devices"] = [{"name": "npu-0"}]
    allowed(dra, "PUT", f"{SLICES}/own", stored)
    denied_by_policy(dra, DRA_SLICES, "POST", SLICES, a_slice("others", NODE_B))
    # Not under another driver's name, nor into another node's pool.
    foreign = a_slice("foreign", NODE_A, driver="gpu.example.com")
    denied_by_policy(dra, DRA_SLICES, "POST", SLICES, foreign, says="writes only slices of driver")
    pooled = a_slice("pooled", NODE_A, pool=NODE_B)
    denied_by_policy(dra, DRA_SLICES, "POST", SLICES, pooled, says=f"in the pool {NODE_A}")
    denied_by_policy(cluster.dra_unbound, DRA_SLICES, "POST", SLICES, a_slice("unbound", NODE_A))
    # Another node's slice, as its own driver (here the admin) wrote it.
    allowed(admin, "POST", SLICES, a_slice("node-b-slice", NODE_B))
    stored = admin.get(f"{SLICES}/node-b-slice")
    stored["spec"]["devices"] = []
    denied_by_policy(dra, DRA_SLICES, "PUT", f"{SLICES}/node-b-slice", stored)
    denied_by_policy(dra, DRA_SLICES, "DELETE", f"{SLICES}/node-b-slice")
    # Moving its slice to another node: refused, by the slice's validation (nodeName is
    # immutable) before the policy is asked.
    moved = admin.get(f"{SLICES}/own")
    moved["spec"]["nodeName"] = NODE_B
    moved["spec"]["pool"]["name"] = NODE_B
    status, message = attempt(dra, "PUT", f"{SLICES}/own", moved)
    assert status == 422 and "spec.nodeName" in message and "immutable" in message, message
    assert admin.get(f"{SLICES}/own")["spec"]["nodeName"] == NODE_A
    allowed(dra, "DELETE", f"{SLICES}/own")
    # Others' writes are RBAC's: a tenant may not write slices at all.
    denied_by_rbac(cluster.alice, "POST", SLICES, a_slice("tenant", NODE_A))
