"""The chart renders offline, as GitOps tools render it (the real helm, ``helm template``
without ``--kube-version``: Helm then assumes v1.20.0 and serves its own default API list),
the same manifests as for the tested cluster, and still refuses a cluster or a
``--kube-version`` too old for it.

Against a cluster (``helm install``) Helm's capabilities come from discovery, which lists
each kind (``v1/Pod``); ``--api-versions`` gives ``helm template`` the same list, so a cluster
that does not serve ValidatingAdmissionPolicy v1 is rendered here as helm install would render
it. No API server older than 1.30 can be run here (only v1.36.3 is built).
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.control_plane import binary
from testbed.manifests import CHART, KUBE_VERSION, RELEASE

VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
DEVICE_CLASS = "resource.k8s.io/v1/DeviceClass"


def helm_template(*flags: str) -> subprocess.CompletedProcess[str]:
    command = [str(binary("helm")), "template", RELEASE, str(CHART), "--namespace", "npu"]
    return subprocess.run([*command, *flags], capture_output=True, text=True, check=False)


def rendered(*flags: str) -> str:
    done = helm_template(*flags)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refusal(*flags: str) -> str:
    done = helm_template(*flags)
    assert done.returncode != 0, done.stdout[:500]
    (line,) = [e for e in done.stderr.splitlines() if e.startswith("Error: ")]
    return line


def test_chart_yaml_has_no_kube_version_constraint() -> None:
    assert "\nkubeVersion:" not in (CHART / "Chart.yaml").read_text()


@pytest.mark.parametrize(
    "values",
    [
        ("--set", "schedulerPath=volcano"),
        (
            "--set",
            "schedulerPath=volcano",
            "--set",
            "dra.enabled=true",
            "--set",
            "dra.huaweiClaims=false",
        ),
        ("--set", f"kubeScheduler.tag=v{KUBE_VERSION}"),
        ("--set", f"kubeScheduler.tag=v{KUBE_VERSION}", "--set", "monitoring.podMonitors=true"),
    ],
)
def test_offline_it_renders_what_it_renders_for_the_tested_cluster(values: tuple[str, ...]) -> None:
    assert rendered(*values) == rendered(*values, "--kube-version", KUBE_VERSION)


def test_offline_only_the_mutating_policy_for_huaweis_claims_is_left_out() -> None:
    # It is rendered for Kubernetes >= 1.36 only (MutatingAdmissionPolicy v1 is GA there:
    # dra-admission-policy.yaml); offline the version is not known.
    values = ("--set", "schedulerPath=volcano", "--set", "dra.enabled=true")
    offline, online = rendered(*values), rendered(*values, "--kube-version", KUBE_VERSION)
    documents = online.split("\n---\n")
    left_out = [d for d in documents if d not in offline.split("\n---\n")]
    kinds = sorted(line for d in left_out for line in d.splitlines() if line.startswith("kind:"))
    assert kinds == ["kind: MutatingAdmissionPolicy", "kind: MutatingAdmissionPolicyBinding"]
    assert all("ascend-npu-huawei-claims\n" in d for d in left_out)
    assert offline == "\n---\n".join(d for d in documents if d not in left_out)


def test_offline_the_kube_scheduler_path_asks_for_a_version() -> None:
    # The second kube-scheduler's image is the cluster's own version (_helpers.tpl): offline
    # there is none to take, and v1.20.0 would be wrong. Either remedy renders.
    line = refusal()
    assert "kubeScheduler.tag is empty and the cluster's version is unknown" in line
    assert "--kube-version" in line and "--set kubeScheduler.tag=" in line
    assert f"kube-scheduler:v{KUBE_VERSION}" in rendered("--kube-version", KUBE_VERSION)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--kube-version", "1.29.9"), "needs Kubernetes 1.30 or newer"),
        (("--kube-version", "1.33.0", "--set", "dra.enabled=true"), "needs Kubernetes 1.34"),
    ],
)
def test_a_kube_version_too_old_is_refused(flags: tuple[str, ...], says: str) -> None:
    line = refusal(*flags, "--set", "kubeScheduler.tag=v1.29.9")
    assert says in line and "--kube-version says v1." in line


def test_a_cluster_without_validating_admission_policy_v1_is_refused() -> None:
    # What a 1.29 API server's discovery gives helm install: kinds, but no VAP v1.
    cluster = ("--api-versions", "v1/Pod", "--kube-version", "1.29.9")
    line = refusal(*cluster, "--set", "kubeScheduler.tag=v1.29.9")
    assert "needs Kubernetes 1.30 or newer: this API server (v1.29.9) does not serve" in line
    assert "ValidatingAdmissionPolicy" in line


def test_a_cluster_serving_them_installs_and_dra_needs_resource_v1() -> None:
    cluster = ("--api-versions", "v1/Pod", "--api-versions", VAP, "--kube-version", "1.33.1")
    assert rendered(*cluster)
    line = refusal(*cluster, "--set", "dra.enabled=true")
    assert "dra.enabled needs Kubernetes 1.34 or newer" in line
    assert rendered(*cluster, "--api-versions", DEVICE_CLASS, "--set", "dra.enabled=true")
