"""Our scheduler service beside a real Volcano, as the chart's Volcano path runs it, for the
tests and benchmarks that put it before the real ``vc-scheduler``: Huawei's shipped Volcano
configuration (MindCluster v26.1.0 ``build/volcano-v1.12.0.yaml``, the init-params a cluster
without ClusterD sets), the same with Huawei's plugin taken out as a user switching over does,
the overlay's objects, and the service process itself.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml

from scheduler_core.volcano_config import Entry, merged
from simulation.processes import free_port, ready
from testbed.build import ROOT
from testbed.cluster import NAMESPACE as SYSTEM
from testbed.cluster import SCHEDULER_ACCOUNT, ExtenderTls
from testbed.control_plane import ControlPlane, Process, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj
from testbed.volcano import (
    HUAWEI_PLUGIN,
    HUAWEI_VERSION,
    VolcanoBuild,
    huawei_scheduler_configuration,
)
from testbed.volcano import NAMESPACE as VOLCANO_NAMESPACE

CONFIGMAP, KEY = "volcano-scheduler-configmap", "volcano-scheduler.conf"
# The overlay's objects that run something: their pods would wait for a scheduler (the
# DaemonSets' on every node); the service runs here as a process instead.
WORKLOADS = frozenset(
    {"DaemonSet", "Deployment", "Job", "Service", "NetworkPolicy", "PodDisruptionBudget"}
)


def parse_metrics(text: str) -> dict[str, float]:
    """A Prometheus text exposition as {series: value}."""
    series: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                series[name] = float(value)
            except ValueError:
                continue
    return series


def service_metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        return parse_metrics(response.read().decode())


def shipped_configuration() -> dict[str, Any]:
    """Huawei's shipped ``volcano-scheduler.conf``, its init-params as a cluster without
    ClusterD sets them (``useClusterInfoManager``) and the free chips read from the DeviceInfo
    as written (``self-maintain-available-card``)."""
    conf: dict[str, Any] = yaml.safe_load(
        huawei_scheduler_configuration(VolcanoBuild(HUAWEI_VERSION))
    )
    (params,) = [c for c in conf["configurations"] if c["name"] == "init-params"]
    params["arguments"]["useClusterInfoManager"] = "false"
    params["arguments"]["self-maintain-available-card"] = "false"
    names = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    if HUAWEI_PLUGIN not in names:
        raise LookupError(f"Huawei's configuration names no {HUAWEI_PLUGIN}: {names}")
    return conf


def huawei_configuration() -> str:
    return yaml.safe_dump(shipped_configuration(), sort_keys=False)


def without_huawei() -> str:
    """The same configuration with Huawei's plugin taken out (as docs/compatibility.md tells a
    user switching over)."""
    conf = shipped_configuration()
    for tier in conf["tiers"]:
        tier["plugins"] = [p for p in tier["plugins"] if not p["name"].startswith("volcano-npu")]
    return yaml.safe_dump(conf, sort_keys=False)


def overlay() -> list[Obj]:
    return [d for d in kustomize(MANIFESTS / "overlays" / "volcano") if d["kind"] not in WORKLOADS]


def shipped_entry(documents: list[Obj], url: str) -> Entry:
    """The overlay's extender entry (its ConfigMap) with the URL pointed at ``url``."""
    (shipped,) = [d for d in documents if d["metadata"]["name"] == "ascend-npu-volcano-extender"]
    return Entry.parse(shipped["data"]["extender.yaml"]).at(url)


def shipped_service_settings(documents: list[Obj]) -> tuple[str, list[str]]:
    """The chart's ``scheduler.yaml`` and the Deployment's arguments after ``serve`` and
    ``--config`` (read from the overlay before its workloads are left out)."""
    rendered = kustomize(MANIFESTS / "overlays" / "volcano")
    (settings,) = [d for d in documents if d["metadata"]["name"] == "ascend-npu-scheduler-config"]
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = [a for a in container["args"] if a != "serve" and not a.startswith("--config=")]
    return str(settings["data"]["scheduler.yaml"]), args


@dataclass
class Service:
    process: Process
    url: str  # https: the verbs
    metrics_url: str  # http: /metrics and the probes
    trust: dict[str, str]  # vc-scheduler's environment: SSL_CERT_DIR
    token: str  # Volcano's bearer of the /volcano verbs


@contextmanager
def our_service(plane: ControlPlane, nodes: int, *, policies: bool = True) -> Iterator[Service]:
    """The overlay's RBAC, policies and ConfigMaps applied, Volcano's ConfigMap holding the
    merged configuration, and the service as the chart runs it (its settings file and
    arguments; here on loopback ports, with a kubeconfig of its ServiceAccount's token and the
    certs Job's files made here), ready and seeing every node. Without ``policies`` the
    admission policies are left out (and the service told to start without them), for a
    caller that writes pods already bound with their chips, as only a scheduler may."""
    admin = plane.rest()
    documents = overlay()
    for document in documents:
        if policies or not document["kind"].startswith("ValidatingAdmissionPolicy"):
            admin.apply(document)
    workdir = plane.workdir
    tls = ExtenderTls.make(workdir / "extender-tls")
    port, metrics_port = free_port(), free_port()
    url = f"https://127.0.0.1:{port}"
    entry = shipped_entry(documents, url).with_token(tls.token.read_text().strip())
    conf = merged(without_huawei(), entry)
    admin.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": VOLCANO_NAMESPACE},
            "data": {KEY: conf},
        }
    )
    settings, args = shipped_service_settings(documents)
    settings_file = workdir / "scheduler.yaml"
    if not policies:
        values = yaml.safe_load(settings)
        values.pop("require-admission-policies", None)
        settings = yaml.safe_dump(values, sort_keys=False)
    settings_file.write_text(settings)
    kubeconfig = plane.service_account(SYSTEM, SCHEDULER_ACCOUNT)
    command = [
        sys.executable,
        "-m",
        "scheduler_core",
        "serve",
        f"--config={settings_file}",
        *args,
        f"--listen=127.0.0.1:{port}",
        f"--metrics-listen=127.0.0.1:{metrics_port}",
        "--kube=kubeconfig",
        f"--kubeconfig={kubeconfig}",
        *tls.service_flags(),
        *([] if policies else ["--allow-missing-policies"]),
    ]
    # This checkout's code, wherever the process starts (the venv's editable install may
    # point at another checkout).
    process = Process("scheduler-service", command, workdir, {"PYTHONPATH": str(ROOT)})
    try:
        metrics_url = f"http://127.0.0.1:{metrics_port}"
        process.wait_healthy(lambda: ready(metrics_url))
        wait_until(
            lambda: service_metrics(metrics_url).get("ascend_scheduler_npu_nodes") == nodes,
            300,
            f"the service sees {nodes} NPU nodes",
        )
        folder = workdir / "volcano-ca"
        folder.mkdir(exist_ok=True)
        (folder / "ca.crt").write_bytes(tls.ca.read_bytes())
        token = tls.token.read_text().strip()
        yield Service(process, url, metrics_url, {"SSL_CERT_DIR": str(folder)}, token)
    finally:
        process.stop()
