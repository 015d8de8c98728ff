"""The Helm chart as an admin meets it, rendered by the real helm of the test bed: it lints,
its schema refuses bad values naming them, it carries the recommended labels, and the static
manifests under daemonset/ are exactly what it renders (the chart is their one source)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from testbed.control_plane import binary
from testbed.manifests import CHART, LAYOUT, helm_template, static_manifests

LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
)


def documents(*values: str, namespace: str = "kube-system") -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(helm_template(*values, namespace=namespace)) if d]


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary("helm")), *args], capture_output=True, text=True, check=False)


def test_the_static_manifests_are_what_the_chart_renders() -> None:
    for path, text in static_manifests().items():
        assert path.exists(), f"{path} is missing: run make manifests"
        assert path.read_text() == text, f"{path} differs from the chart: run make manifests"


def test_the_chart_lints_strictly() -> None:
    done = helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("schedulerPath=kube", "/schedulerPath"),
        ("scheduler.replica=3", "'replica' not allowed"),
        ("scheduler.replicas=0", "/scheduler/replicas"),
        ("scheduler.gangTTL=-5", "/scheduler/gangTTL"),
        ("scheduler.holdLimit=-1", "/scheduler/holdLimit"),
        ("scheduler.holdSharePerNamespace=2", "/scheduler/holdSharePerNamespace"),
        ("scheduler.reserveNodes=-3", "/scheduler/reserveNodes"),
        ("agent.listWatchPeriod=1", "/agent/listWatchPeriod"),
        ("image.digest=latest", "/image/digest"),
        ("kubeScheduler.tag=1.33", "/kubeScheduler/tag"),
        ("dra.driverName=Not_A_Domain", "/dra/driverName"),
    ],
)
def test_the_schema_refuses_a_bad_value_naming_it(value: str, named: str) -> None:
    with pytest.raises(RuntimeError, match="values don't meet the specifications") as refused:
        helm_template(value)
    assert named in str(refused.value)


@pytest.mark.parametrize("path", ["kube-scheduler", "volcano", "none"])
def test_every_object_carries_the_recommended_labels(path: str) -> None:
    for document in documents(f"schedulerPath={path}", "dra.enabled=true"):
        labels = document["metadata"].get("labels", {})
        missing = [key for key in LABELS if key not in labels]
        assert not missing, f"{document['kind']}/{document['metadata']['name']} lacks {missing}"
        template = document.get("spec", {}).get("template", {}).get("metadata", {})
        if template:
            assert all(key in template["labels"] for key in LABELS), document["metadata"]["name"]


def test_each_path_installs_its_own_scheduler_and_nothing_of_the_others() -> None:
    def names(*values: str) -> set[str]:
        return {f"{d['kind']}/{d['metadata']['name']}" for d in documents(*values)}

    kube, volcano, none = (
        names(f"schedulerPath={p}") for p in ("kube-scheduler", "volcano", "none")
    )
    assert "Deployment/ascend-npu-kube-scheduler" in kube - none
    assert {n for n in volcano - none if n.startswith("Job/")} == {
        "Job/ascend-npu-volcano-merge",
        "Job/ascend-npu-volcano-remove",
    }
    assert not (kube - none) & (volcano - none)
    # Volcano's own ConfigMap is merged into by a Job, never shipped (it would replace the user's).
    assert "ConfigMap/volcano-scheduler-configmap" not in volcano
    dra = names("schedulerPath=none", "dra.enabled=true") - none
    assert "DaemonSet/ascend-npu-dra-driver" in dra


def test_kube_scheduler_is_the_clusters_own_version_unless_pinned() -> None:
    def image(*values: str) -> str:
        rendered = subprocess.run(
            [
                str(binary("helm")),
                "template",
                "x",
                str(CHART),
                "--kube-version",
                "1.31.4",
                *[a for v in values for a in ("--set", v)],
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (deployment,) = [
            d
            for d in yaml.safe_load_all(rendered)
            if d
            and d["metadata"]["name"] == "ascend-npu-kube-scheduler"
            and d["kind"] == "Deployment"
        ]
        return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])

    assert image() == "registry.k8s.io/kube-scheduler:v1.31.4"
    assert image("kubeScheduler.tag=v1.30.2") == "registry.k8s.io/kube-scheduler:v1.30.2"


def test_the_image_is_pinned_by_digest_when_given_and_the_namespace_followed() -> None:
    digest = "sha256:" + "ab" * 32
    rendered = documents(f"image.digest={digest}", "dra.enabled=true", namespace="npu-system")
    images = {
        c["image"]
        for d in rendered
        if d["kind"] in ("DaemonSet", "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if "kube-scheduler" not in c["image"]
    }
    assert images == {f"ascend-npu-k8s@{digest}"}
    namespaced = [d for d in rendered if d["kind"] in ("DaemonSet", "Deployment", "Service")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"npu-system"}
    users = yaml.safe_dump([d for d in rendered if d["kind"] == "ValidatingAdmissionPolicy"])
    assert "system:serviceaccount:npu-system:ascend-npu-agent" in users
    assert "system:serviceaccount:kube-system:" not in users


def test_the_layout_covers_every_template_but_the_helpers() -> None:
    templates = {p.stem for p in (CHART / "templates").glob("*.yaml")}
    assert templates == {t for _, names in LAYOUT.values() for t in names}
