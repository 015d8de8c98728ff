"""Only the cluster's schedulers may call the verbs: HTTPS with a client certificate of an
allowed name (kube-scheduler's verbs), or the token (Bearer, or Basic's password as Go sends
a URL's userinfo: Volcano's ``/volcano/*``), each for its own caller's verbs only; the
service refuses to start without one unless told ``--insecure``; the verbs decide from the
cluster's pod, not the body's; ``/bind`` binds only the live pod it names, of our profile,
asking NPUs, to a node its constraints allow that passed our filter for it; ``/debug/compare``
is guarded and rate-limited. Probes and monitoring keep /healthz, /readyz, /metrics."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contract.node_affinity import pod_constraints
from infra.http import Caller, tls_context
from scheduler_core.certs import issue
from scheduler_core.service.access import VERB_NOT_ALLOWED, Access
from scheduler_core.service.routes import COMPARE_PERIOD
from scheduler_core.service.views.npu_map import PATHS as MAP_PATHS
from simulation.cluster import wait_for
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster, pod_object
from simulation.processes import free_port, ready, service_command
from testbed.certs import Authority, KeyPair
from tests.integration.test_extender import Harness, pending

ALLOWED = "ascend-npu-kube-scheduler"
DAY = datetime.timedelta(days=1)
TOKEN = "s3cret-token"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: KeyPair
    scheduler: KeyPair  # the allowed name, signed by the client CA
    intruder: KeyPair  # signed by the same CA, another name
    stranger: KeyPair  # another CA's, the allowed name


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    authority = Authority(directory)
    other = issue(["localhost"], ALLOWED, datetime.datetime.now(datetime.UTC), DAY)
    (directory / "stranger.crt").write_bytes(other.client.cert)
    (directory / "stranger.key").write_bytes(other.client.key)
    return Pki(
        authority.cert,
        authority.issue("server", "localhost", hosts=("127.0.0.1", "localhost")),
        authority.issue("scheduler", ALLOWED),
        authority.issue("intruder", "mallory"),
        KeyPair(directory / "stranger.crt", directory / "stranger.key"),
    )


def served(pki: Pki, token: str | None = TOKEN) -> tuple[Harness, str]:
    h = Harness(2)
    tls = tls_context(pki.server.cert, pki.server.key, pki.ca)
    return h, h.service.start(access=Access(tls, frozenset({ALLOWED}), token))


@pytest.fixture
def service(pki: Pki) -> Iterator[tuple[Harness, str]]:
    h, url = served(pki)
    pending(h.api, "p", 2)
    yield h, url
    h.service.stop()


def call(  # noqa: PLR0917
    url: str,
    pki: Pki,
    client: KeyPair | None = None,
    path: str = "filter",
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """The answer's status, JSON (or text) and headers."""
    context = ssl.create_default_context(cafile=pki.ca)
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    if body is None and path == "filter":
        body = {"Pod": {"metadata": {"name": "p", "namespace": "ns"}}, "NodeNames": []}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}/{path}", data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status), _read(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as failed:
        return failed.code, _read(failed.read()), dict(failed.headers)


def _read(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode()


def basic(user: str, password: str) -> dict[str, str]:
    """What Go's net/http client sends for ``https://user:password@host/`` (client.go ``send``)."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# ---- who may call -------------------------------------------------------------------------


def test_a_client_certificate_of_an_allowed_name_lets_in_and_no_other_does(
    service: tuple[Harness, str], pki: Pki
) -> None:
    _, url = service
    assert url.startswith("https://")
    assert call(url, pki, client=pki.scheduler)[0] == 200
    status, answer, _ = call(url, pki)
    assert (status, answer) == (401, {"Error": answer["Error"]})
    assert "client certificate of an allowed name" in answer["Error"]
    # Signed by a CA the service trusts, but of a name not allowed: verified, then refused.
    status, answer, _ = call(url, pki, client=pki.intruder)
    assert status == 403
    assert answer == {"Error": "the client certificate's CN 'mallory' is not an allowed name"}
    # Another CA's: refused by TLS (the client reads the alert, or the closed connection).
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        call(url, pki, client=pki.stranger)
    metrics = call(url, pki, path="metrics")[1]
    assert 'ascend_scheduler_auth_refusals_total{reason="no_credentials"} 1.0' in metrics
    assert 'ascend_scheduler_auth_refusals_total{reason="name_not_allowed"} 1.0' in metrics


def test_the_token_lets_in_as_bearer_and_as_basics_password(
    service: tuple[Harness, str], pki: Pki
) -> None:
    _, url = service
    close = "volcano/onSessionClose"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert call(url, pki, path=close, body={}, headers=bearer)[0] == 200
    assert call(url, pki, path=close, body={}, headers=basic("volcano", TOKEN))[0] == 200
    for wrong in ({"Authorization": "Bearer guess"}, basic("volcano", "guess"), basic(TOKEN, "")):
        status, answer, _ = call(url, pki, headers=wrong)
        assert (status, answer) == (401, {"Error": "the token is wrong"})
    metrics = call(url, pki, path="metrics")[1]
    assert 'ascend_scheduler_auth_refusals_total{reason="bad_token"} 3.0' in metrics


BEARER = {"Authorization": f"Bearer {TOKEN}"}
TOKEN_CALLS = "which calls /volcano/*, /debug/compare and the NPU map only"
CERTIFICATE_CALLS = (
    "which calls /filter, /prioritize, /preempt, /bind, /place, /reserve, /unreserve, /waits, "
    "/debug/compare and the NPU map only"
)


def test_each_credential_calls_only_its_own_callers_verbs(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """The Volcano token (or a stolen one) binds nothing through kube-scheduler's ``/bind``,
    and kube-scheduler's certificate allocates nothing through Volcano's verbs: 403, the
    verb and the credential named, before the body is read."""
    h, url = service
    pod = h.api.get_pod("ns", "p")
    meta = pod["metadata"]
    binding = {"PodName": "p", "PodNamespace": "ns", "PodUID": meta["uid"], "Node": "n0"}
    kube_schedulers = {
        "filter": {"Pod": pod, "NodeNames": ["n0", "n1"]},
        "prioritize": {"Pod": pod, "NodeNames": ["n0", "n1"]},
        "preempt": {"Pod": pod, "NodeNameToMetaVictims": {}},
        "bind": binding,
    }
    for verb, body in kube_schedulers.items():
        for headers in (BEARER, basic("volcano", TOKEN)):
            status, answer, _ = call(url, pki, path=verb, body=body, headers=headers)
            assert (status, answer) == (
                403,
                {"Error": f"'/{verb}' is not for the token, {TOKEN_CALLS}"},
            )
    assert unbound(h, "p")
    task = {"task": {"Pod": pod, "NodeName": "n0"}, "node": {"Name": "n0"}}
    for verb in ("predicate", "allocateFunc", "onSessionOpen"):
        status, answer, _ = call(url, pki, client=pki.scheduler, path=f"volcano/{verb}", body=task)
        assert (status, answer) == (
            403,
            {
                "Error": f"'/volcano/{verb}' is not for the client certificate of CN "
                f"'{ALLOWED}', {CERTIFICATE_CALLS}"
            },
        )
    assert "huawei.com/Ascend910" not in h.api.get_pod("ns", "p")["metadata"]["annotations"]
    # Each in its own place; both for /debug/compare (the second is only rate-limited).
    assert call(url, pki, client=pki.scheduler)[0] == 200
    assert call(url, pki, path="volcano/onSessionClose", body={}, headers=BEARER)[0] == 200
    assert call(url, pki, client=pki.scheduler, path="debug/compare", body={})[0] == 200
    assert call(url, pki, path="debug/compare", body={}, headers=BEARER)[0] == 429
    metrics = call(url, pki, path="metrics")[1]
    assert f'ascend_scheduler_auth_refusals_total{{reason="{VERB_NOT_ALLOWED}"}} 11.0' in metrics


def test_the_adapters_batch_verb_is_the_tokens_as_volcanos_other_verbs(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """``/volcano/predicateAll`` (the in-process adapter's one call a task) takes Volcano's
    token, as Bearer and as Basic's password (the adapter's URL userinfo), and refuses
    kube-scheduler's certificate; a bad body is a 400 naming the field."""
    h, url = service
    body = {"task": {"Pod": h.api.get_pod("ns", "p")}, "nodes": ["n0"]}
    for headers in (BEARER, basic("volcano", TOKEN)):
        status, answer, _ = call(url, pki, path="volcano/predicateAll", body=body, headers=headers)
        assert status == 200 and answer["passing"] == ["n0"], answer
    status, answer, _ = call(url, pki, client=pki.scheduler, path="volcano/predicateAll", body=body)
    assert status == 403 and "is not for the client certificate" in answer["Error"]
    bad = {**body, "nodes": [{"Name": "n0"}]}
    status, answer, _ = call(url, pki, path="volcano/predicateAll", body=bad, headers=BEARER)
    assert status == 400 and "`$.nodes[0]`" in answer["Error"], answer
    assert call(url, pki, path="volcano/predicateAll", body={}, headers={})[0] == 401


def test_the_npu_map_is_open_to_both_credentials_and_insecure_to_anyone() -> None:
    access = Access(None, frozenset({ALLOWED}), TOKEN)
    certificate = {"subject": ((("commonName", ALLOWED),),)}
    for path in sorted(MAP_PATHS):
        assert access.check(Caller({}, certificate, path)) is None
        assert access.check(Caller({"authorization": f"Bearer {TOKEN}"}, None, path)) is None
        assert access.check(Caller({}, certificate, path + "?since=1")) is None
    refused = access.check(Caller({"authorization": f"Bearer {TOKEN}"}, None, "/bind"))
    assert refused is not None and (refused.code, refused.reason) == (403, VERB_NOT_ALLOWED)
    refused = access.check(Caller({}, certificate, "/not-a-verb"))
    assert refused is not None and refused.message.startswith("'/not-a-verb' is not for")
    for path in ("/bind", "/volcano/allocateFunc", "/map/state"):
        assert Access().check(Caller({}, None, path)) is None  # --insecure: as before


def test_the_certificates_the_certs_job_makes_serve_and_let_kube_scheduler_in(
    tmp_path: Path,
) -> None:
    made = issue(["localhost", "127.0.0.1"], ALLOWED, datetime.datetime.now(datetime.UTC), DAY)
    files = {}
    for name, content in (
        ("ca.crt", made.ca),
        ("tls.crt", made.server.cert),
        ("tls.key", made.server.key),
        ("client.crt", made.client.cert),
        ("client.key", made.client.key),
    ):
        files[name] = tmp_path / name
        files[name].write_bytes(content)
    h = Harness(1)
    tls = tls_context(files["tls.crt"], files["tls.key"], files["ca.crt"])
    url = h.service.start(access=Access(tls, frozenset({ALLOWED}), None))
    try:
        client = KeyPair(files["client.crt"], files["client.key"])
        unused = Pki(files["ca.crt"], client, client, client, client)
        assert call(url, unused, client=client)[0] == 200
        assert call(url, unused)[0] == 401
    finally:
        h.service.stop()


def test_probes_and_monitoring_need_no_credentials(service: tuple[Harness, str], pki: Pki) -> None:
    _, url = service
    for path in ("healthz", "readyz", "metrics"):
        assert call(url, pki, path=path)[0] == 200


def test_plain_http_gets_no_answer_from_the_https_port(service: tuple[Harness, str]) -> None:
    _, url = service
    with pytest.raises(OSError):
        urllib.request.urlopen(url.replace("https://", "http://") + "/healthz", timeout=10)


def test_debug_compare_needs_credentials_and_answers_once_per_period(pki: Pki) -> None:
    h, url = served(pki)
    try:
        assert call(url, pki, path="debug/compare", body={})[0] == 401
        status, answer, _ = call(url, pki, client=pki.scheduler, path="debug/compare", body={})
        assert (status, answer) == (200, {})
        status, answer, headers = call(
            url, pki, client=pki.scheduler, path="debug/compare", body={}
        )
        assert status == 429
        assert answer["Error"].startswith(f"one compare per {COMPARE_PERIOD:g} s: retry in")
        assert 1 <= int(headers["Retry-After"]) <= COMPARE_PERIOD
    finally:
        h.service.stop()


# ---- /bind binds only what this service placed --------------------------------------------


def bind(url: str, pki: Pki, pod: dict[str, Any], node: str, uid: str | None = None) -> Any:
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "Node": node}
    if uid != "":
        body["PodUID"] = meta["uid"] if uid is None else uid
    return call(url, pki, client=pki.scheduler, path="bind", body=body)[:2]


def filter_(url: str, pki: Pki, pod: dict[str, Any], nodes: list[str]) -> list[str]:
    body = {"Pod": pod, "NodeNames": nodes}
    status, answer, _ = call(url, pki, client=pki.scheduler, body=body)
    assert status == 200, answer
    return list(answer["NodeNames"] or [])


def unbound(h: Harness, name: str) -> bool:
    return h.api.get_pod("ns", name)["spec"].get("nodeName") is None


def test_a_bind_needs_the_pods_uid_and_the_live_pods_uid(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    pod = h.api.get_pod("ns", "p")
    assert filter_(url, pki, pod, ["n0", "n1"]) == ["n0", "n1"]
    status, answer = bind(url, pki, pod, "n0", uid="")
    assert status == 400 and "PodUID is required" in answer["Error"]
    status, answer = bind(url, pki, pod, "n0", uid="uid-of-an-older-p")
    assert (status, answer) == (
        403,
        {"Error": "bind ns/p to n0: the cluster's pod has another UID"},
    )
    assert unbound(h, "p")
    assert bind(url, pki, pod, "n0") == (200, {"Error": ""})
    assert h.api.get_pod("ns", "p")["spec"]["nodeName"] == "n0"


def test_a_bind_to_a_node_that_did_not_pass_the_filter_is_refused(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    pod = h.api.get_pod("ns", "p")
    status, answer = bind(url, pki, pod, "n1")
    assert status == 403
    assert answer["Error"].endswith("the node did not pass this service's filter for the pod")
    assert filter_(url, pki, pod, ["n0"]) == ["n0"]
    status, answer = bind(url, pki, pod, "n1")
    assert status == 403, "n1 was not a candidate of the pod's last filter"
    assert bind(url, pki, pod, "a-node-the-caller-names")[0] == 403
    assert unbound(h, "p")
    # Once the filter is older than the gang TTL (60 s), its passes are forgotten.
    h.clock.now += 61
    assert bind(url, pki, pod, "n0")[0] == 403
    assert unbound(h, "p")


def test_a_bind_of_another_schedulers_pod_is_refused(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    for name, scheduler in (("theirs", "default-scheduler"), ("unset", None)):
        pod = pod_object("ns", name, None, 2)
        if scheduler is None:
            del pod["spec"]["schedulerName"]  # the API server's default: default-scheduler
        else:
            pod["spec"]["schedulerName"] = scheduler
        h.api.put("Pod", pod)
        pod = h.api.get_pod("ns", name)
        assert filter_(url, pki, pod, ["n0"]) == ["n0"]
        status, answer = bind(url, pki, pod, "n0")
        assert status == 403
        assert answer["Error"] == (
            f"bind ns/{name} to n0: the pod is for scheduler 'default-scheduler', not ours"
        )
        assert unbound(h, name)


def test_a_bind_of_a_pod_asking_no_npus_is_refused(service: tuple[Harness, str], pki: Pki) -> None:
    h, url = service
    plain = pod_object("ns", "web", None, 0)
    plain["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    init_only = pod_object("ns", "init", None, 0)
    init_only["spec"]["initContainers"] = [
        {"name": "i", "resources": {"limits": {"huawei.com/Ascend910": "2"}}}
    ]
    for pod in (plain, init_only):
        h.api.put("Pod", pod)
        live = h.api.get_pod("ns", pod["metadata"]["name"])
        filter_(url, pki, live, ["n0"])  # a pod asking no NPUs passes everywhere
        status, answer = bind(url, pki, live, "n0")
        assert status == 403
        assert answer["Error"].endswith("the pod asks no NPUs of its containers")
        assert unbound(h, pod["metadata"]["name"])


# ---- the verbs decide from the cluster's pod: a forged body gains nothing -----------------


def constrain_nodes(h: Harness, **spec: Any) -> None:
    """n0 labelled zone=a, n1 zone=b and ``spec`` (its taints), as the watches see them."""
    for name, zone in (("n0", "a"), ("n1", "b")):
        node = h.api.get_node(name)
        node["metadata"]["labels"]["zone"] = zone
        if name == "n1":
            node["spec"] = {**(node.get("spec") or {}), **spec}
        h.api.put("Node", node)
    facts = h.extender.state.fits
    seen = pod_constraints({"spec": {"nodeSelector": {"zone": "a"}}})
    assert wait_for(lambda: bool(facts.misfit(seen, "n1")) and facts.misfit(seen, "n0") == "", 10)


def tenant_pod(h: Harness, name: str, **spec: Any) -> dict[str, Any]:
    """Another tenant's pending NPU pod of our profile, with its constraints ``spec``."""
    pod = pod_object("ns", name, None, 2)
    pod["spec"].update(spec)
    h.api.put("Pod", pod)
    return h.api.get_pod("ns", name)


def filter_answer(url: str, pki: Pki, pod: dict[str, Any], nodes: list[str]) -> Any:
    status, answer, _ = call(url, pki, client=pki.scheduler, body={"Pod": pod, "NodeNames": nodes})
    assert status == 200, answer
    return answer


SELECTED = "node(s) didn't match Pod's node affinity/selector (nodeSelector zone=a)"
TAINTED = "node(s) had untolerated taint {dedicated: infer}"


def test_a_forged_filter_body_off_the_pods_node_selector_binds_nothing(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """The audit's attack: a stolen certificate's /filter sends the tenant's pod without its
    nodeSelector, listing a node outside it, then /bind there. The filter reads the cluster's
    pod: the node fails it, unresolvable, and the bind is refused; the honest call still
    places the pod where its selector allows."""
    h, url = service
    constrain_nodes(h)
    pod = tenant_pod(h, "tenant", nodeSelector={"zone": "a"})
    forged = copy.deepcopy(pod)
    del forged["spec"]["nodeSelector"]
    answer = filter_answer(url, pki, forged, ["n1"])
    assert answer["NodeNames"] == []
    assert answer["FailedAndUnresolvableNodes"] == {"n1": SELECTED}
    status, refused = bind(url, pki, pod, "n1")
    assert (status, refused) == (403, {"Error": f"bind ns/tenant to n1: {SELECTED}"})
    assert unbound(h, "tenant")
    # Honest callers see no change: kube-scheduler sends only the nodes its NodeAffinity
    # passed, and even both, n1 is kept out.
    assert filter_(url, pki, pod, ["n0", "n1"]) == ["n0"]
    assert bind(url, pki, pod, "n0") == (200, {"Error": ""})
    assert h.api.get_pod("ns", "tenant")["spec"]["nodeName"] == "n0"


def test_a_forged_toleration_binds_nothing_to_a_tainted_node(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    taint = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    constrain_nodes(h, taints=[taint])
    pod = tenant_pod(h, "tenant")
    forged = copy.deepcopy(pod)
    forged["spec"]["tolerations"] = [{"operator": "Exists"}]  # tolerates everything
    answer = filter_answer(url, pki, forged, ["n1"])
    assert (answer["NodeNames"], answer["FailedAndUnresolvableNodes"]) == ([], {"n1": TAINTED})
    status, refused = bind(url, pki, pod, "n1")
    assert (status, refused) == (403, {"Error": f"bind ns/tenant to n1: {TAINTED}"})
    assert unbound(h, "tenant")
    # A pod that does tolerate it goes there.
    tolerates = {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}
    tolerating = tenant_pod(h, "tolerating", tolerations=[tolerates])
    assert filter_(url, pki, tolerating, ["n1"]) == ["n1"]
    assert bind(url, pki, tolerating, "n1") == (200, {"Error": ""})


def test_a_forged_body_of_another_uid_or_no_live_pod_passes_nowhere(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    pod = h.api.get_pod("ns", "p")
    impostor = copy.deepcopy(pod)
    impostor["metadata"]["uid"] = "uid-of-the-attackers-making"
    answer = filter_answer(url, pki, impostor, ["n0", "n1"])
    reason = "the cluster's pod ns/p has another UID"
    assert (answer["NodeNames"], answer["FailedAndUnresolvableNodes"]) == (
        [],
        {"n0": reason, "n1": reason},
    )
    ghost = pod_object("ns", "ghost", None, 2)
    answer = filter_answer(url, pki, ghost, ["n0"])
    assert answer["FailedAndUnresolvableNodes"] == {"n0": "the pod ns/ghost is not in the cluster"}
    # A body asking more chips than the cluster's pod, or none, decides nothing either: the
    # cluster's pod asks 2, and that is what passes (and what prioritize scores).
    greedy = copy.deepcopy(pod)
    greedy["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = "16"
    assert filter_(url, pki, greedy, ["n0", "n1"]) == ["n0", "n1"]


def test_a_bind_to_a_node_relabelled_off_the_pods_selector_after_its_filter_is_refused(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """``/bind`` checks the live pod's constraints again, beside the filter's pass."""
    h, url = service
    pod = tenant_pod(h, "tenant", nodeSelector={"zone": "a"})
    constrain_nodes(h)
    assert filter_(url, pki, pod, ["n0"]) == ["n0"]
    node = h.api.get_node("n0")
    node["metadata"]["labels"]["zone"] = "c"
    h.api.put("Node", node)
    constraints = pod_constraints(pod)
    assert wait_for(lambda: bool(h.extender.state.fits.misfit(constraints, "n0")), 10)
    status, refused = bind(url, pki, pod, "n0")
    assert (status, refused) == (403, {"Error": f"bind ns/tenant to n0: {SELECTED}"})
    assert unbound(h, "tenant")


def test_volcanos_verbs_decide_from_the_cluster_pod_too(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """The token's verbs: a forged task pod (its nodeSelector taken off) is neither admitted
    by ``/volcano/predicate`` nor given chips by ``/volcano/allocateFunc`` off its selector."""
    h, url = service
    constrain_nodes(h)
    pod = tenant_pod(h, "tenant", nodeSelector={"zone": "a"}, schedulerName="volcano")
    forged = copy.deepcopy(pod)
    del forged["spec"]["nodeSelector"]
    task = {"Pod": forged, "NodeName": "n1", "Status": 1}
    body = {"task": task, "node": {"Name": "n1"}}
    status, answer, _ = call(url, pki, path="volcano/predicate", body=body, headers=BEARER)
    assert (status, answer) == (200, {"status": SELECTED, "code": 3})
    status, answer, _ = call(
        url, pki, path="volcano/allocateFunc", body={"task": task}, headers=BEARER
    )
    assert (status, answer) == (200, {"errorMessage": f"allocate ns/tenant on n1: {SELECTED}"})
    assert "huawei.com/Ascend910" not in h.api.get_pod("ns", "tenant")["metadata"]["annotations"]


# ---- starting: an authentication mode, or --insecure said out loud ------------------------


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Path]:
    api = LoopbackApiServer(MemoryCluster())
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig(api.start()))
    yield config
    api.stop()


def serve(config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "scheduler_core", "serve", "--kube", "kubeconfig"]
    command += ["--kubeconfig", str(config), "--listen", "127.0.0.1:0", *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_service_refuses_to_start_without_an_authentication_mode(loopback: Path) -> None:
    done = serve(loopback)
    assert done.returncode == 2
    assert done.stderr == (
        "error: the verbs need an authentication mode: --client-ca-file with "
        "--client-allowed-names, or --token-file (with TLS); --insecure serves them to anyone "
        "who reaches the port\n"
    )


def test_a_token_over_plain_http_is_refused_at_start(loopback: Path, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    done = serve(loopback, "--token-file", str(token))
    assert done.returncode == 2
    assert done.stderr.startswith("error: --token-file needs TLS")
    assert done.stderr.count("\n") == 1


def test_a_client_ca_without_allowed_names_is_refused_at_start(loopback: Path, pki: Pki) -> None:
    tls = ["--tls-cert-file", str(pki.server.cert), "--tls-private-key-file", str(pki.server.key)]
    done = serve(loopback, *tls, "--client-ca-file", str(pki.ca))
    assert done.returncode == 2
    assert done.stderr.startswith("error: --client-ca-file and --client-allowed-names go together")
    done = serve(loopback, *tls, "--client-ca-file", str(pki.ca), "--client-allowed-names", "*")
    assert done.returncode == 2
    assert "--client-allowed-names: expected comma-separated names (no '*'" in done.stderr


def test_insecure_serves_the_verbs_to_anyone_and_says_so_once(
    loopback: Path, tmp_path: Path
) -> None:
    port = free_port()
    command = service_command(
        loopback.read_text().split("server: '")[1].split("'")[0], tmp_path, port
    )
    assert "--insecure" in command
    log = tmp_path / "log"
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=output, text=True)
    try:
        assert wait_for(
            lambda: ready(f"http://127.0.0.1:{port}") or process.poll() is not None, timeout=60
        ), log.read_text()
        assert process.poll() is None, log.read_text()
        body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "ns"}}, "NodeNames": []})
        request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=body.encode())
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
    warnings = [line for line in log.read_text().splitlines() if "INSECURE" in line]
    assert len(warnings) == 1, log.read_text()
    assert json.loads(warnings[0])["level"] == "warning"
    assert "open to anyone who reaches the port" in warnings[0]
