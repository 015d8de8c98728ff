"""Least privilege on the node, and images by digest, over the rendered manifests.

The agent and the DRA driver run as NVIDIA's device plugin does (no privilege escalation, every
capability dropped, RuntimeDefault seccomp, a read-only root) unless the chips' device nodes
need privilege (npu-smi without a runtime that injects them: the chart value
nodeDevices.access), and mount only their own sockets and directories writable: never all of
/dev, never the kubelet's whole plugins directory. No long-running container sees the host's
/ or what holds its secrets (/etc, the kubelet's keys and pods' volumes, /root): the host's / is
mounted read-only only into the DRA driver's init container, which checks the paths the CDI
specs may name and exits, hardened as the rest. A digest, when given, is what every
container of every workload runs (Helm values, or kustomize's images transformer)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from contract.dra import DEFAULT_DRIVER
from testbed.manifests import MANIFESTS, helm_template, kustomize

Obj = dict[str, Any]
KUBERNETES = "1.34"
# Rendered only for 1.36+ (the chart's dra.huaweiClaims policy): not in 1.34's schemas.
NEWER_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
WORKLOADS = ("DaemonSet", "Deployment", "Job", "StatefulSet", "Pod")
NODE_COMPONENTS = ("ascend-npu-agent", "ascend-npu-agent-vnpu", "ascend-npu-dra-driver")
# What each node component may write on the host: its own sockets and directories.
# The agent's with agent.resetFiles (off by default): the jobs' reset-config and data-trace
# folders too (agent/reset_files.py).
JOB_FILES = {"/user/restore/reset", "/user/cluster-info/datatrace-config"}
WRITABLE = {
    "ascend-npu-agent": {"/var/lib/kubelet/device-plugins"},
    "ascend-npu-agent-vnpu": {"/var/lib/kubelet/device-plugins"},
    "ascend-npu-dra-driver": {
        f"/var/lib/kubelet/plugins/{DEFAULT_DRIVER}",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
    },
}
# What a compromised node component must not read: a host mount of one of these or of a
# directory holding one (the host's /, /etc, /var/lib/kubelet) is refused.
SECRETS = ("/etc/shadow", "/var/lib/kubelet/pki", "/var/lib/kubelet/pods", "/root")
INIT_HOST_PATHS = "host-paths"  # the DRA driver's init container
# Shipped, and the chart with the values that change the node components' mounts and privilege.
RENDERINGS = [
    pytest.param("shipped", (), id="shipped"),
    pytest.param("chart", (), id="chart"),
    pytest.param(
        "chart",
        ("nodeDevices.access=runtime", "nodeDevices.runtimeClassName=ascend"),
        id="chart-runtime",
    ),
    pytest.param("chart", ("agent.driver=fake", "nodeDevices.access=none"), id="chart-none"),
]
OURS = "ascend-npu-k8s"
KUBE_SCHEDULER = "registry.k8s.io/kube-scheduler"
DIGEST = "sha256:" + "ab" * 32
KUBE_SCHEDULER_DIGEST = "sha256:" + "cd" * 32


def documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def node_components(rendered: list[Obj]) -> dict[str, Obj]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in rendered
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] in NODE_COMPONENTS
    }


def rendered_chart(*values: str) -> list[Obj]:
    return documents(helm_template("schedulerPath=none", "dra.enabled=true", *values))


def shipped() -> list[Obj]:
    return kustomize(MANIFESTS / "overlays" / "dra")


def host_mounts(spec: Obj) -> dict[str, bool]:
    """hostPath → whether the container may write it."""
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    (container,) = spec["containers"]
    return {
        paths[m["name"]]: not m.get("readOnly", False)
        for m in container["volumeMounts"]
        if m["name"] in paths
    }


@pytest.mark.parametrize("where", ["shipped", "chart"])
def test_node_components_mount_only_their_own_directories_writable(where: str) -> None:
    found = node_components(shipped() if where == "shipped" else rendered_chart())
    assert set(found) == set(NODE_COMPONENTS)
    for name, spec in found.items():
        mounts = host_mounts(spec)
        assert "/dev" not in mounts, f"{name}: all of /dev"
        assert "/var/lib/kubelet/plugins" not in mounts, f"{name}: every plugin's directory"
        assert {path for path, writable in mounts.items() if writable} == WRITABLE[name], name


def container_host_mounts(spec: Obj, container: Obj) -> dict[str, bool]:
    """hostPath → whether ``container`` may write it."""
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    return {
        paths[m["name"]]: not m.get("readOnly", False)
        for m in container.get("volumeMounts", [])
        if m["name"] in paths
    }


def holds(path: str, secret: str) -> bool:
    """Whether a mount of the host's ``path`` shows ``secret``."""
    return secret == path or secret.startswith(path.rstrip("/") + "/")


def hardened(where: str, container: Obj) -> None:
    context = container["securityContext"]
    assert not context.get("privileged", False), where
    assert context["allowPrivilegeEscalation"] is False, where
    assert context["capabilities"] == {"drop": ["ALL"]}, where
    assert context["readOnlyRootFilesystem"] is True, where
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where


@pytest.mark.parametrize(("where", "values"), RENDERINGS)
def test_no_long_running_container_sees_the_hosts_root_or_secrets(
    where: str, values: tuple[str, ...]
) -> None:
    found = node_components(shipped() if where == "shipped" else rendered_chart(*values))
    assert set(found) == set(NODE_COMPONENTS)
    for name, spec in found.items():
        for container in spec["containers"]:
            for path in container_host_mounts(spec, container):
                shown = [s for s in SECRETS if holds(path, s)]
                assert not shown, f"{name}/{container['name']}: {path} shows {shown}"
                assert path not in ("/", "/etc"), f"{name}/{container['name']}: {path}"


@pytest.mark.parametrize(("where", "values"), RENDERINGS)
def test_only_the_dra_init_container_sees_the_hosts_root_read_only_and_hands_on_a_file(
    where: str, values: tuple[str, ...]
) -> None:
    found = node_components(shipped() if where == "shipped" else rendered_chart(*values))
    for name, spec in found.items():
        inits = spec.get("initContainers", [])
        if name != "ascend-npu-dra-driver":
            assert all(not container_host_mounts(spec, c) for c in inits), name
            continue
        (init,) = inits
        assert init["name"] == INIT_HOST_PATHS
        assert container_host_mounts(spec, init) == {"/": False}, "the host's / read-only"
        hardened(f"{name}/{init['name']}", init)
        assert init["command"] == ["python", "-m", "dra_driver.host_paths"]
        # The set goes through an emptyDir: written by the init container, read-only to the
        # driver, whose --host-paths names the file the init container's --out wrote.
        empty = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        (out,) = [a.removeprefix("--out=") for a in init["args"] if a.startswith("--out=")]
        (written,) = [m for m in init["volumeMounts"] if out.startswith(m["mountPath"] + "/")]
        assert written["name"] in empty and not written.get("readOnly", False)
        (driver,) = spec["containers"]
        (read,) = [m for m in driver["volumeMounts"] if m["name"] == written["name"]]
        assert read["readOnly"] is True
        assert (
            f"--host-paths={read['mountPath']}{out.removeprefix(written['mountPath'])}"
            in (driver["args"])
        )
        assert not [a for a in driver["args"] if a.startswith("--host-root")]


def test_reset_files_add_only_the_jobs_folders_to_what_the_agents_write() -> None:
    found = node_components(rendered_chart("agent.resetFiles=true"))
    for name in ("ascend-npu-agent", "ascend-npu-agent-vnpu"):
        writable = {path for path, w in host_mounts(found[name]).items() if w}
        assert writable == WRITABLE[name] | JOB_FILES, name


def test_the_dra_driver_serves_where_its_own_directory_is_mounted() -> None:
    values = ("dra.driverName=npu.example.org",)
    (spec,) = [s for n, s in node_components(rendered_chart(*values)).items() if "dra" in n]
    (container,) = spec["containers"]
    assert "--driver-name=npu.example.org" in container["args"]
    assert "/var/lib/kubelet/plugins/npu.example.org" in host_mounts(spec)


def unprivileged(name: str, spec: Obj) -> None:
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert not context.get("privileged", False), name
    assert context["allowPrivilegeEscalation"] is False, name
    assert context["capabilities"] == {"drop": ["ALL"]}, name
    assert context["readOnlyRootFilesystem"] is True, name
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_without_device_nodes_nothing_is_privileged_and_no_host_driver_is_mounted() -> None:
    rendered = rendered_chart("agent.driver=fake", "nodeDevices.access=none")
    for name, spec in node_components(rendered).items():
        unprivileged(name, spec)
        assert not set(host_mounts(spec)) & {
            "/usr/local/Ascend/driver",
            "/usr/local/sbin/npu-smi",
        }, name
    # The fake driver needs no device: its least is none.
    agent = node_components(rendered_chart("agent.driver=fake"))["ascend-npu-agent"]
    unprivileged("ascend-npu-agent", agent)


def test_with_the_ascend_runtime_the_chips_are_injected_not_privileged() -> None:
    rendered = rendered_chart(
        "nodeDevices.access=runtime",
        "nodeDevices.visibleDevices=0-15",
        "nodeDevices.runtimeClassName=ascend",
    )
    for document in rendered:
        if document["kind"] in NEWER_KINDS:
            continue
        kubernetes_validate.validate(document, KUBERNETES, strict=True)
    for name, spec in node_components(rendered).items():
        unprivileged(name, spec)
        assert spec["runtimeClassName"] == "ascend", name
        (container,) = spec["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["ASCEND_VISIBLE_DEVICES"] == "0-15", name
        assert host_mounts(spec)["/usr/local/Ascend/driver"] is False, "read-only"


def test_npu_smi_without_a_runtime_is_privileged_but_nothing_more() -> None:
    # The least that works for npu-smi when no runtime injects the device nodes: privileged
    # (the runtime then gives the host's device nodes; no /dev mount), root filesystem read-only.
    for name, spec in node_components(shipped()).items():
        (container,) = spec["containers"]
        context = container["securityContext"]
        assert context["privileged"] is True, name
        assert context["readOnlyRootFilesystem"] is True, name
        assert "runtimeClassName" not in spec, name


def containers(rendered: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for document in rendered:
        if document["kind"] not in WORKLOADS:
            continue
        spec = document["spec"]
        pod = spec if document["kind"] == "Pod" else spec["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            yield f"{document['kind']}/{document['metadata']['name']}", container


def pinned(rendered: list[Obj]) -> None:
    seen = set()
    for where, container in containers(rendered):
        image = container["image"]
        repository = image.split("@")[0].rsplit(":", 1)[0] if "@" in image else image
        if repository.endswith(OURS):
            assert image.endswith(f"@{DIGEST}"), (where, image)
        else:
            assert repository == KUBE_SCHEDULER and image.endswith(f"@{KUBE_SCHEDULER_DIGEST}"), (
                where,
                image,
            )
        seen.add(repository.rsplit("/", 1)[-1])
    assert OURS in seen


@pytest.mark.parametrize("path", ["kube-scheduler", "volcano", "none"])
def test_a_digest_given_to_the_chart_is_what_every_container_runs(path: str) -> None:
    text = helm_template(
        f"schedulerPath={path}",
        "dra.enabled=true",
        f"image.digest={DIGEST}",
        f"kubeScheduler.digest={KUBE_SCHEDULER_DIGEST}",
    )
    pinned(documents(text))


KUSTOMIZATIONS = ["base", "overlays/kube-scheduler", "overlays/volcano", "overlays/dra"]


@pytest.mark.parametrize("where", KUSTOMIZATIONS)
def test_a_digest_given_to_kustomize_is_what_every_container_runs(
    where: str, tmp_path: Path
) -> None:
    copy = tmp_path / "daemonset"
    shutil.copytree(MANIFESTS, copy)
    kustomization = copy / where / "kustomization.yaml"
    settings = yaml.safe_load(kustomization.read_text())
    for entry in settings["images"]:  # what the comment above the entries tells an admin
        entry["digest"] = DIGEST if entry["name"] == OURS else KUBE_SCHEDULER_DIGEST
    kustomization.write_text(yaml.safe_dump(settings))
    pinned(kustomize(copy / where))
