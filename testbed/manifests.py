"""The project's manifests as an admin applies them: rendered by the real kustomize (and
helm) the test bed built, applied server-side to a real API server."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from testbed.control_plane import binary

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "daemonset"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """``kustomize build directory`` (what ``kubectl apply -k`` applies), as documents."""
    done = subprocess.run(
        [str(binary("kustomize")), "build", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {directory} failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


CHART = ROOT / "charts" / "ascend-npu"
RELEASE = "ascend-npu"
NAMESPACE = "kube-system"
# The version the static manifests name for kube-scheduler: the test bed's (tested); the
# kube-scheduler overlay's kustomization says how to set the cluster's own.
KUBE_VERSION = "1.36.3"
GENERATED = (
    "# Generated from charts/ascend-npu by `make manifests` (python -m testbed.manifests):\n"
    "# edit the chart, not this file.\n"
)
# What each folder of daemonset/ holds: the chart rendered with these values, the documents of
# these templates. The base is every path's common part; each overlay adds its templates
# (npu-pod-policy names the overlay's scheduler, so each scheduler's overlay has its own);
# overlays/volcano/uninstall holds what Helm runs before an uninstall (the Job taking our
# entry out of Volcano's configuration), which kubectl would otherwise run at once.
LAYOUT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "base": (
        ("schedulerPath=none",),
        (
            "agent-config",
            "scheduler-config",
            "agent-rbac",
            "agent-daemonset",
            "agent-daemonset-vnpu",
            "scheduler-rbac",
            "scheduler-certs",
            "scheduler-deployment",
            "scheduler-networkpolicy",
            "admission-policy",
        ),
    ),
    "overlays/kube-scheduler": (
        ("schedulerPath=kube-scheduler",),
        (
            "kube-scheduler-config",
            "kube-scheduler-rbac",
            "kube-scheduler-deployment",
            "npu-pod-policy",
        ),
    ),
    # The kube-scheduler overlay with kube-scheduler-ascend: its kustomization patches the
    # overlay's ConfigMap with this one, its image and the annotation policy.
    "overlays/kube-scheduler-plugin": (
        (
            "schedulerPath=kube-scheduler",
            "kubeScheduler.plugin=true",
            "kubeScheduler.pluginImage=ascend-npu-k8s-kube-scheduler",
        ),
        ("kube-scheduler-config",),
    ),
    "overlays/volcano": (("schedulerPath=volcano",), ("volcano-extender", "npu-pod-policy")),
    "overlays/volcano/uninstall": (("schedulerPath=volcano",), ("volcano-extender",)),
    "overlays/dra": (
        ("schedulerPath=none", "dra.enabled=true"),
        (
            "dra-rbac",
            "dra-daemonset",
            "dra-device-classes",
            "dra-claim-templates",
            "dra-admission-policy",
        ),
    ),
    # Not an overlay but beside any of them (kubectl apply -k daemonset/monitoring): the
    # PodMonitors, alert rules and Grafana dashboard, for a cluster running the Prometheus
    # Operator (its monitoring.coreos.com/v1 CRDs).
    "monitoring": (
        (
            "schedulerPath=none",
            "dra.enabled=true",
            "monitoring.podMonitors=true",
            "monitoring.prometheusRule=true",
            "monitoring.grafanaDashboard=true",
        ),
        ("podmonitor", "prometheusrule", "grafana-dashboard"),
    ),
}


def helm_template(*values: str, namespace: str = NAMESPACE) -> str:
    """``helm template`` of the chart with ``--set`` values, as text."""
    command = [str(binary("helm")), "template", RELEASE, str(CHART), "--namespace", namespace]
    command += ["--kube-version", KUBE_VERSION]
    for value in values:
        command += ["--set", value]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm template {' '.join(values)} failed: {done.stderr.strip()}")
    return done.stdout


def _by_template(rendered: str, uninstall: bool) -> dict[str, str]:
    """The rendered documents grouped by the template they came from, as static YAML: Helm's
    own labels swapped for kustomize's; the hooks an uninstall runs first alone, or all but
    them (never those it runs after: Helm's own clean-up)."""
    files: dict[str, list[str]] = {}
    for document in rendered.split("\n---\n"):
        lines = document.strip("\n-").splitlines()
        if not lines or not lines[0].startswith("# Source: "):
            continue
        name = Path(lines[0].removeprefix("# Source: ")).stem
        if any("helm.sh/hook: pre-delete" in line for line in lines) != uninstall:
            continue
        if any("helm.sh/hook: post-delete" in line for line in lines):
            continue  # Helm's clean-up after an uninstall; kubectl delete deletes the objects
        kept = [
            line.replace(
                "app.kubernetes.io/managed-by: Helm", "app.kubernetes.io/managed-by: kustomize"
            )
            for line in lines[1:]
            if "helm.sh/chart:" not in line
        ]
        files.setdefault(name, []).append("\n".join(kept) + "\n")
    return {name: "---\n".join(documents) for name, documents in files.items()}


def static_manifests() -> dict[Path, str]:
    """Every file of daemonset/ the chart generates, by its path, with its text."""
    out: dict[Path, str] = {}
    for folder, (values, templates) in LAYOUT.items():
        rendered = _by_template(helm_template(*values), folder.endswith("uninstall"))
        for template in templates:
            out[MANIFESTS / folder / f"{template}.yaml"] = GENERATED + rendered[template]
    return out


def main() -> None:
    for path, text in static_manifests().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
