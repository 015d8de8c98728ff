"""The HTTP servers under requests no scheduler sends: oversized, slow, idle, malformed."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from infra.http import HttpServer, Limits, Response
from scheduler_core.service.server import SchedulerService
from simulation.cluster import wait_for
from tests.integration.test_extender import Harness, pending
from tests.unit.helpers import metric


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[SchedulerService, str]]:
    h = Harness(2)
    url = h.service.start()
    pending(h.api, "p", 2)
    yield h.service, url
    h.service.stop()


def post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())


def raw(url: str, text: bytes) -> bytes:
    """Send raw bytes on a new connection; what comes back until the server closes it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(text)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
        return received


POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}


@pytest.mark.parametrize(
    ("verb", "body"),
    [
        ("filter", {"Pod": "x"}),
        ("filter", {"Pod": POD, "NodeNames": 5}),
        ("filter", {"Pod": POD, "NodeNames": [1, 2]}),
        ("filter", {}),
        ("prioritize", {"Pod": [], "NodeNames": ["n0"]}),
        ("prioritize", {"NodeNames": ["n0"]}),
        ("bind", {"PodName": 5, "PodNamespace": "ns", "Node": "n0"}),
        ("bind", {}),
        ("volcano/predicate", {"task": "x", "node": {"Name": "n0"}}),
        ("volcano/predicate", {"task": {"Pod": POD}, "node": {"Name": 7}}),
        ("volcano/prioritize", {"task": {"Pod": POD}, "nodes": "n0"}),
        ("volcano/prioritize", {"task": {"Pod": POD}, "nodes": [5]}),
        ("volcano/allocateFunc", {"task": {"Pod": 3}}),
        ("volcano/deallocateFunc", {"task": []}),
        ("volcano/jobEnqueueable", {"job": {"TotalRequest": {"ScalarResources": []}}}),
    ],
)
def test_every_wrongly_shaped_body_gets_400_and_a_one_line_json_error(
    service: tuple[SchedulerService, str], verb: str, body: dict[str, Any]
) -> None:
    _, url = service
    status, answer = post(f"{url}/{verb}", json.dumps(body).encode())
    assert status == 400, answer
    assert set(answer) == {"Error"} and answer["Error"] and "\n" not in answer["Error"]


def test_a_body_over_the_limit_is_refused_with_413_unread(
    service: tuple[SchedulerService, str],
) -> None:
    _, url = service
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 40000000\r\n\r\n"
    answer = raw(url, head + b"[" * 1000)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert b'"Error": "the body is 40000000 bytes (at most 8388608)"' in answer


def test_an_unknown_verb_is_404_and_never_a_metric_label(
    service: tuple[SchedulerService, str],
) -> None:
    svc, url = service
    for path in ("/nothing", '/bad"verb', "/volcano/nothing"):
        status, answer = post(f"{url}{path}", b"{}")
        assert status == 404 and "no verb" in answer["Error"]
    text = svc.metrics.text()
    assert metric(text, "ascend_scheduler_requests_total", verb="nothing") is None
    assert 'bad"verb' not in text and "bad\\\\" not in text


def slow_server(limits: Limits, seen: list[str]) -> tuple[HttpServer, str]:
    def echo(path: str, body: bytes) -> Response:
        seen.append(path)
        return Response.json(200, {"length": len(body)})

    def broken(path: str) -> Response:
        raise RuntimeError("a bug")

    server = HttpServer("limited", broken, echo, limits)
    return server, server.start("127.0.0.1", 0)


def test_a_body_shorter_than_announced_is_closed_after_the_timeout() -> None:
    seen: list[str] = []
    server, url = slow_server(Limits(timeout=0.3), seen)
    try:
        answer = raw(url, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort")
        assert answer == b"" and seen == [], "closed, and the handler never ran"
    finally:
        server.stop()


def test_stopping_ends_the_connections_a_caller_keeps_alive_between_calls() -> None:
    # kube-scheduler's Go transport keeps its extender connections open: a stopping service
    # must not wait for the caller to hang up (it waited out the 30 s idle timeout).
    seen: list[str] = []
    server, url = slow_server(Limits(keep_alive=60), seen)
    host, port = url.removeprefix("http://").split(":")
    kept = http.client.HTTPConnection(host, int(port), timeout=10)
    kept.request("POST", "/filter", body=b"{}")
    assert json.loads(kept.getresponse().read()) == {"length": 2}
    assert server.open_connections == 1
    server.stop()
    assert kept.sock is not None
    assert kept.sock.recv(1) == b"", "the kept-alive one ended"
    assert server.open_connections == 0
    kept.close()


def test_connections_beyond_the_limit_close_an_idle_one_and_the_newcomer_is_answered() -> None:
    # Idle connections cost no thread: beyond max_connections the one that matters least
    # (here: the oldest that never sent a request) is closed, and the newcomer served.
    seen: list[str] = []
    server, url = slow_server(Limits(max_connections=3, workers=2), seen)
    host, port = url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    try:
        assert wait_for(lambda: server.open_connections == 3)
        call = b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
        for _ in range(3):
            assert raw(url, call).startswith(b"HTTP/1.1 200"), "the newcomer is answered"
        assert idle[0].recv(1) == b"", "the oldest idle connection was closed for it"
        assert serving() <= 2, "the handlers' threads stay bounded"
    finally:
        for connection in idle:
            connection.close()
        server.stop()


def serving() -> int:
    """Threads of the limited server that run handlers."""
    return sum(t.name.startswith("limited_") for t in threading.enumerate())


def test_a_failing_handler_answers_500_with_a_json_error_not_a_dropped_connection() -> None:
    server, url = slow_server(Limits(), [])
    try:
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(f"{url}/anything", timeout=10)
        assert failed.value.code == 500
        assert "internal error" in json.loads(failed.value.read())["Error"]
    finally:
        server.stop()
