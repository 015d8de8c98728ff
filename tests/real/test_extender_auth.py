"""The extender's verbs on the real control plane: the real kube-scheduler, with the overlay's
KubeSchedulerConfiguration, calls them over HTTPS with the client certificate the certs module
makes (``scheduler_core.certs.issue``, as the certs Job makes it), and NPU pods are scheduled
and bound; a caller without that certificate is refused, and even with it (a stolen one),
``/bind`` binds no pod the service did not place: another tenant's pod stays unbound."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import astuple
from typing import Any

import pytest
from cryptography import x509

from contract.annotations import CHIPS_ANNOTATION
from scheduler_core.certs import SecretNames
from testbed.certs import KeyPair
from testbed.cluster import NAMESPACE, Deployed, apply, deployed, npu_pod, wait_pods
from testbed.control_plane import running, wait_until
from testbed.manifests import MANIFESTS, kustomize
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
    # Its nodeSelector matches no node: refused for that before the missing filter pass.
    assert answer["Error"] == (
        "bind tenant-b/infer to node-00: node(s) didn't match Pod's node affinity/selector "
        "(nodeSelector nowhere=true)"
    )
    status, answer = post(cluster, "debug/compare", {}, None)
    assert status == 401, "the full LISTs are guarded as the verbs"


def post_with_token(cluster: Deployed, verb: str, body: dict[str, Any]) -> tuple[int, Any]:
    """A POST carrying Volcano's token (stolen) as Bearer, no client certificate."""
    context = ssl.create_default_context(cafile=cluster.tls.ca)
    token = cluster.tls.token.read_text().strip()
    request = urllib.request.Request(
        f"{cluster.service_url}/{verb}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())


def test_a_stolen_certificates_forged_filter_binds_no_pod_off_its_constraints(
    cluster: Deployed,
) -> None:
    """The audit's finding #4: with kube-scheduler's certificate stolen, /filter sends the
    tenant's pending NPU pod without its nodeSelector (or required node affinity), listing
    nodes outside them, then /bind. The service decides from the cluster's pod: every node
    fails it, unresolvable, and the bind is refused; the pod stays pending. The Volcano token
    opens none of kube-scheduler's verbs, the certificate none of Volcano's."""
    stolen = cluster.tls.client
    pinned = victim(cluster, "pinned", 2)  # nodeSelector nowhere=true
    admin = cluster.plane.rest()
    fenced = npu_pod(2, {"app": "fenced"})
    fenced["metadata"]["name"] = "fenced"
    name_in = {"key": "metadata.name", "operator": "In", "values": ["nowhere"]}
    selector = {"nodeSelectorTerms": [{"matchFields": [name_in]}]}
    fenced["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}
    }
    fenced = admin.create("/api/v1/namespaces/tenant-b/pods", fenced)
    nodes = ["node-00", "node-01"]
    for pod, constraint in (
        (pinned, "nodeSelector nowhere=true"),
        (fenced, "required node affinity"),
    ):
        meta = pod["metadata"]
        forged = copy.deepcopy(pod)
        forged["spec"].pop("nodeSelector", None)
        forged["spec"].pop("affinity", None)
        status, answer = post(cluster, "filter", {"Pod": forged, "NodeNames": nodes}, stolen)
        reason = f"node(s) didn't match Pod's node affinity/selector ({constraint})"
        assert (status, answer["NodeNames"]) == (200, []), answer
        assert answer["FailedAndUnresolvableNodes"] == dict.fromkeys(nodes, reason)
        args = {"PodName": meta["name"], "PodNamespace": "tenant-b", "PodUID": meta["uid"]}
        status, answer = post(cluster, "bind", {**args, "Node": "node-00"}, stolen)
        assert (status, answer) == (
            403,
            {"Error": f"bind tenant-b/{meta['name']} to node-00: {reason}"},
        )
        assert unbound(cluster, pod), f"{meta['name']} stayed unbound"
        # The token is not kube-scheduler's: refused before the body is read.
        status, answer = post_with_token(cluster, "bind", {**args, "Node": "node-00"})
        assert status == 403 and answer["Error"].startswith("'/bind' is not for the token"), answer
        status, answer = post_with_token(cluster, "filter", {"Pod": forged, "NodeNames": nodes})
        assert status == 403, answer
        task = {"task": {"Pod": forged, "NodeName": "node-00"}}
        status, answer = post(cluster, "volcano/allocateFunc", task, stolen)
        assert status == 403, answer
        assert answer["Error"].startswith("'/volcano/allocateFunc' is not for the client cert")
        assert unbound(cluster, pod)
        live = admin.get(f"/api/v1/namespaces/tenant-b/pods/{meta['name']}")
        assert CHIPS_ANNOTATION not in (live["metadata"].get("annotations") or {})


CERTS_ACCOUNT = "ascend-npu-scheduler-certs"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
OURS = astuple(SecretNames())


def certs_job(cluster: Deployed) -> Callable[[], subprocess.CompletedProcess[str]]:
    """``python -m scheduler_core.certs`` as the Job runs it, under the Job's ServiceAccount
    (a TokenRequest token) with the shipped Role."""
    account = cluster.plane.service_account(NAMESPACE, CERTS_ACCOUNT)
    command = [sys.executable, "-m", "scheduler_core.certs", "--kubeconfig", str(account)]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    return run


def data_of(cluster: Deployed) -> dict[str, dict[str, str]]:
    admin = cluster.plane.rest()
    return {name: admin.get(f"{SECRETS}/{name}").get("data", {}) for name in OURS}


def versions(cluster: Deployed) -> list[str]:
    admin = cluster.plane.rest()
    return [admin.get(f"{SECRETS}/{name}")["metadata"]["resourceVersion"] for name in OURS]


def empty(cluster: Deployed, *names: str) -> None:
    """As an admin renews: the Secret's data removed (the Secret stays)."""
    for name in names:
        cluster.plane.rest().patch(f"{SECRETS}/{name}", {"data": None})


def mounted_keys(rendered: list[Obj]) -> dict[str, set[str]]:
    """The keys each pod of the manifests mounts of each Secret."""
    keys: dict[str, set[str]] = {}
    for document in rendered:
        if document["kind"] in ("Deployment", "Job"):
            for volume in document["spec"]["template"]["spec"].get("volumes", []):
                if "secret" in volume:
                    name = volume["secret"]["secretName"]
                    items = volume["secret"]["items"]
                    keys.setdefault(name, set()).update(item["key"] for item in items)
    return keys


def test_the_certs_job_fills_the_secrets_the_manifests_make_once_under_its_own_account(
    cluster: Deployed,
) -> None:
    """The kustomize base (applied server-side by the fixture) makes the three Secrets, Opaque
    and empty; the Job's code under its own account fills them with what every pod mounting
    them names, a second run changes nothing, applying the manifests again keeps what it
    wrote; renewal (emptied, or deleted and applied again) makes new ones; only some filled
    or one missing is refused in one line, nothing overwritten."""
    run = certs_job(cluster)
    plane = cluster.plane
    admin = plane.rest()
    for name in OURS:
        made = admin.get(f"{SECRETS}/{name}")
        assert made["type"] == "Opaque" and not made.get("data"), name
    first = run()
    assert first.returncode == 0, first.stderr
    assert "filled the Secrets" in first.stderr
    server = admin.get(f"{SECRETS}/ascend-npu-scheduler-tls")
    client = admin.get(f"{SECRETS}/ascend-npu-kube-scheduler-client")
    token = admin.get(f"{SECRETS}/ascend-npu-scheduler-token")
    ca = x509.load_pem_x509_certificate(base64.b64decode(server["data"]["ca.crt"]))
    served = x509.load_pem_x509_certificate(base64.b64decode(server["data"]["tls.crt"]))
    served.verify_directly_issued_by(ca)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "ascend-npu-scheduler.kube-system.svc" in names.get_values_for_type(x509.DNSName)
    presented = x509.load_pem_x509_certificate(base64.b64decode(client["data"]["tls.crt"]))
    presented.verify_directly_issued_by(ca)
    assert presented.subject.rfc4514_string() == "CN=ascend-npu-kube-scheduler"
    assert server["data"]["ca.crt"] == client["data"]["ca.crt"] == token["data"]["ca.crt"]
    # Every key a pod of the manifests mounts (its items: it waits until they are there).
    filled = data_of(cluster)
    for overlay in ("kube-scheduler", "volcano"):
        for name, keys in mounted_keys(kustomize(MANIFESTS / "overlays" / overlay)).items():
            assert keys <= set(filled[name]), (overlay, name, keys)
    before = versions(cluster)
    second = run()
    assert second.returncode == 0, second.stderr
    assert "are filled already: nothing to do" in second.stderr
    assert versions(cluster) == before
    # The manifests applied again, twice, server-side (kubectl apply --server-side): the
    # Secrets carry no data there, so what the Job wrote stays.
    for _ in range(2):
        apply(plane, kustomize(MANIFESTS / "overlays" / "kube-scheduler"))
        assert data_of(cluster) == filled
    # Only some filled (one emptied): refused in one line, nothing overwritten.
    empty(cluster, "ascend-npu-scheduler-token")
    partial = versions(cluster)
    third = run()
    assert third.returncode == 2
    assert third.stderr.startswith("error: only ascend-npu-scheduler-tls, ")
    assert versions(cluster) == partial
    # Renewal: all three emptied, the Job again: new certificates.
    empty(cluster, "ascend-npu-scheduler-tls", "ascend-npu-kube-scheduler-client")
    renewed = run()
    assert renewed.returncode == 0, renewed.stderr
    again = data_of(cluster)
    assert set(again) == set(filled) and all(again[n] != filled[n] for n in OURS)
    # One missing: the Job makes none (it may not), and says what to do.
    admin.delete(f"{SECRETS}/ascend-npu-kube-scheduler-client")
    missing = run()
    assert missing.returncode == 2
    assert "ascend-npu-kube-scheduler-client do not exist" in missing.stderr
    assert "apply the manifests again" in missing.stderr
    # Renewal by deleting the three and applying the manifests again.
    for name in ("ascend-npu-scheduler-tls", "ascend-npu-scheduler-token"):
        admin.delete(f"{SECRETS}/{name}")
    apply(plane, kustomize(MANIFESTS / "overlays" / "kube-scheduler"))
    assert not any(data_of(cluster).values()), "made anew, empty"
    fourth = run()
    assert fourth.returncode == 0, fourth.stderr
    assert all(data_of(cluster)[n] not in (again[n], {}) for n in OURS)


def test_the_certs_account_makes_no_token_secret_and_reads_no_other_secret(
    cluster: Deployed,
) -> None:
    """The audit's attack under the certs Job's real token: a
    ``kubernetes.io/service-account-token`` Secret for ``namespace-controller`` (any name, or
    one of the Job's three, made anew or changed into one), which the token controller would
    fill with that account's token (shown here for an admin's), then read back to list every
    Secret. Every step refused: no create, a Secret's type immutable, no other Secret read."""
    plane = cluster.plane
    admin = plane.rest()
    certs = plane.rest(plane.service_account(NAMESPACE, CERTS_ACCOUNT))
    account = "namespace-controller"
    annotation = {"kubernetes.io/service-account.name": account}

    def token_secret(name: str) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotation},
            "type": "kubernetes.io/service-account-token",
        }

    # The control: such a Secret, where one may create it, is filled with the account's token.
    admin.ensure_namespace(NAMESPACE)
    plane.service_account(NAMESPACE, account)
    admin.create(SECRETS, token_secret("control-token"))
    wait_until(
        lambda: "token" in admin.get(f"{SECRETS}/control-token").get("data", {}),
        60,
        "the token controller fills a token Secret",
    )
    for name in ("ascend-npu-scheduler-token-x", *OURS):
        assert certs.status("POST", SECRETS, token_secret(name)) == 403, name
    # Server-side apply creates too: refused (no patch, and no create behind it).
    for name in ("ascend-npu-scheduler-token-x", OURS[0]):
        with pytest.raises(RestError) as refused:
            certs.apply(token_secret(name), manager="certs")
        assert refused.value.status == 403, name
    # Changing one of its three into a token Secret: update is allowed, the type is not.
    for name in OURS:
        live = admin.get(f"{SECRETS}/{name}")
        changed = {
            **token_secret(name),
            "metadata": {**live["metadata"], "annotations": annotation},
        }
        with pytest.raises(RestError) as refused:
            certs.request("PUT", f"{SECRETS}/{name}", changed)
        assert refused.value.status == 422 and "field is immutable" in refused.value.message
        assert admin.get(f"{SECRETS}/{name}")["type"] == "Opaque"
        assert certs.status("DELETE", f"{SECRETS}/{name}") == 403, name
        patch = {"type": "kubernetes.io/service-account-token"}
        assert certs.status("PATCH", f"{SECRETS}/{name}", patch) == 403, name
    # No other Secret read: the admin's token Secret, a tenant's, any list or watch.
    admin.create(SECRETS, {"metadata": {"name": "tenant-secret"}, "data": {}})
    tenant = admin.ensure_namespace("tenant-c")
    admin.create(f"/api/v1/namespaces/{tenant}/secrets", {"metadata": {"name": "db"}})
    for path in (
        f"{SECRETS}/control-token",
        f"{SECRETS}/tenant-secret",
        f"/api/v1/namespaces/{tenant}/secrets/db",
        SECRETS,
        "/api/v1/secrets",
        f"{SECRETS}?watch=true",
    ):
        assert certs.status("GET", path) == 403, path
    assert not [
        s["metadata"]["name"]
        for s in admin.get(SECRETS)["items"]
        if s["type"] == "kubernetes.io/service-account-token"
        and s["metadata"]["name"] != "control-token"
    ], "no token Secret but the control's"
