"""The extender's verbs on the real control plane: the real kube-scheduler, with the overlay's
KubeSchedulerConfiguration, calls them over HTTPS with the client certificate the certs module
makes (``scheduler_core.certs.issue``, as the certs Job makes it), and NPU pods are scheduled
and bound; a caller without that certificate is refused, and even with it (a stolen one),
``/bind`` binds no pod the service did not place: another tenant's pod stays unbound."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from contract.annotations import CHIPS_ANNOTATION
from testbed.certs import KeyPair
from testbed.cluster import NAMESPACE, Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import running
from testbed.rest import Obj, RestError


@pytest.fixture(scope="module")
def cluster() -> Iterator[Deployed]:
    with running("auth") as plane, deployed(plane, plane.workdir, nodes=2) as cluster:
        yield cluster


def post(
    cluster: Deployed, verb: str, body: dict[str, Any], client: KeyPair | None
) -> tuple[int, Any]:
    """A POST to the service as an attacker on the network would send it: verifying the
    server, with or without the client certificate."""
    context = ssl.create_default_context(cafile=cluster.tls.ca)
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    request = urllib.request.Request(
        f"{cluster.service_url}/{verb}", data=json.dumps(body).encode()
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())


def test_kube_scheduler_schedules_an_npu_pod_over_https_with_its_client_certificate(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    ns = admin.ensure_namespace("tenant-a")
    pod = npu_pod(2, {"app": "trained"})
    pod["metadata"]["name"] = "train"
    admin.create(f"/api/v1/namespaces/{ns}/pods", pod)
    (ran,) = wait_pods(cluster.plane, ns, "app=trained", 1)
    assert ran["spec"]["nodeName"] in ("node-00", "node-01")
    assert len(ran["metadata"]["annotations"][CHIPS_ANNOTATION].split(",")) == 2


def victim(cluster: Deployed, name: str, chips: int) -> Obj:
    """Another tenant's pod of our profile kept pending (its nodeSelector matches no node:
    kube-scheduler's own filters never send it to the extender)."""
    admin = cluster.plane.rest()
    ns = admin.ensure_namespace("tenant-b")
    pod = npu_pod(chips, {"app": name})
    pod["metadata"]["name"] = name
    pod["spec"]["nodeSelector"] = {"nowhere": "true"}
    if chips == 0:
        pod["spec"]["containers"][0]["resources"] = {}
    return admin.create(f"/api/v1/namespaces/{ns}/pods", pod)


def unbound(cluster: Deployed, pod: Obj) -> bool:
    meta = pod["metadata"]
    live = cluster.plane.rest().get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
    return not live["spec"].get("nodeName")


def test_an_attackers_bind_of_another_tenants_pod_is_refused(cluster: Deployed) -> None:
    plain, npu = victim(cluster, "web", 0), victim(cluster, "infer", 2)
    stolen = cluster.tls.client  # kube-scheduler's own certificate, stolen
    for pod in (plain, npu):
        meta = pod["metadata"]
        args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "Node": "node-00"}
        # No certificate: the verb is not even read.
        status, answer = post(cluster, "bind", {**args, "PodUID": meta["uid"]}, None)
        assert status == 401, answer
        # The attack as it was: no PodUID, a node the caller names.
        status, answer = post(cluster, "bind", args, stolen)
        assert (status, answer) == (
            400,
            {"Error": "PodUID is required: a bind names the very pod it binds"},
        )
        status, answer = post(cluster, "bind", {**args, "PodUID": meta["uid"]}, stolen)
        assert status == 403, answer
        assert unbound(cluster, pod), f"{meta['name']} stayed unbound"
    status, answer = post(
        cluster,
        "bind",
        {"PodName": "web", "PodNamespace": "tenant-b", "PodUID": plain["metadata"]["uid"]}
        | {"Node": "node-00"},
        stolen,
    )
    assert answer["Error"].endswith("the pod asks no NPUs of its containers")
    status, answer = post(
        cluster,
        "bind",
        {"PodName": "infer", "PodNamespace": "tenant-b", "PodUID": npu["metadata"]["uid"]}
        | {"Node": "node-00"},
        stolen,
    )
    assert answer["Error"].endswith("the node did not pass this service's filter for the pod")
    status, answer = post(cluster, "debug/compare", {}, None)
    assert status == 401, "the full LISTs are guarded as the verbs"


def test_the_certs_job_makes_its_secrets_once_under_its_own_account(cluster: Deployed) -> None:
    """``python -m scheduler_core.certs`` as the Job runs it, under the Job's ServiceAccount
    with the shipped Role: the three Secrets made, a second run changes nothing, and the
    account reads no other Secret."""
    plane = cluster.plane
    account = plane.service_account(NAMESPACE, "ascend-npu-scheduler-certs")
    command = [sys.executable, "-m", "scheduler_core.certs", "--kubeconfig", str(account)]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    first = run()
    assert first.returncode == 0, first.stderr
    admin = plane.rest()
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    server = admin.get(f"{secrets}/ascend-npu-scheduler-tls")
    client = admin.get(f"{secrets}/ascend-npu-kube-scheduler-client")
    token = admin.get(f"{secrets}/ascend-npu-scheduler-token")
    served = x509.load_pem_x509_certificate(base64.b64decode(server["data"]["tls.crt"]))
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "ascend-npu-scheduler.kube-system.svc" in names.get_values_for_type(x509.DNSName)
    presented = x509.load_pem_x509_certificate(base64.b64decode(client["data"]["tls.crt"]))
    assert presented.subject.rfc4514_string() == "CN=ascend-npu-kube-scheduler"
    assert server["data"]["ca.crt"] == client["data"]["ca.crt"] == token["data"]["ca.crt"]
    second = run()
    assert second.returncode == 0, second.stderr
    assert "exist already: nothing to do" in second.stderr
    again = admin.get(f"{secrets}/ascend-npu-scheduler-tls")
    assert again["metadata"]["resourceVersion"] == server["metadata"]["resourceVersion"]
    # Only some left (one deleted): refused in one line, nothing overwritten.
    admin.delete(f"{secrets}/ascend-npu-scheduler-token")
    third = run()
    assert third.returncode == 2
    assert third.stderr.startswith("error: only ascend-npu-scheduler-tls, ")
    # RBAC by the API server: the Job's account gets no other Secret.
    admin.create(secrets, {"metadata": {"name": "tenant-secret"}, "data": {}})
    with pytest.raises(RestError) as refused:
        plane.rest(account).get(f"{secrets}/tenant-secret")
    assert refused.value.status == 403
