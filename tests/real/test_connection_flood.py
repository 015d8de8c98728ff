"""Idle connections do not stop scheduling: while hundreds of sockets that never send a
request (no TLS handshake, no credentials) are held against the service's verbs port and its
probes port, and reopened as the service closes them, the real kube-scheduler's calls over
HTTPS are answered (NPU pods are placed with their chips) and every probe on a new connection
is answered, as the kubelet's would be (security.md: a socket flood that stopped the
scheduler)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from contract.annotations import CHIPS_ANNOTATION
from testbed.cluster import Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import running, wait_until

IDLE = 300  # sockets held against each port: more than the old server's 128 connections
FLOOD_SECONDS = 240.0  # the flood stops by itself however the test ends
PODS = 6


@pytest.fixture(scope="module")
def cluster() -> Iterator[Deployed]:
    with running("flood") as plane, deployed(plane, plane.workdir, nodes=2) as cluster:
        yield cluster


class Flood:
    """``count`` idle TCP connections to ``url``'s host and port, each reopened when the
    server closes it; loopback only, bounded in count and time."""

    def __init__(self, url: str, count: int) -> None:
        parts = urlsplit(url)
        assert parts.hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
        self._address = (parts.hostname, parts.port or 443)
        self._count = count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="flood", daemon=True)
        self.open = 0
        self.opened = 0

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _hold(self) -> None:
        held: list[socket.socket] = []
        deadline = time.monotonic() + FLOOD_SECONDS
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                alive = []
                for sock in held:  # one the server closed reads b"" (or fails)
                    try:
                        if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                            sock.close()
                            continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        sock.close()
                        continue
                    alive.append(sock)
                held = alive
                while len(held) < self._count and not self._stop.is_set():
                    try:
                        held.append(socket.create_connection(self._address, timeout=2))
                        self.opened += 1
                    except OSError:
                        break  # refused or backlog full: try again on the next round
                self.open = len(held)
                self._stop.wait(0.2)
        finally:
            for sock in held:
                sock.close()
            self.open = 0


def probe(url: str) -> int:
    """``/healthz`` on a new connection, as the kubelet probes (no keep-alive)."""
    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as answer:
        return int(answer.status)


def test_kube_scheduler_and_the_probes_are_answered_through_a_flood_of_idle_sockets(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    ns = admin.ensure_namespace("flooded")
    with Flood(cluster.service_url, IDLE) as verbs, Flood(cluster.metrics_url, IDLE) as probes:
        wait_until(
            lambda: verbs.open >= IDLE // 2 and probes.open >= IDLE // 2,
            60,
            "the flood holding its sockets",
        )
        for i in range(PODS):
            pod = npu_pod(2, {"app": "flooded"})
            pod["metadata"]["name"] = f"train-{i}"
            admin.create(f"/api/v1/namespaces/{ns}/pods", pod)
        answered = 0
        for _ in range(20):
            with contextlib.suppress(OSError):
                answered += probe(cluster.metrics_url) == 200
        placed = wait_pods(cluster.plane, ns, "app=flooded", PODS)
        # The flood was there throughout: each of its sockets still held or reopened.
        assert verbs.opened >= IDLE and probes.opened >= IDLE
    assert answered == 20, f"{answered} of 20 probes answered during the flood"
    # Every call kube-scheduler made was answered: no scheduling attempt failed on the
    # extender (an unanswered /filter or /bind names its URL: 'Post "https://…/filter": EOF').
    # Attempts refused before the nodes turned Ready (their not-ready taint) are not its.
    events = admin.get(f"/api/v1/namespaces/{ns}/events")["items"]
    address = urlsplit(cluster.service_url).netloc
    failed = [
        e["message"]
        for e in events
        if e.get("reason") == "FailedScheduling" and address in e.get("message", "")
    ]
    assert not failed, failed
    for pod in placed:
        assert len(pod["metadata"]["annotations"][CHIPS_ANNOTATION].split(",")) == 2
