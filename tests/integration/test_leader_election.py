"""Two replicas of the scheduler service elect a leader on a Lease: both are ready while their
view is fresh, only the leader answers the verbs (``/leader`` says which) and labels its pod
for the Service; when it stops, it takes the label off and releases the Lease, and the standby
takes over; a stream of binds across the takeover places every pod with no chip held twice."""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from contract.objects import Obj
from infra.kube.port import KubeError, WatchEvent
from infra.leader import Timing, from_micro_time
from scheduler_core.__main__ import main
from scheduler_core.service.election import LEADER_LABEL, Election, PodRef
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import add_node

FAST = Timing(lease=3, renew_deadline=2, retry=1)


class Replica:
    """One replica's own view of the API server: cut it and the replica is gone for it;
    pause its Lease calls and its election stands still (as in a process paused past its
    lease, but harsher: its HTTP server keeps answering); break them and its election raises
    what no Kubernetes error type covers."""

    def __init__(self, store: MemoryCluster) -> None:
        self._store = store
        self.cut = False
        self.broken = False
        self.labels_refused = False
        self.label_writes = 0  # tried
        self.running = threading.Event()
        self.running.set()

    def __getattr__(self, call: str) -> Any:
        method = getattr(self._store, call)

        def through(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                raise KubeError(f"{call}: this replica lost the API server")
            if call.endswith("_lease"):
                self.running.wait()
                if self.broken:
                    raise RuntimeError(f"{call}: an election bug")
            if call == "patch_pod_labels":
                self.label_writes += 1
                if self.labels_refused:
                    raise KubeError(f"{call}: HTTP 403 Forbidden")
            return method(*args, **kwargs)

        return through

    def watch_pods(self, node: str, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        return iter(())


def post(url: str, verb: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(f"{url}/{verb}", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())
    except urllib.error.URLError:
        return 0, {}  # the replica is gone: the Service routes nothing there


def answers(url: str, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/{path}", timeout=5) as answer:
            return bool(answer.status == 200)
    except urllib.error.URLError:  # 503, or gone
        return False


def leads(url: str) -> bool:
    return answers(url, "leader")


def ready(url: str) -> bool:
    return answers(url, "readyz")


def start_replica(
    store: MemoryCluster, name: str, pod: PodRef | None = None, gateway: Replica | None = None
) -> tuple[Replica, SchedulerService, str]:
    gateway = gateway or Replica(store)
    service = SchedulerService(
        gateway,
        Extender(gateway),
        refresh_period=0.2,
        clock=lambda: 1_700_000_000.0,
        election=Election(timing=FAST, holder=f"replica-{name}", pod=pod),
    )
    return gateway, service, service.start()


@pytest.fixture
def replicas() -> Iterator[tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]]]:
    store = MemoryCluster()
    for i in range(4):
        add_node(store, f"n{i}")
    started = [start_replica(store, name) for name in ("a", "b")]
    yield store, started
    for gateway, service, _ in started:
        gateway.running.set()
        service.stop()


def one_leader(urls: list[str]) -> int:
    """Which replica leads, once exactly one does."""
    assert wait_for(lambda: sum(leads(u) for u in urls) == 1), "one leader, one standby"
    return next(i for i, url in enumerate(urls) if leads(url))


def schedule(urls: list[str], pod: Obj) -> str:
    """kube-scheduler's calls through the Service: to whichever replica answers (leads)."""
    names = [f"n{i}" for i in range(4)]
    while True:
        assert wait_for(lambda: any(leads(u) for u in urls)), "a leader within the lease"
        for url in urls:
            status, answer = post(url, "filter", {"Pod": pod, "NodeNames": names})
            if status != 200:
                continue  # not the leader, or gone: the Service would not route here
            node = answer["NodeNames"][0]
            meta = pod["metadata"]
            binding = {"PodName": meta["name"], "PodNamespace": "ns", "PodUID": meta["uid"]}
            status, bound = post(url, "bind", {**binding, "Node": node})
            if status == 200 and not bound["Error"]:
                return str(node)


def test_the_standby_takes_over_within_the_lease_and_no_chip_is_held_twice(
    replicas: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    store, started = replicas
    urls = [url for _, _, url in started]
    leader = one_leader(urls)
    standby = 1 - leader
    status, answer = post(urls[standby], "filter", {"Pod": {"metadata": {}}, "NodeNames": []})
    assert status == 503 and "does not lead" in answer["Error"]
    # ... and ends the caller's kept-alive connection, so that its next call goes through the
    # Service again (to the leader) rather than back to this replica.
    host, port = urls[standby].removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", "/filter", body=b'{"Pod": {"metadata": {}}, "NodeNames": []}')
    refused = connection.getresponse()
    refused.read()
    assert (refused.status, refused.getheader("Connection"), refused.will_close) == (
        503,
        "close",
        True,
    )
    connection.close()
    for i in range(16):  # a stream of binds: the leader stops in the middle of it
        if i == 8:
            started[leader][0].cut = True  # the leader's pod is gone
            started[leader][1].stop()
        store.put("Pod", pod_object("ns", f"p{i:02d}", None, 2))
        schedule(urls, store.get_pod("ns", f"p{i:02d}"))
    assert leads(urls[standby])
    assert store.get_lease("kube-system", "ascend-npu-scheduler")["spec"]["holderIdentity"] == (
        f"replica-{'ab'[standby]}"
    )
    held: dict[tuple[str, str], str] = {}
    for pod in store.list_pods(None)[0]:
        node = pod["spec"]["nodeName"]
        for chip in pod["metadata"]["annotations"]["huawei.com/Ascend910"].split(","):
            assert (node, chip) not in held, f"{chip} on {node} twice"
            held[(node, chip)] = pod["metadata"]["name"]
    assert len(held) == 32, "every pod placed"


def test_a_replica_that_stops_gives_the_lease_up_and_ends_its_election(
    replicas: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    store, started = replicas
    urls = [url for _, _, url in started]
    leader = one_leader(urls)
    started[leader][1].stop()
    # Released, not left to expire: the standby takes it at its next try.
    assert wait_for(lambda: holder(store) == f"replica-{'ab'[1 - leader]}")
    started[1 - leader][1].stop()
    assert not any(t.name == "leader-election" for t in threading.enumerate())


def holder(store: MemoryCluster) -> str:
    return str(store.get_lease("kube-system", "ascend-npu-scheduler")["spec"]["holderIdentity"])


@pytest.mark.parametrize(
    "micro",
    [
        "2026-11-24T05:54:32.123456Z",
        "2026-11-24T05:54:32.123456+00:00",  # as the official client's models serialize
        "2026-11-24T05:54:32Z",
        "2026-11-24T07:54:32.123+02:00",
    ],
)
def test_a_lease_time_is_read_in_every_form_the_api_microtime_allows(micro: str) -> None:
    local = datetime.fromisoformat(from_micro_time(micro)).astimezone(UTC)
    assert local.replace(microsecond=0) == datetime(2026, 11, 24, 5, 54, 32, tzinfo=UTC)


def test_a_lease_written_with_an_offset_is_respected_then_taken_over_once_it_expires() -> None:
    store = MemoryCluster()
    add_node(store, "n0")
    now = datetime.now(UTC).isoformat()  # "+00:00", as the official client writes it
    store.put(
        "Lease",
        {
            "metadata": {"namespace": "kube-system", "name": "ascend-npu-scheduler"},
            "spec": {
                "holderIdentity": "gone",
                "leaseDurationSeconds": 3,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )
    _, service, url = start_replica(store, "a")
    try:
        status, _ = post(url, "filter", {"Pod": {"metadata": {}}, "NodeNames": []})
        assert status == 503, "the other holder's lease has not expired"
        assert ready(url), "ready all the same: its view is fresh"
        assert wait_for(lambda: leads(url)), "taken over once the lease expired"
        assert holder(store) == "replica-a"
        assert any(t.name == "leader-election" for t in threading.enumerate())
    finally:
        service.stop()


def test_a_replica_whose_election_fails_stops_deciding_until_it_leads_again(
    replicas: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    _, started = replicas
    urls = [url for _, _, url in started]
    assert wait_for(lambda: sum(leads(u) for u in urls) == 1)
    for gateway, _, _ in started:
        gateway.broken = True
    assert wait_for(lambda: not any(leads(u) for u in urls)), "no election, no leader"
    statuses = [post(url, "filter", {"Pod": {"metadata": {}}, "NodeNames": []})[0] for url in urls]
    assert statuses == [503, 503]
    for gateway, _, _ in started:
        gateway.broken = False
    assert wait_for(lambda: sum(leads(u) for u in urls) == 1), "the election runs again"


def test_a_leader_paused_past_its_lease_never_decides_beside_the_new_leader(
    replicas: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    store, started = replicas
    urls = [url for _, _, url in started]
    old = one_leader(urls)
    new = 1 - old
    store.put("Pod", pod_object("ns", "probe", None, 1))
    probe = {"Pod": store.get_pod("ns", "probe"), "NodeNames": ["n0"]}
    answered: dict[int, list[float]] = {old: [], new: []}

    def polled(condition: Callable[[], bool]) -> Callable[[], bool]:
        def check() -> bool:
            for i in (old, new):
                if post(urls[i], "filter", probe)[0] == 200:
                    answered[i].append(time.monotonic())
            return condition()

        return check

    assert polled(lambda: bool(answered[old]))(), "the leader decides"
    started[old][0].running.clear()  # its election stands still; its verbs still answer
    assert wait_for(polled(lambda: bool(answered[new]))), "the standby takes over"
    started[old][0].running.set()  # it wakes, still believing it leads
    elector = started[old][1].leader
    assert elector is not None
    assert wait_for(polled(lambda: not elector.leading.is_set())), "it learns it lost"
    for _ in range(20):
        polled(lambda: True)()
    assert max(answered[old]) < min(answered[new]), "never both at once"
    assert holder(store) == f"replica-{'ab'[new]}"


def test_a_choice_made_before_the_lease_was_lost_is_not_written_and_its_chips_come_back() -> None:
    store = MemoryCluster()
    add_node(store, "n0")
    extender = Extender(store)
    service = SchedulerService(store, extender, clock=lambda: 1_700_000_000.0)
    service.refresh()
    extender.state.fence = lambda: False
    store.put("Pod", pod_object("ns", "p", None, 8))
    binding = {"PodName": "p", "PodNamespace": "ns", "PodUID": "uid-ns-p", "Node": "n0"}
    pod = store.get_pod("ns", "p")
    assert extender.filter({"Pod": pod, "NodeNames": ["n0"]}).NodeNames == ["n0"]
    assert "no longer leads" in extender.bind(binding).Error
    assert store.get_pod("ns", "p")["spec"].get("nodeName") is None
    extender.state.fence = lambda: True
    assert extender.bind(binding).Error == "", "all 8 chips came back"


# ---- readiness and the leader label -------------------------------------------------------

KEY, VALUE = LEADER_LABEL


def scheduler_pod(store: MemoryCluster, name: str, labels: dict[str, str] | None = None) -> PodRef:
    store.put("Pod", pod_object("kube-system", name, "n0", 0, phase="Running", labels=labels))
    return PodRef("kube-system", name)


def label_of(store: MemoryCluster, pod: str) -> str | None:
    labels = store.get_pod("kube-system", pod)["metadata"].get("labels") or {}
    value = labels.get(KEY)
    return None if value is None else str(value)


@pytest.fixture
def labelled() -> Iterator[tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]]]:
    """Two replicas, each told its pod (``sched-a``, ``sched-b``) as the downward API tells it."""
    store = MemoryCluster()
    add_node(store, "n0")
    started = [start_replica(store, n, scheduler_pod(store, f"sched-{n}")) for n in ("a", "b")]
    yield store, started
    for gateway, service, _ in started:
        gateway.running.set()
        service.stop()


def test_both_are_ready_the_leader_alone_labelled_and_when_it_stops_label_and_lease_move(
    labelled: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    store, started = labelled
    urls = [url for _, _, url in started]
    leader = one_leader(urls)
    assert wait_for(lambda: all(ready(u) for u in urls)), "both Ready: either may be evicted"
    body = {"Pod": {"metadata": {}}, "NodeNames": []}
    assert post(urls[1 - leader], "filter", body)[0] == 503, "the standby decides nothing"
    pods = ["sched-a", "sched-b"]
    assert wait_for(lambda: label_of(store, pods[leader]) == VALUE), "the leader's pod labelled"
    assert label_of(store, pods[1 - leader]) is None
    started[leader][1].stop()  # SIGTERM: stop deciding, take the label off, release the Lease
    assert label_of(store, pods[leader]) is None, "taken off before it returns"
    assert store.get_lease("kube-system", "ascend-npu-scheduler")["spec"]["holderIdentity"] in (
        "",
        f"replica-{'ab'[1 - leader]}",
    ), "released, not left to expire"
    assert wait_for(lambda: label_of(store, pods[1 - leader]) == VALUE), "the other labels its own"
    assert leads(urls[1 - leader])


def test_a_label_left_on_the_pod_is_taken_off_by_a_replica_that_does_not_lead() -> None:
    store = MemoryCluster()
    add_node(store, "n0")
    now = datetime.now(UTC).isoformat()
    lease = {"holderIdentity": "other", "leaseDurationSeconds": 60}
    store.put(
        "Lease",
        {
            "metadata": {"namespace": "kube-system", "name": "ascend-npu-scheduler"},
            "spec": {**lease, "acquireTime": now, "renewTime": now},
        },
    )
    pod = scheduler_pod(store, "sched-a", {KEY: VALUE})  # left by a container that restarted
    _, service, url = start_replica(store, "a", pod)
    try:
        assert wait_for(lambda: label_of(store, "sched-a") is None), "taken off at start"
        assert ready(url) and not leads(url)
    finally:
        service.stop()


def test_a_label_write_that_fails_is_logged_once_and_retried_and_the_leader_still_decides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryCluster()
    add_node(store, "n0")
    refusing = Replica(store)
    refusing.labels_refused = True
    with caplog.at_level(logging.WARNING, logger="infra.leader"):
        _, service, url = start_replica(store, "a", scheduler_pod(store, "sched-a"), refusing)
    try:
        assert wait_for(lambda: leads(url))
        store.put("Pod", pod_object("ns", "p", None, 1))
        probe = {"Pod": store.get_pod("ns", "p"), "NodeNames": ["n0"]}
        assert post(url, "filter", probe)[0] == 200, "it decides without its label"
        tries = refusing.label_writes
        assert wait_for(lambda: refusing.label_writes >= tries + 2), "tried again, a period on"
        refused = [r for r in caplog.records if "leader label not written" in r.message]
        assert len(refused) == 1, "one line per error, not one per try"
        refusing.labels_refused = False
        assert wait_for(lambda: label_of(store, "sched-a") == VALUE), "written once allowed"
    finally:
        service.stop()


def test_outside_a_pod_no_label_is_written_and_that_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryCluster()
    add_node(store, "n0")
    with caplog.at_level(logging.WARNING, logger="scheduler_core.service.server"):
        _, service, url = start_replica(store, "a")
    try:
        assert wait_for(lambda: leads(url))
        said = [r for r in caplog.records if "POD_NAME and POD_NAMESPACE are not set" in r.message]
        assert len(said) == 1
    finally:
        service.stop()


@pytest.mark.parametrize(
    ("environ", "pod"),
    [
        ({"POD_NAME": "s-1", "POD_NAMESPACE": "kube-system"}, PodRef("kube-system", "s-1")),
        ({}, None),
    ],
)
def test_the_pod_comes_from_the_downward_api(environ: dict[str, str], pod: PodRef | None) -> None:
    assert PodRef.from_environment(environ) == pod


def test_a_pod_name_without_its_namespace_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POD_NAME", "s-1")
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    argv = ["serve", "--insecure", "--leader-elect=true", "--kube=kubeconfig", "--kubeconfig=x"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error == "error: POD_NAMESPACE is not set: set POD_NAME and POD_NAMESPACE together"
