"""The Helm chart installed, upgraded and uninstalled by the real helm on the real API server:
the hook Jobs really run (the Job controller makes their pods; a runner here plays their
node's kubelet, running the container's command under the Job's own ServiceAccount token, so
RBAC decides what it may touch): the certs Job makes the service's Secrets once, the user's
Volcano configuration keeps its plugins and gets ours (its URL carrying the token), Volcano's
scheduler trusts the service's CA until the uninstall, and an uninstall leaves nothing of the
release behind."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.annotations import SCHEDULER_IMAGE_ANNOTATION
from testbed.control_plane import ControlPlane, binary, running, wait_until
from testbed.manifests import CHART, helm_template
from testbed.rest import Obj, RestError

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "ascend-npu"
NAMESPACE = "kube-system"
VOLCANO = "volcano-system"
CONFIGMAP = f"/api/v1/namespaces/{VOLCANO}/configmaps/volcano-scheduler-configmap"
KEY = "volcano-scheduler.conf"
JOB_POD = "app.kubernetes.io/name in (ascend-npu-volcano-config, ascend-npu-scheduler-certs)"
VOLCANO_SCHEDULER = f"/apis/apps/v1/namespaces/{VOLCANO}/deployments/volcano-scheduler"
# Volcano's scheduler as its chart deploys it (volcano-sh/volcano installer/helm), in short.
VOLCANO_DEPLOYMENT: Obj = {
    "metadata": {"name": "volcano-scheduler", "namespace": VOLCANO},
    "spec": {
        "selector": {"matchLabels": {"app": "volcano-scheduler"}},
        "template": {
            "metadata": {"labels": {"app": "volcano-scheduler"}},
            "spec": {
                "containers": [
                    {"name": "volcano-scheduler", "image": "volcanosh/vc-scheduler:v1.13.0"}
                ]
            },
        },
    },
}
RUNNER_NODE = "runner"
TOKEN_SECRET = "ascend-npu-scheduler-token"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
# The certs Job's: the chart makes them (pre-install hooks), the Job fills them.
CERTS_SECRETS = ("ascend-npu-scheduler-tls", "ascend-npu-kube-scheduler-client", TOKEN_SECRET)
DEADLINE = 120.0
# A user's Volcano configuration: plugins and an action of their own that must survive.
USERS = """\
actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with running("chart") as started:
        admin = started.rest()
        admin.create(
            "/api/v1/nodes",
            {"metadata": {"name": RUNNER_NODE}, "status": {"capacity": {"pods": "10"}}},
        )
        yield started


def helm(plane: ControlPlane, *args: str) -> str:
    done = subprocess.run(
        [str(binary("helm")), *args, "--kubeconfig", str(plane.admin), "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        check=False,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done.stdout


class JobRunner:
    """The kubelet of the hook Jobs' pods: binds each to the runner node, runs its container's
    command here (its ConfigMap volume written to a folder, its token a TokenRequest bound to
    the pod) and writes how it ended, as the kubelet does, for the Job controller to see."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.admin = plane.rest()
        self.ran: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> JobRunner:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.stop.wait(0.2):
            pods = self.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=JOB_POD)
            for pod in pods["items"]:
                if pod.get("status", {}).get("phase", "Pending") == "Pending":
                    self._run(pod)

    def _run(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if not pod["spec"].get("nodeName"):
            self.admin.create(
                f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/binding",
                {"metadata": {"name": name}, "target": {"kind": "Node", "name": RUNNER_NODE}},
            )
        (container,) = pod["spec"]["containers"]
        token = self.plane.token(NAMESPACE, pod["spec"]["serviceAccountName"], bound_to=pod)
        kubeconfig = self.plane.token_kubeconfig(token, f"job-{name}")
        with tempfile.TemporaryDirectory() as root:
            args = [*container["command"][1:], *container["args"], f"--kubeconfig={kubeconfig}"]
            for mount in container.get("volumeMounts", []):
                volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
                folder = Path(root) / mount["name"]
                folder.mkdir()
                if "configMap" in volume:
                    source = self.admin.get(
                        f"/api/v1/namespaces/{NAMESPACE}/configmaps/{volume['configMap']['name']}"
                    )
                    for key, text in source["data"].items():
                        (folder / key).write_text(text)
                elif "secret" in volume:
                    source = self.admin.get(
                        f"/api/v1/namespaces/{NAMESPACE}/secrets/{volume['secret']['secretName']}"
                    )
                    # As the kubelet: the keys it names (the mount fails while one is
                    # missing), or every key there is.
                    data = source.get("data", {})
                    items = volume["secret"].get("items") or [{"key": k, "path": k} for k in data]
                    for item in items:
                        (folder / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
                else:  # the token's projected volume: given as kubeconfig
                    continue
                args = [a.replace(mount["mountPath"] + "/", f"{folder}/") for a in args]
            done = subprocess.run(
                [sys.executable, *args],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                check=False,
            )
        self.ran.append((name, done.returncode))
        ended = {
            "exitCode": done.returncode,
            "reason": "Completed" if not done.returncode else "Error",
        }
        self.admin.patch(
            f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
            {
                "status": {
                    "phase": "Succeeded" if done.returncode == 0 else "Failed",
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": container["image"],
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": ended},
                        }
                    ],
                }
            },
        )


def volcano_plugins(plane: ControlPlane) -> list[list[Any]]:
    conf = yaml.safe_load(plane.rest().get(CONFIGMAP)["data"][KEY])
    return [tier["plugins"] for tier in conf["tiers"]]


def ours(*values: str, token: str) -> Any:
    """Our plugin entry as the merge Job writes it: the chart's, the token in its URL."""
    (config_map,) = [
        d
        for d in yaml.safe_load_all(helm_template("schedulerPath=volcano", *values))
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ascend-npu-volcano-extender"
    ]
    entry = yaml.safe_load(config_map["data"]["extender.yaml"])
    url = entry["arguments"]["extender.urlPrefix"]
    entry["arguments"]["extender.urlPrefix"] = url.replace("https://", f"https://volcano:{token}@")
    return entry


def certificates(plane: ControlPlane) -> dict[str, dict[str, str]]:
    """The three Secrets' data, checked to be the chart's (Opaque) and filled by the Job."""
    found = {}
    for name in CERTS_SECRETS:
        secret = plane.rest().get(f"{SECRETS}/{name}")
        assert secret["type"] == "Opaque", name
        assert secret["metadata"]["annotations"]["helm.sh/hook"] == "pre-install", name
        found[name] = secret["data"]
        assert found[name], f"{name} filled"
    return found


def left_behind(plane: ControlPlane, rendered: str) -> list[str]:
    """The objects of a render that still exist."""
    admin = plane.rest()
    found = []
    for document in (d for d in yaml.safe_load_all(rendered) if d):
        meta = document["metadata"]
        path = admin.path(
            document["apiVersion"], document["kind"], meta["name"], meta.get("namespace", "")
        )
        try:
            admin.get(path)
        except RestError as failed:
            if failed.status == 404:
                continue
            raise
        found.append(f"{document['kind']}/{meta['name']}")
    return found


def test_the_volcano_path_merges_into_the_users_configuration_and_uninstall_takes_it_out(
    plane: ControlPlane,
) -> None:
    admin = plane.rest()
    admin.ensure_namespace(VOLCANO)
    admin.create(
        f"/api/v1/namespaces/{VOLCANO}/configmaps",
        {"metadata": {"name": "volcano-scheduler-configmap"}, "data": {KEY: USERS}},
    )
    admin.create(f"/apis/apps/v1/namespaces/{VOLCANO}/deployments", VOLCANO_DEPLOYMENT)
    users = yaml.safe_load(USERS)
    with JobRunner(plane) as runner:
        notes = helm(plane, "install", RELEASE, str(CHART), "--set", "schedulerPath=volcano")
        assert "What to check next" in notes and "volcano" in notes
        installed = certificates(plane)
        token = base64.b64decode(installed[TOKEN_SECRET]["token"]).decode()
        assert volcano_plugins(plane) == [
            [*users["tiers"][0]["plugins"], ours(token=token)],
            users["tiers"][1]["plugins"],
        ]
        assert yaml.safe_load(admin.get(CONFIGMAP)["data"][KEY])["actions"] == users["actions"]
        # Volcano's scheduler trusts the service's CA: mounted, and named by SSL_CERT_DIR.
        ca = admin.get(f"/api/v1/namespaces/{VOLCANO}/configmaps/ascend-npu-scheduler-ca")
        secret = admin.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/ascend-npu-scheduler-tls")
        assert (
            ca["data"]["ca.crt"].strip()
            == base64.b64decode(secret["data"]["ca.crt"]).decode().strip()
        )
        (scheduler,) = admin.get(VOLCANO_SCHEDULER)["spec"]["template"]["spec"]["containers"]
        assert {"name": "SSL_CERT_DIR", "value": "/etc/ssl/certs:/etc/ascend-npu-ca"} in scheduler[
            "env"
        ]
        assert scheduler["volumeMounts"][0]["mountPath"] == "/etc/ascend-npu-ca"

        helm(
            plane,
            "upgrade",
            RELEASE,
            str(CHART),
            "--reuse-values",
            "--set",
            "volcano.httpTimeout=3s",
        )
        (entry,) = [p for p in volcano_plugins(plane)[0] if p["name"] == "extender"]
        assert entry == ours("volcano.httpTimeout=3s", token=token), "the same token kept"
        assert certificates(plane) == installed, "the same certificates, byte for byte"

        # Volcano v1.12's way: the adapter's entry instead, on the image that carries it.
        image = "registry.example/ascend-npu-vc-scheduler:v1.12.0-0.1.0"
        adapter = ("--set", "volcano.adapter=true", "--set", f"volcano.adapterImage={image}")
        helm(plane, "upgrade", RELEASE, str(CHART), "--reuse-values", *adapter)
        names = [p["name"] for p in volcano_plugins(plane)[0]]
        assert names == [*(p["name"] for p in users["tiers"][0]["plugins"]), "ascend-npu-adapter"]
        (scheduler,) = admin.get(VOLCANO_SCHEDULER)["spec"]["template"]["spec"]["containers"]
        assert scheduler["image"] == image

        rendered = helm_template("schedulerPath=volcano")
        helm(plane, "uninstall", RELEASE, "--wait")
        assert yaml.safe_load(admin.get(CONFIGMAP)["data"][KEY]) == users
        (scheduler,) = admin.get(VOLCANO_SCHEDULER)["spec"]["template"]["spec"]["containers"]
        assert scheduler["image"] == "volcanosh/vc-scheduler:v1.13.0", "Volcano's image back"
        noted = admin.get(VOLCANO_SCHEDULER)["metadata"].get("annotations") or {}
        assert SCHEDULER_IMAGE_ANNOTATION not in noted
        assert "env" not in scheduler and "volumeMounts" not in scheduler, "taken out again"
        assert "volumes" not in admin.get(VOLCANO_SCHEDULER)["spec"]["template"]["spec"]
        with pytest.raises(RestError):
            admin.get(f"/api/v1/namespaces/{VOLCANO}/configmaps/ascend-npu-scheduler-ca")
        # certs, merge; certs again (nothing to do), merge again, twice; remove.
        assert [code for _, code in runner.ran] == [0] * 7
    wait_until(lambda: not left_behind(plane, rendered), DEADLINE, "the release's objects gone")


def test_the_kube_scheduler_path_runs_the_clusters_own_kube_scheduler_and_uninstalls_clean(
    plane: ControlPlane,
) -> None:
    admin = plane.rest()
    version = admin.get("/version")["gitVersion"]
    with JobRunner(plane) as runner:  # the certs Job's (pre-install, pre-upgrade)
        helm(plane, "install", RELEASE, str(CHART), "--set", "scheduler.policy=binpack")
        installed = certificates(plane)
        helm(plane, "upgrade", RELEASE, str(CHART), "--reuse-values")
        assert certificates(plane) == installed, "the same certificates, byte for byte"
        assert [code for _, code in runner.ran] == [0, 0], "filled; filled already"
    deployment = admin.get(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/ascend-npu-kube-scheduler"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/kube-scheduler:{version}"
    settings = admin.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/ascend-npu-scheduler-config")
    assert yaml.safe_load(settings["data"]["scheduler.yaml"])["policy"] == "binpack"
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"

    rendered = helm_template()
    helm(plane, "uninstall", RELEASE, "--wait")
    wait_until(lambda: not left_behind(plane, rendered), DEADLINE, "the release's objects gone")
    assert all(f"name: {name}" in rendered for name in CERTS_SECRETS), "the Secrets checked too"
