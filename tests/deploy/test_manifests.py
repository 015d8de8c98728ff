"""What an admin applies: manifests valid against the Kubernetes schemas (offline, strict),
RBAC exactly as wide as the calls the code makes, and configurations that name verbs the
service serves. (The image is built and run by tests/real/test_image.py.)"""

from __future__ import annotations

import datetime
import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import astuple
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from contract import clusterd, nodeinfo
from contract.groups import PODGROUP_APIS
from contract.objects import PLACED_RESOURCES
from image.kube_scheduler import image_tag
from infra.kube.port import KubeGateway
from scheduler_core.certs import CLIENT_NAME, VALIDITY, SecretNames, contents, issue
from scheduler_core.service.verbs.volcano import VolcanoVerbs
from testbed.cluster import PLUGIN
from testbed.manifests import helm_template, kustomize

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "daemonset"
BASE = MANIFESTS / "base"
KUBERNETES = "1.33"

Rule = tuple[str, str, str | None]
# What each gateway call needs: (resource, verb, namespace of a Role or None for cluster).
RBAC_OF_CALL: dict[str, set[Rule]] = {
    "list_page": set(),  # what is listed and watched: WATCHED
    "watch": set(),
    "served": set(),  # discovery (/apis): every authenticated caller may (system:discovery)
    "get_pod": {("pods", "get", None)},
    "delete_pod": {("pods", "delete", None)},
    "patch_pod_annotations": {("pods", "patch", None)},
    "patch_pod_labels": {("pods", "patch", None)},
    "bind_pod": {("pods/binding", "create", None)},
    "get_configmap": {("configmaps", "get", "kube-system")},
    "create_configmap": {("configmaps", "create", "kube-system")},
    "update_configmap": {("configmaps", "update", "kube-system")},
    "read_configmap_by_patch": {("configmaps", "patch", "kube-system")},
    "get_node": {("nodes", "get", None)},
    "patch_node_labels": {("nodes", "patch", None)},
    "patch_node_annotations": {("nodes", "patch", None)},
    "create_event": {("events", "create", None)},
    "get_lease": {("leases.coordination.k8s.io", "get", "kube-system")},
    "create_lease": {("leases.coordination.k8s.io", "create", "kube-system")},
    "update_lease": {("leases.coordination.k8s.io", "update", "kube-system")},
    # Objects of other API groups: what they are is the component's (CLUSTER_WIDE_CALLS).
    "get_object": set(),
    "create_object": set(),
    "replace_object": set(),
    "delete_object": set(),
}
# Each component reads its admission policies and their bindings at start.
POLICY_READS: set[Rule] = {
    (f"{kind}.admissionregistration.k8s.io", "get", None)
    for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
}
# The scheduler also writes ConfigMaps outside kube-system: volcano-system/tor-share-cm,
# volcano-system/vcjob-fault-npu-cm (read back at start) and fault-config-<job> in each fault
# job's namespace; it reads and updates a job's own reset-config-<job> there. On the Volcano
# path it also reads Volcano's scheduler ConfigMap at start (--volcano-config), by name.
CLUSTER_WIDE_CALLS: dict[str, dict[str, set[Rule]]] = {
    "ascend-npu-scheduler": {
        "get_configmap": {("configmaps", "get", None), ("configmaps", "get", "volcano-system")},
        "create_configmap": {("configmaps", "create", None)},
        "update_configmap": {("configmaps", "update", None)},
        "get_object": POLICY_READS,
    },
    # Whether the DRA driver publishes the node's chips: a GET of its slice; and the start-up
    # check of its admission policies (infra/kube/policies.py, by name).
    "ascend-npu-agent": {
        "get_object": {("resourceslices.resource.k8s.io", "get", None), *POLICY_READS},
        # The fault-code override in kube-system (by name); each job's reset-config-<job>
        # and data-trace-<job> only with agent.resetFiles (test_reset_files_add_...).
        "get_configmap": {("configmaps", "get", "kube-system")},
    },
    # Volcano's one scheduler ConfigMap, read and updated by the overlay's Job.
    "ascend-npu-volcano-config": {
        "get_configmap": {("configmaps", "get", "volcano-system")},
        "update_configmap": {("configmaps", "update", "volcano-system")},
        "create_configmap": {("configmaps", "create", "volcano-system")},  # the service's CA
    },
    # Claims read back at prepare; the node's slice written.
    "ascend-npu-dra-driver": {
        "get_object": {("resourceclaims.resource.k8s.io", "get", None), *POLICY_READS},
        "create_object": {("resourceslices.resource.k8s.io", "create", None)},
        "replace_object": {("resourceslices.resource.k8s.io", "update", None)},
        "delete_object": {("resourceslices.resource.k8s.io", "delete", None)},
    },
}
# Calls of the official client's typed APIs (not the gateway's), by method name.
DIRECT_CALLS: dict[str, dict[str, set[Rule]]] = {
    # The service's CA mounted into Volcano's scheduler Deployment, and taken out again.
    "ascend-npu-volcano-config": {
        "read_namespaced_deployment": {("deployments.apps", "get", "volcano-system")},
        "replace_namespaced_deployment": {("deployments.apps", "update", "volcano-system")},
        "delete_namespaced_config_map": {("configmaps", "delete", "volcano-system")},
    },
    # The certs Job: the chart's three Secrets read and filled, by name; it creates none.
    "ascend-npu-scheduler-certs": {
        "read_namespaced_secret": {("secrets", "get", "kube-system")},
        "replace_namespaced_secret": {("secrets", "update", "kube-system")},
        "create_namespaced_secret": {("secrets", "create", "kube-system")},
        "patch_namespaced_secret": {("secrets", "patch", "kube-system")},
    },
}
# What each component lists and watches (a reflector's Selection, or a command's list_all):
# resource and the namespace of a Role (None: cluster-wide).
WATCHED: dict[str, set[tuple[str, str | None]]] = {
    "ascend-npu-agent": {("pods", None)},
    "ascend-npu-scheduler": {
        ("pods", None),
        ("nodes", None),
        ("configmaps", "kube-system"),  # DeviceInfo, basic-tor-node-cm
        ("configmaps", None),  # vcjob-fault-npu-cm, by name (resourceNames)
        # The PodGroups of each API the cluster serves (Selection(podgroups(source))).
        *{(f"podgroups.{group}", None) for group, _ in PODGROUP_APIS.values()},
    },
    "ascend-npu-volcano-config": set(),
    "ascend-npu-scheduler-certs": set(),
    "ascend-npu-dra-driver": {
        ("resourceslices.resource.k8s.io", None),
        ("configmaps", "kube-system"),  # basic-tor-node-cm
    },
}
RESOURCE_OF_KIND = {
    "Pod": "pods",
    "Node": "nodes",
    "ConfigMap": "configmaps",
    "SLICE_KIND": "resourceslices.resource.k8s.io",
}
# The code each deployed component runs (the simulation harness is not deployed); the
# Volcano overlay's Job runs one module of scheduler_core, the service all the others.
VOLCANO_CONFIG = "scheduler_core/volcano_config.py"
CERTS = "scheduler_core/certs.py"
POLICIES = "infra/kube/policies.py"
COMPONENTS = {
    "ascend-npu-agent": ["agent", "infra/events.py", POLICIES],
    "ascend-npu-scheduler": ["scheduler_core", "infra/events.py", "infra/leader.py", POLICIES],
    "ascend-npu-volcano-config": [VOLCANO_CONFIG],
    "ascend-npu-scheduler-certs": [CERTS],
    "ascend-npu-dra-driver": ["dra_driver", POLICIES],
}
NOT_RUN_BY = {"ascend-npu-scheduler": {ROOT / VOLCANO_CONFIG, ROOT / CERTS}}
# Where each component's RBAC is (the DRA driver's in its overlay; the scheduler's binding
# of pods in the kube-scheduler overlay, the one path where it binds).
RBAC_FILES: dict[str, Path | tuple[Path, ...]] = {
    "ascend-npu-agent": BASE / "agent-rbac.yaml",
    "ascend-npu-scheduler": (
        BASE / "scheduler-rbac.yaml",
        MANIFESTS / "overlays" / "kube-scheduler" / "kube-scheduler-rbac.yaml",
        MANIFESTS / "overlays" / "volcano" / "volcano-extender.yaml",
    ),
    "ascend-npu-volcano-config": MANIFESTS / "overlays" / "volcano" / "volcano-extender.yaml",
    "ascend-npu-scheduler-certs": BASE / "scheduler-certs.yaml",
    "ascend-npu-dra-driver": MANIFESTS / "overlays" / "dra" / "dra-rbac.yaml",
}


def documents(name: str) -> Iterator[dict[str, Any]]:
    with (BASE / name).open() as handle:
        yield from (d for d in yaml.safe_load_all(handle) if d)


def manifest_files() -> list[str]:
    return sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")


OVERLAYS = ("kube-scheduler", "kube-scheduler-plugin", "volcano", "dra")
# The Kubernetes each overlay needs at least (DRA's resource.k8s.io/v1 came with 1.34).
OVERLAY_KUBERNETES = {"dra": "1.34"}
# Kinds newer than their overlay's least version (the chart installs them only where served):
# MutatingAdmissionPolicy went GA (admissionregistration.k8s.io/v1) in 1.36.
KIND_KUBERNETES = {"MutatingAdmissionPolicy": "1.36", "MutatingAdmissionPolicyBinding": "1.36"}
SCHEDULER = "ascend-npu-scheduler"


@pytest.mark.parametrize("name", manifest_files())
def test_every_manifest_is_valid_for_kubernetes_in_strict_mode(name: str) -> None:
    for document in documents(name):
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_to_manifests_valid_in_strict_mode(overlay: str) -> None:
    rendered = kustomize(MANIFESTS / "overlays" / overlay)
    for document in rendered:
        version = OVERLAY_KUBERNETES.get(overlay, KUBERNETES)
        version = KIND_KUBERNETES.get(document["kind"], version)
        kubernetes_validate.validate(document, version, strict=True)
    names = [
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in rendered
    ]
    assert len(names) == len(set(names)), "no object twice"


def test_the_base_applies_every_manifest_beside_it() -> None:
    (kustomization,) = documents("kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifest_files()


def test_the_kube_scheduler_overlay_runs_kube_scheduler_under_its_own_account() -> None:
    rendered = kustomize(MANIFESTS / "overlays" / "kube-scheduler")
    deployments = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "Deployment"}
    service = deployments[SCHEDULER]["spec"]["template"]["spec"]
    assert [c["name"] for c in service["containers"]] == ["scheduler"]
    spec = deployments["ascend-npu-kube-scheduler"]["spec"]["template"]["spec"]
    # Not the extender's account: its admission policy refuses kube-scheduler's evictions.
    assert spec["serviceAccountName"] == "ascend-npu-kube-scheduler"
    (container,) = spec["containers"]
    image = container["image"]
    assert image.startswith("registry.k8s.io/kube-scheduler:v1."), "the upstream image, pinned"
    mount = container["volumeMounts"][0]
    flag = next(a for a in container["command"] if a.startswith("--config="))
    assert flag.removeprefix("--config=").startswith(mount["mountPath"] + "/")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(volumes) == {"kube-scheduler-config", "extender-client"}
    # Its client certificate for the extender: the certs Job's Secret, at the tlsConfig paths.
    assert volumes["extender-client"]["secret"]["secretName"] == "ascend-npu-kube-scheduler-client"
    (client,) = [m for m in container["volumeMounts"] if m["name"] == "extender-client"]
    (extender,) = kube_scheduler_configuration()["extenders"]
    assert extender["urlPrefix"].startswith("https://") and extender["enableHTTPS"] is True
    for key in ("caFile", "certFile", "keyFile"):
        assert extender["tlsConfig"][key].startswith(client["mountPath"] + "/"), key
    # Upstream's scheduler roles (pods delete, bindings, volumes) are kube-scheduler's alone:
    # never the extender's, whose pod writes its admission policy confines.
    for role in ("system:kube-scheduler", "system:volume-scheduler"):
        bound = {
            s["name"]
            for d in rendered
            if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and d["roleRef"]["name"] == role
            for s in d["subjects"]
        }
        assert bound == {"ascend-npu-kube-scheduler"}, role


def rules_in_manifest(component: str) -> set[tuple[str, str, str | None]]:
    """The rules of the roles bound to the component's ServiceAccount in its RBAC files."""
    files = RBAC_FILES[component]
    loaded = [
        d
        for path in (files if isinstance(files, tuple) else (files,))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    bound = {
        (d["roleRef"]["kind"], d["roleRef"]["name"], d["metadata"].get("namespace"))
        for d in loaded
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == component for s in d["subjects"])
    }
    return rules_of(
        d
        for d in loaded
        if (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) in bound
        or (d["kind"], d["metadata"]["name"], None) in bound
    )


def rules_of(documents: Iterable[dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    rules: set[tuple[str, str, str | None]] = set()
    for document in documents:
        if document and document["kind"] in ("ClusterRole", "Role"):
            namespace = (
                document["metadata"].get("namespace") if document["kind"] == "Role" else None
            )
            for rule in document["rules"]:
                (group,) = rule["apiGroups"]
                suffix = f".{group}" if group else ""
                rules |= {
                    (r + suffix, v, namespace) for r in rule["resources"] for v in rule["verbs"]
                }
    return rules


def calls_in_code(component: str) -> set[str]:
    methods = {
        name
        for name, _ in inspect.getmembers(KubeGateway, inspect.isfunction)
        if not name.startswith("_")
    }
    assert methods == set(RBAC_OF_CALL), "every gateway call must have its RBAC rule here"
    text = source_of(component)
    return {m for m in methods if re.search(rf"gateway\.{m}\(", text)}


def source_of(component: str) -> str:
    """The text of every module the component runs."""
    return "".join(
        module.read_text()
        for path in (ROOT / part for part in COMPONENTS[component])
        for module in (path.rglob("*.py") if path.is_dir() else [path])
        if module not in NOT_RUN_BY.get(component, set())
    )


def watched_in_code(component: str) -> set[str]:
    """The resources the component's code selects to list and watch."""
    text = source_of(component)
    named = re.findall(r'Selection\(\s*(?:"(\w+)"|(SLICE_KIND)\b)', text)
    kinds = {RESOURCE_OF_KIND[literal or constant] for literal, constant in named}
    if re.search(r"Selection\(\s*podgroups\(", text):
        kinds |= {f"podgroups.{group}" for group, _ in PODGROUP_APIS.values()}
    return kinds


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_rbac_grants_exactly_what_the_code_calls(component: str) -> None:
    needed: set[tuple[str, str, str | None]] = set()
    for call in calls_in_code(component):
        needed |= CLUSTER_WIDE_CALLS.get(component, {}).get(call) or RBAC_OF_CALL[call]
    for call, rules in DIRECT_CALLS.get(component, {}).items():
        if re.search(rf"\.{call}\(", source_of(component)):
            needed |= rules
    assert watched_in_code(component) == {r for r, _ in WATCHED[component]}
    needed |= {(r, verb, ns) for r, ns in WATCHED[component] for verb in ("list", "watch")}
    assert rules_in_manifest(component) == needed


CERTS_ACCOUNT = "ascend-npu-scheduler-certs"


def test_the_certs_job_creates_nothing_and_writes_only_its_three_opaque_secrets() -> None:
    """No create (a name cannot limit it: it would let the account make a ServiceAccount token
    Secret for any account); get and update on the three Secrets the manifests make, of type
    Opaque (immutable: never a token Secret) and without data (kept across an apply)."""
    names = set(astuple(SecretNames()))
    for rendered in (
        kustomize(MANIFESTS / "overlays" / "kube-scheduler"),
        [d for d in yaml.safe_load_all(helm_template()) if d],
    ):
        (role,) = [
            d for d in rendered if d["kind"] == "Role" and d["metadata"]["name"] == CERTS_ACCOUNT
        ]
        assert role["rules"] == [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": list(astuple(SecretNames())),
                "verbs": ["get", "update"],
            }
        ]
        made = [d for d in rendered if d["kind"] == "Secret"]
        assert {d["metadata"]["name"] for d in made} == names
        assert all(d["type"] == "Opaque" and "data" not in d for d in made), made
        assert "stringData" not in str(made)


def test_every_mount_of_the_certs_secrets_names_the_keys_the_job_writes() -> None:
    """The Secrets exist empty until the Job fills them: a volume naming its keys (items, not
    optional) makes the kubelet fail the mount (kubernetes pkg/volume/secret MakePayload:
    "references non-existent secret key"), so the pod waits until they are there, as it
    waited for the Secret before; every key it names is one the Job writes."""
    written = contents(
        issue(["s"], CLIENT_NAME, datetime.datetime.now(datetime.UTC), VALIDITY), SecretNames()
    )
    mounted = set()
    for values in ((), ("schedulerPath=volcano",)):
        for document in yaml.safe_load_all(helm_template(*values)):
            spec = (document or {}).get("spec", {})
            template = spec.get("template", spec.get("jobTemplate", {}).get("spec", {}))
            for volume in template.get("spec", {}).get("volumes", []):
                secret = volume.get("secret")
                if secret is None:
                    continue
                name = secret["secretName"]
                assert name in written, name
                assert not secret.get("optional"), name
                keys = [item["key"] for item in secret.get("items", [])]
                assert keys and set(keys) <= set(written[name]), (name, keys)
                assert [item["path"] for item in secret["items"]] == keys
                mounted.add((document["metadata"]["name"], name))
    assert mounted == {
        ("ascend-npu-scheduler", "ascend-npu-scheduler-tls"),
        ("ascend-npu-scheduler", "ascend-npu-scheduler-token"),
        ("ascend-npu-kube-scheduler", "ascend-npu-kube-scheduler-client"),
        ("ascend-npu-volcano-merge", "ascend-npu-scheduler-token"),
    }


def test_the_noded_switch_adds_exactly_the_list_and_watch_of_nodeds_configmaps() -> None:
    """scheduler.noded: the one namespace the code reads NodeD's ConfigMaps in (by label), list
    and watch there and nothing else; off (the shipped manifests), nothing in it."""

    def scheduler_rules(*values: str) -> set[Rule]:
        rendered = yaml.safe_load_all(helm_template(*values))
        names = {SCHEDULER, f"{SCHEDULER}-noded", f"{SCHEDULER}-bind", f"{SCHEDULER}-volcano"}
        return rules_of(d for d in rendered if d and d["metadata"]["name"] in names)

    assert re.search(
        r'Selection\(\s*"ConfigMap", nodeinfo\.NAMESPACE, labels=', source_of(SCHEDULER)
    )
    added = scheduler_rules("scheduler.noded=true") - scheduler_rules()
    assert added == {("configmaps", verb, nodeinfo.NAMESPACE) for verb in ("list", "watch")}
    paths = scheduler_rules() | scheduler_rules("schedulerPath=volcano")
    assert paths == rules_in_manifest(SCHEDULER)
    assert not scheduler_rules("scheduler.noded=true") - rules_in_manifest(SCHEDULER) - added


def scheduler_args(rendered: Iterable[dict[str, Any]]) -> list[str]:
    (deployment,) = [
        d
        for d in rendered
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == SCHEDULER
    ]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_the_cluster_info_manager_switch_passes_its_flag_and_adds_clusterds_list_and_watch() -> (
    None
):
    """scheduler.clusterInfoManager: the flag on the command line (Volcano's init-params do not
    override it, so the RBAC follows it), and list and watch of ConfigMaps in the namespace the
    code reads ClusterD's in (by label); off, nothing there."""

    def rendered(*values: str) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(helm_template(*values)) if d]

    def scheduler_rules(*values: str) -> set[Rule]:
        names = {SCHEDULER, f"{SCHEDULER}-clusterd", f"{SCHEDULER}-bind"}
        return rules_of(d for d in rendered(*values) if d["metadata"]["name"] in names)

    assert re.search(r'Selection\(\s*"ConfigMap",\s*clusterd_cms\.NAMESPACE,', source_of(SCHEDULER))
    on = "scheduler.clusterInfoManager=true"
    added = scheduler_rules(on) - scheduler_rules()
    assert added == {("configmaps", verb, clusterd.NAMESPACE) for verb in ("list", "watch")}
    for path in ("kube-scheduler", "volcano", "none"):
        for value in ("true", "false"):
            args = scheduler_args(
                rendered(f"schedulerPath={path}", f"scheduler.clusterInfoManager={value}")
            )
            assert f"--use-cluster-info-manager={value}" in args


def test_the_volcano_path_reads_init_params_from_the_configuration_it_merges_into() -> None:
    """schedulerPath=volcano: --volcano-config names the ConfigMap and key the merge Job
    writes, the service may get that ConfigMap alone in Volcano's namespace (by name), and the
    Volcano overlay passes the same flags; the other paths read no init-params."""
    custom = ("volcano.namespace=vc", "volcano.configMap=cfg", "volcano.key=k.conf")
    rendered = [d for d in yaml.safe_load_all(helm_template("schedulerPath=volcano", *custom)) if d]
    assert "--volcano-config=vc/cfg:k.conf" in scheduler_args(rendered)
    (role,) = [
        d
        for d in rendered
        if d["metadata"]["name"] == f"{SCHEDULER}-volcano" and d["kind"] == "Role"
    ]
    assert role["metadata"]["namespace"] == "vc"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"], "verbs": ["get"]}
    ]
    volcano = [d for d in yaml.safe_load_all(helm_template("schedulerPath=volcano")) if d]
    overlay = kustomize(MANIFESTS / "overlays" / "volcano")
    assert scheduler_args(overlay) == scheduler_args(volcano)
    for path in ("kube-scheduler", "none"):
        args = scheduler_args(yaml.safe_load_all(helm_template(f"schedulerPath={path}")))
        assert not [a for a in args if a.startswith("--volcano-config")], path
    args = scheduler_args(kustomize(MANIFESTS / "overlays" / "kube-scheduler"))
    assert not [a for a in args if a.startswith("--volcano-config")]


def test_reset_files_add_exactly_a_cluster_wide_get_of_configmaps_to_the_agent() -> None:
    """agent.resetFiles: each job's reset-config-<job> and data-trace-<job> read by exact name
    in its namespace (agent/reset_files.py), so get cluster-wide, no list or watch; off (the
    shipped manifests), the agent gets no ConfigMap outside kube-system."""

    def agent_rules(*values: str) -> set[Rule]:
        rendered = yaml.safe_load_all(helm_template(*values))
        return rules_of(d for d in rendered if d and d["metadata"]["name"] == "ascend-npu-agent")

    assert re.search(r"gateway\.get_configmap\(", (ROOT / "agent" / "reset_files.py").read_text())
    added = agent_rules("agent.resetFiles=true") - agent_rules()
    assert added == {("configmaps", "get", None)}
    assert agent_rules() == rules_in_manifest("ascend-npu-agent")


# KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1), the fields this project may
# set, from the documented API (kube-scheduler's config/v1 types); a map is a nested struct.
PLUGIN_ENTRY = {"name": str, "weight": int}
PLUGIN_ARGS = {
    "urlPrefix": str,
    "caFile": str,
    "certFile": str,
    "keyFile": str,
    "httpTimeout": str,
    "managedResources": [str],
    "percentageOfNodesToScore": int,
}
SCHEDULER_CONFIGURATION: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "parallelism": int,
    "leaderElection": {
        "leaderElect": bool,
        "leaseDuration": str,
        "renewDeadline": str,
        "retryPeriod": str,
        "resourceLock": str,
        "resourceName": str,
        "resourceNamespace": str,
    },
    "clientConnection": {"kubeconfig": str, "qps": float, "burst": int},
    "percentageOfNodesToScore": int,
    "podInitialBackoffSeconds": int,
    "podMaxBackoffSeconds": int,
    "profiles": [
        {
            "schedulerName": str,
            "percentageOfNodesToScore": int,
            # kubescheduler.config.k8s.io/v1 Plugins: a PluginSet per extension point.
            "plugins": {
                point: {"enabled": [PLUGIN_ENTRY], "disabled": [PLUGIN_ENTRY]}
                for point in ("preFilter", "filter", "postFilter", "reserve", "bind", "multiPoint")
            },
            # The args are the plugin's: kube_scheduler_plugin/plugin.go Args.
            "pluginConfig": [{"name": str, "args": PLUGIN_ARGS}],
        }
    ],
    "extenders": [
        {
            "urlPrefix": str,
            "filterVerb": str,
            "preemptVerb": str,
            "prioritizeVerb": str,
            "bindVerb": str,
            "weight": int,
            "enableHTTPS": bool,
            "tlsConfig": {
                "insecure": bool,
                "serverName": str,
                "certFile": str,
                "keyFile": str,
                "caFile": str,
            },
            "httpTimeout": str,
            "nodeCacheCapable": bool,
            "managedResources": [{"name": str, "ignoredByScheduler": bool}],
            "ignorable": bool,
        }
    ],
}


def conforms(value: Any, schema: Any, where: str) -> None:
    if isinstance(schema, dict):
        assert isinstance(value, dict), where
        for key, item in value.items():
            assert key in schema, f"{where}.{key} is not a documented field"
            conforms(item, schema[key], f"{where}.{key}")
    elif isinstance(schema, list):
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            conforms(item, schema[0], f"{where}[{i}]")
    else:
        assert isinstance(value, schema), f"{where} should be a {schema.__name__}"


def kube_scheduler_configuration() -> Any:
    path = MANIFESTS / "overlays" / "kube-scheduler" / "kube-scheduler-config.yaml"
    (config_map,) = yaml.safe_load_all(path.read_text())
    return yaml.safe_load(config_map["data"]["kube-scheduler.yaml"])


def test_the_kube_scheduler_configuration_uses_only_documented_fields() -> None:
    config = kube_scheduler_configuration()
    conforms(config, SCHEDULER_CONFIGURATION, "KubeSchedulerConfiguration")
    assert (config["apiVersion"], config["kind"]) == (
        "kubescheduler.config.k8s.io/v1",
        "KubeSchedulerConfiguration",
    )
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "ascend-npu-scheduler"
    election = config["leaderElection"]
    assert election["leaderElect"] and election["resourceName"] != "ascend-npu-scheduler", (
        "its own Lease, not the extender's"
    )


def test_the_kube_scheduler_configuration_wires_every_extender_verb() -> None:
    config = kube_scheduler_configuration()
    (extender,) = config["extenders"]
    verbs = ("filterVerb", "preemptVerb", "bindVerb")
    assert tuple(extender[v] for v in verbs) == ("filter", "preempt", "bind")
    # The filter answers only the best-scored nodes (the service's default --filter-answers):
    # no prioritize call, a round trip less in kube-scheduler's cycle.
    assert "prioritizeVerb" not in extender
    assert extender["nodeCacheCapable"] is True
    assert extender["managedResources"] == [
        {"name": resource, "ignoredByScheduler": False} for resource in PLACED_RESOURCES
    ], "every resource the extender chooses chips or AI cores for; the kubelet counts them"


def test_the_plugin_overlay_runs_kube_scheduler_ascend_with_the_extenders_settings() -> None:
    """kube-scheduler-plugin: kube-scheduler-ascend's image, and the AscendNPU plugin in the
    extender's place (its PreFilter, PostFilter before DefaultPreemption, Reserve and Bind; the
    DefaultBinder after it), calling
    the same Service with the same client certificate for the same resources."""
    rendered = kustomize(MANIFESTS / "overlays" / "kube-scheduler-plugin")
    (config_map,) = [
        d
        for d in rendered
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ascend-npu-kube-scheduler-config"
    ]
    config = yaml.safe_load(config_map["data"]["kube-scheduler.yaml"])
    conforms(config, SCHEDULER_CONFIGURATION, "KubeSchedulerConfiguration")
    assert "extenders" not in config
    (profile,) = config["profiles"]
    ours = [{"name": PLUGIN}]
    assert profile["plugins"] == {
        "preFilter": {"enabled": ours},
        "postFilter": {
            "disabled": [{"name": "*"}],
            "enabled": [*ours, {"name": "DefaultPreemption"}],
        },
        "reserve": {"enabled": ours},
        "bind": {"disabled": [{"name": "*"}], "enabled": [*ours, {"name": "DefaultBinder"}]},
    }
    (entry,) = profile["pluginConfig"]
    source = (ROOT / "kube_scheduler_plugin" / "plugin.go").read_text()
    arguments = re.search(r"type Args struct \{(.*?)\n\}", source, re.S)
    assert arguments is not None
    tags = set(re.findall(r'json:"(\w+)"', arguments.group(1)))
    assert tags == set(PLUGIN_ARGS), "the args documented are the plugin's"
    (extender,) = kube_scheduler_configuration()["extenders"]
    args = entry["args"]
    assert entry["name"] == PLUGIN
    assert args["urlPrefix"] == extender["urlPrefix"]
    assert {k: args[k] for k in ("caFile", "certFile", "keyFile")} == extender["tlsConfig"]
    assert args["managedResources"] == list(PLACED_RESOURCES)
    deployments = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "Deployment"}
    (container,) = deployments["ascend-npu-kube-scheduler"]["spec"]["template"]["spec"][
        "containers"
    ]
    # The tag names the kube-scheduler it is built from: the test bed's (image.kube_scheduler).
    assert container["image"] == f"ascend-npu-k8s-kube-scheduler:{image_tag()}"


@pytest.mark.parametrize("plugin", [False, True], ids=["extender", "plugin"])
def test_the_share_of_nodes_each_pod_considers_is_one_chart_value(plugin: bool) -> None:
    # In the profile (what kube-scheduler samples, and so what the extender is sent) and, the
    # plugin being unable to read the profile, in its args too (what /place samples).
    values = ["kubeScheduler.percentageOfNodesToScore=100"]
    values += ["kubeScheduler.plugin=true", "kubeScheduler.pluginImage=r/s:t"] if plugin else []

    def configuration(*values: str) -> Any:
        (config_map,) = [
            d
            for d in yaml.safe_load_all(helm_template(*values))
            if d and d["metadata"]["name"] == "ascend-npu-kube-scheduler-config"
        ]
        config = yaml.safe_load(config_map["data"]["kube-scheduler.yaml"])
        conforms(config, SCHEDULER_CONFIGURATION, "KubeSchedulerConfiguration")
        return config

    (profile,) = configuration(*values)["profiles"]
    assert profile["percentageOfNodesToScore"] == 100
    if plugin:
        assert profile["pluginConfig"][0]["args"]["percentageOfNodesToScore"] == 100
    (default,) = configuration(*values[1:])["profiles"]
    assert "percentageOfNodesToScore" not in default, "0: kube-scheduler's own default"
    assert "percentageOfNodesToScore" not in str(default.get("pluginConfig"))
    with pytest.raises(RuntimeError, match="maximum: got 101"):
        helm_template("kubeScheduler.percentageOfNodesToScore=101")


def volcano_plugin() -> Any:
    """The extender plugin entry the Volcano overlay merges into Volcano's configuration."""
    path = MANIFESTS / "overlays" / "volcano" / "volcano-extender.yaml"
    (config_map,) = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "ConfigMap"]
    return yaml.safe_load(config_map["data"]["extender.yaml"])


def test_the_volcano_configuration_names_only_verbs_the_service_serves() -> None:
    plugin = volcano_plugin()
    verbs = [v for k, v in plugin["arguments"].items() if k.endswith("Verb")]
    # The session verbs are served (older configurations name them) but not configured: a
    # failed onSessionOpen makes Volcano's plugin skip its predicate for the whole session.
    session = {"onSessionOpen", "onSessionClose"}
    # predicateAll is the in-process adapter's (volcano_adapter/), which no entry names.
    adapter = set(VolcanoVerbs.ADAPTER_VERBS)
    assert sorted(verbs) == sorted(set(VolcanoVerbs.VERBS) - session - adapter)
    for verb in verbs:
        assert verb in VolcanoVerbs.VERBS, verb
    assert plugin["arguments"]["extender.managedResources"] == list(PLACED_RESOURCES)


@pytest.mark.parametrize(
    ("manifest", "key"),
    [("agent-config.yaml", "agent.yaml"), ("scheduler-config.yaml", "scheduler.yaml")],
)
def test_the_deployed_settings_are_the_documented_files(manifest: str, key: str) -> None:
    (config_map,) = documents(manifest)
    assert config_map["data"][key] == (ROOT / "config" / key).read_text()


def test_the_network_policy_admits_only_the_schedulers_to_the_verbs_and_all_to_metrics() -> None:
    (policy,) = documents("scheduler-networkpolicy.yaml")
    deployment = next(
        d for d in documents("scheduler-deployment.yaml") if d["kind"] == "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    settings = yaml.safe_load((ROOT / "config" / "scheduler.yaml").read_text())
    assert settings["listen"].endswith(f":{ports['http']}")
    assert settings["metrics-listen"].endswith(f":{ports['metrics']}")
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics", "probes need no verb"
    rules = {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}
    assert rules[ports["metrics"]] is None, "metrics and probes: from anywhere"
    callers = rules[ports["http"]]
    assert callers and all("podSelector" in c for c in callers), "verbs: scheduler pods only"
    assert set(rules) == set(ports.values())


def test_the_agent_finds_the_hosts_npu_smi_and_driver_libraries() -> None:
    (daemonset,) = documents("agent-daemonset.yaml")
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    # python:3.11-slim's PATH: the agent runs `npu-smi` from there.
    image_path = ["/usr/local/bin", "/usr/local/sbin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    assert mounts["npu-smi"].rsplit("/", 1) == [mounts["npu-smi"].rsplit("/", 1)[0], "npu-smi"]
    assert mounts["npu-smi"].rsplit("/", 1)[0] in image_path
    assert host["npu-smi"] == "/usr/local/sbin/npu-smi"
    env = {e["name"]: e.get("value") for e in container["env"]}
    for directory in env["LD_LIBRARY_PATH"].split(":"):
        assert directory.startswith(mounts["driver"] + "/"), directory
    tolerated = {t["key"] for t in spec["tolerations"]}
    assert {"huawei.com/Ascend910", "device-plugin", "CriticalAddonsOnly"} <= tolerated


def _selects(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a pod spec's nodeSelector and required node affinity admit a node."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (spec.get("affinity") or {}).get("nodeAffinity", {})
    terms = required.get("requiredDuringSchedulingIgnoredDuringExecution", {})
    checks = {
        "In": lambda value, values: value in values,
        "NotIn": lambda value, values: value not in values,
    }
    return not terms or any(
        all(
            checks[e["operator"]](labels.get(e["key"]), e["values"])
            for e in term["matchExpressions"]
        )
        for term in terms["nodeSelectorTerms"]
    )


def test_every_ascend_node_runs_exactly_one_agent_in_the_mode_it_is_labelled_for() -> None:
    (base,) = documents("agent-daemonset.yaml")
    (vnpu,) = documents("agent-daemonset-vnpu.yaml")
    (dra,) = yaml.safe_load_all((MANIFESTS / "overlays" / "dra" / "dra-daemonset.yaml").read_text())
    specs = {
        "base": base["spec"]["template"]["spec"],
        "vnpu": vnpu["spec"]["template"]["spec"],
        "dra": dra["spec"]["template"]["spec"],
    }
    nodes = {
        "dra": [
            {"accelerator": "huawei-Ascend910", "ascend.npu/dra": "true"},
            {"accelerator": "huawei-npu", "ascend.npu/dra": "true"},
        ],
        "base": [
            {"accelerator": "huawei-Ascend910", "ascend.npu/dra": "false"},
            {"accelerator": "huawei-Ascend910"},
            {"accelerator": "huawei-Ascend310"},
            {"accelerator": "huawei-Ascend310P"},
        ],
        "vnpu": [{"accelerator": "huawei-Ascend310P", "ascend.npu/vnpu": "dynamic"}],
        None: [{}, {"accelerator": "nvidia"}],
    }
    for expected, labelled in nodes.items():
        for labels in labelled:
            running = [name for name, spec in specs.items() if _selects(spec, labels)]
            assert running == ([expected] if expected else []), labels
    (container,) = specs["vnpu"]["containers"]
    assert "--preset-virtual-device=false" in container["args"]


def test_the_vnpu_agent_differs_from_the_base_only_in_its_nodes_name_and_mode() -> None:
    (base,) = documents("agent-daemonset.yaml")
    (vnpu,) = documents("agent-daemonset-vnpu.yaml")
    for daemonset in (base, vnpu):
        spec = daemonset["spec"]["template"]["spec"]
        spec.pop("affinity", None)
        spec.pop("nodeSelector", None)
        spec["containers"][0]["args"] = [
            a for a in spec["containers"][0]["args"] if a != "--preset-virtual-device=false"
        ]
    text = yaml.safe_dump(vnpu).replace("ascend-npu-agent-vnpu", "ascend-npu-agent")
    assert yaml.safe_load(text) == base


def readme_yaml_blocks(page: str) -> list[Any]:
    text = (ROOT / "docs" / page).read_text()
    return [yaml.safe_load(block.split("```")[0]) for block in text.split("```yaml\n")[1:]]


def test_the_readmes_scheduler_snippets_are_the_tested_configurations() -> None:
    blocks = readme_yaml_blocks("scheduler.md")
    extenders = kube_scheduler_configuration()["extenders"]
    assert {"extenders": extenders} in blocks, "the kube-scheduler snippet"
    assert [volcano_plugin()] in blocks, "the Volcano snippet"


def test_the_readmes_jobs_are_the_tested_jobs() -> None:
    blocks = readme_yaml_blocks("jobs.md")
    for path in sorted((ROOT / "tests" / "data" / "jobs").glob("*.yaml")):
        submitted = next(d for d in yaml.safe_load_all(path.read_text()) if d)
        assert submitted in blocks, path.name


def test_the_readmes_dra_pod_names_a_deployed_claim_template_its_container_uses() -> None:
    (pod,) = [
        b
        for b in readme_yaml_blocks("dra.md")
        if isinstance(b, dict) and b.get("kind") == "Pod" and "resourceClaims" in b["spec"]
    ]
    kubernetes_validate.validate(pod, OVERLAY_KUBERNETES["dra"], strict=True)
    templates = {
        d["metadata"]["name"]
        for d in yaml.safe_load_all(
            (MANIFESTS / "overlays" / "dra" / "dra-claim-templates.yaml").read_text()
        )
    }
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] in templates
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
