"""A fake Kubernetes API server on loopback HTTP, for testing the real client adapter.

It speaks the REST the agent and the scheduler use, backed by ``MemoryCluster``: pods, nodes
and ConfigMaps listed (``limit`` / ``continue``, label and field selectors) and watched
(chunked streams from a resourceVersion with ``timeoutSeconds`` and bookmarks; a version
older than the history is an ERROR event with code 410, as a real API server sends it); pods
(create, get, bind, delete with a UID precondition, merge / strategic-merge patches of
metadata with a resourceVersion precondition, status patches), ConfigMaps and Leases (get,
create, replace with precondition), nodes (get, patch) and events (create). Errors are
Kubernetes ``Status`` objects with the real codes (400, 404, 409, 410, 422). It counts
requests and the bytes it sends, for the API budget. Stopping it makes the address refuse
connections, like an API server that is down.

``python -m simulation.loopback --nodes N`` runs it as a process of its own over a fresh
store holding N 8-chip 910 nodes; it prints ``ready <url>`` and stops when stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from contract.chip_names import RESOURCE_NAME
from contract.objects import Obj
from infra.kube.port import Conflict, Gone, KubeError, NotFound, Selection
from simulation.memory import MemoryCluster
from simulation.selectors import BadSelector

PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
COLLECTIONS = {"pods": "Pod", "nodes": "Node", "configmaps": "ConfigMap"}


class _BadRequest(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _one(query: dict[str, list[str]], name: str, default: str = "") -> str:
    return query.get(name, [default])[0]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # watches stream in chunks, as a real API server sends them
    # Headers and body go out as separate writes; with Nagle on, keep-alive requests wait
    # 40 ms for a delayed ACK.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.lock:
            self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read results, not access logs."""

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.server.count(len(data))

    def _body(self) -> Obj:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise _BadRequest(400, "BadRequest", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "BadRequest", "the body is not a JSON object")
        return body

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        store = self.server.store
        watching = _one(query, "watch", "false") in ("true", "1")
        resource = next((p for p in reversed(parts) if p in (*COLLECTIONS, "leases")), "")
        self.server.request("WATCH" if watching else method, resource)
        try:
            if parts[:3] == ["apis", "coordination.k8s.io", "v1"] and len(parts) >= 6:
                self._send(*self._lease(method, parts[4], parts[6:]))
                return
            if parts == ["apis"] and method == "GET":
                self._send(200, _api_groups(store.apis))
                return
            if parts[:1] == ["apis"] and len(parts) >= 4 and (parts[1], parts[2]) in store.apis:
                self._custom(method, f"/{parts[1]}/{parts[2]}", parts[3:], query, watching)
                return
            if parts[:2] != ["api", "v1"]:
                raise _BadRequest(404, "NotFound", f"{url.path} is not served")
            route = parts[2:]
            if method == "GET" and len(route) == 1 and route[0] in COLLECTIONS:
                self._collection(Selection(COLLECTIONS[route[0]]), query, watching)
                return
            if (
                method == "GET"
                and len(route) == 3
                and route[0] == "namespaces"
                and route[2] in ("pods", "configmaps")
            ):
                self._collection(Selection(COLLECTIONS[route[2]], route[1]), query, watching)
                return
            if len(route) >= 3 and route[0] == "namespaces":
                namespace, kind, rest = route[1], route[2], route[3:]
                self._send(*self._namespaced(method, namespace, kind, rest))
                return
            if route[:1] == ["nodes"] and len(route) == 2:
                if method == "GET":
                    self._send(200, store.get_node(route[1]))
                    return
                if method == "PATCH":
                    self._send(
                        200, store.patch_metadata("Node", "", route[1], self._metadata_patch()[0])
                    )
                    return
            raise _BadRequest(405, "MethodNotAllowed", f"{method} {url.path} is not served")
        except _BadRequest as bad:
            self._send(bad.code, _status(bad.code, bad.reason, str(bad)))
        except BadSelector as bad:
            self._send(400, _status(400, "BadRequest", str(bad)))
        except NotFound as missing:
            self._send(404, _status(404, "NotFound", str(missing)))
        except Gone as gone:
            self._send(410, _status(410, "Expired", str(gone)))
        except Conflict as conflict:
            self._send(409, _status(409, "Conflict", str(conflict)))
        except KubeError as failed:
            self._send(503, _status(503, "ServiceUnavailable", str(failed)))

    def _patch_type(self) -> None:
        kind = (self.headers.get("Content-Type") or "").split(";")[0]
        if kind not in PATCH_TYPES:
            raise _BadRequest(415, "UnsupportedMediaType", f"patch type {kind!r} is not supported")

    def _metadata_patch(self) -> tuple[dict[str, dict[str, str | None]], str, str]:
        """The patch's annotations and labels, and its resourceVersion and uid (each a
        precondition when set)."""
        self._patch_type()
        body = self._body()
        metadata = body.pop("metadata", {})
        if body or set(metadata) - {"annotations", "labels", "resourceVersion", "uid"}:
            raise _BadRequest(
                422, "Invalid", "the fake patches only metadata annotations and labels"
            )
        changes = {k: dict(v) for k, v in metadata.items() if k in ("annotations", "labels")}
        return changes, str(metadata.get("resourceVersion", "")), str(metadata.get("uid", ""))

    def _namespaced(
        self, method: str, namespace: str, kind: str, rest: list[str]
    ) -> tuple[int, Obj]:
        store = self.server.store
        if kind == "pods" and len(rest) == 1:
            if method == "GET":
                return 200, store.get_pod(namespace, rest[0])
            if method == "PATCH":
                changes, version, uid = self._metadata_patch()
                if uid and store.get_pod(namespace, rest[0])["metadata"].get("uid") != uid:
                    # The API server's answer: a uid cannot change (ValidateObjectMetaUpdate).
                    raise _BadRequest(422, "Invalid", "metadata.uid: field is immutable")
                return 200, store.patch_metadata("Pod", namespace, rest[0], changes, version)
            if method == "DELETE":
                body = self._body()
                uid = (body.get("preconditions") or {}).get("uid") or ""
                pod = store.get_pod(namespace, rest[0])
                store.delete_pod(namespace, rest[0], uid, body.get("gracePeriodSeconds"))
                return 200, pod
        if kind == "pods" and not rest and method == "POST":
            body = self._body()
            body.setdefault("metadata", {})["namespace"] = namespace
            return 201, store.create_pod(body)
        if kind == "pods" and rest[1:] == ["status"] and method == "PATCH":
            self._patch_type()
            status = self._body().get("status")
            if not isinstance(status, dict):
                raise _BadRequest(422, "Invalid", "a status patch carries status")
            return 200, store.patch_pod_status(namespace, rest[0], status)
        if kind == "pods" and rest[1:] == ["binding"] and method == "POST":
            body = self._body()
            meta = body.get("metadata") or {}
            target = (body.get("target") or {}).get("name", "")
            if not target:
                raise _BadRequest(422, "Invalid", "binding.target.name is required")
            store.bind_pod(
                namespace, rest[0], meta.get("uid", ""), target, meta.get("annotations") or {}
            )
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if kind == "configmaps" and len(rest) == 1 and method == "PATCH":
            self._patch_type()
            if self._body():
                raise _BadRequest(422, "Invalid", "the fake patches a ConfigMap only with {}")
            # The agent's read of its own DeviceInfo (KubeGateway.read_configmap_by_patch).
            return 200, store.read_configmap_by_patch(namespace, rest[0])
        if kind == "configmaps":
            served = self._object(
                method,
                namespace,
                rest,
                (store.get_configmap, store.create_configmap, store.update_configmap),
            )
            if served is not None:
                return served
        if kind == "events" and method == "POST" and not rest:
            return 201, store.create_event(namespace, self._body())
        raise _BadRequest(405, "MethodNotAllowed", f"{method} {kind} is not served")

    def _custom(
        self, method: str, api: str, route: list[str], query: dict[str, list[str]], watching: bool
    ) -> None:
        """Another API group's resource: ``<plural>[/<name>[/status]]`` (cluster-scoped) or
        ``namespaces/<ns>/<plural>[/<name>[/status]]``: list, watch, delete a collection;
        get, create, replace, delete one (its status replaced as the whole object here)."""
        store = self.server.store
        namespace = route[1] if route[0] == "namespaces" and len(route) >= 3 else ""
        rest = route[2:] if namespace else route
        kind = f"{rest[0]}.{api.strip('/').split('/')[0]}/{api.rsplit('/', 1)[1]}"
        if len(rest) == 1 and method == "GET":
            self._collection(Selection(kind, namespace), query, watching)
            return
        if len(rest) == 1 and method == "DELETE":
            what = Selection(
                kind, namespace, _one(query, "labelSelector"), _one(query, "fieldSelector")
            )
            store.delete_collection(what)
            self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
            return
        if len(rest) == 2 and method == "DELETE":
            gone = store.get_object(kind, namespace, rest[1])
            store.delete_object(kind, namespace, rest[1])
            self._send(200, gone)
            return
        if rest[2:] == ["status"] and method == "PUT":
            rest = rest[:2]
        calls = (
            lambda ns, name: store.get_object(kind, ns, name),
            lambda body: store.create_object(kind, body),
            lambda body: store.replace_object(kind, body),
        )
        served = self._object(method, namespace, rest[1:], calls)
        if served is None:
            raise _BadRequest(405, "MethodNotAllowed", f"{method} {api}/{'/'.join(route)}")
        self._send(*served)

    def _lease(self, method: str, namespace: str, rest: list[str]) -> tuple[int, Obj]:
        """``/apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>]``."""
        store = self.server.store
        served = self._object(
            method, namespace, rest, (store.get_lease, store.create_lease, store.update_lease)
        )
        if served is None:
            raise _BadRequest(405, "MethodNotAllowed", f"{method} leases is not served")
        return served

    def _object(
        self,
        method: str,
        namespace: str,
        rest: list[str],
        calls: tuple[Callable[[str, str], Obj], Callable[[Obj], Obj], Callable[[Obj], Obj]],
    ) -> tuple[int, Obj] | None:
        """GET, POST (create) or PUT (replace) of one namespaced object; None for others."""
        get, create, update = calls
        if method == "GET" and len(rest) == 1:
            return 200, get(namespace, rest[0])
        if method == "POST" and not rest:
            body = self._body()
            if namespace:
                body.setdefault("metadata", {})["namespace"] = namespace
            return 201, create(body)
        if method == "PUT" and len(rest) == 1:
            body = self._body()
            body.setdefault("metadata", {})["name"] = rest[0]
            if namespace:
                body["metadata"]["namespace"] = namespace
            return 200, update(body)
        return None

    def _collection(self, where: Selection, query: dict[str, list[str]], watching: bool) -> None:
        """A list (one page) or a watch stream of a collection."""
        what = Selection(
            where.kind, where.namespace, _one(query, "labelSelector"), _one(query, "fieldSelector")
        )
        store = self.server.store
        if not watching:
            limit = _one(query, "limit", "0")
            page = store.list_page(
                what, int(limit) if limit.isdigit() else 0, _one(query, "continue")
            )
            self._send(
                200,
                {
                    "kind": f"{what.kind}List",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": page.resource_version, "continue": page.next},
                    "items": page.items,
                },
            )
            return
        timeout = float(_one(query, "timeoutSeconds", "1800"))
        version = _one(query, "resourceVersion")
        bookmarks = _one(query, "allowWatchBookmarks", "false") in ("true", "1")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.server.lock:
            self.server.watchers.add(self.connection)
        try:
            for change in store.watch(what, version, timeout, until=self.server.stopping):
                if change.type != "BOOKMARK" or bookmarks:
                    self._chunk({"type": change.type, "object": change.object})
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        except KubeError as failed:
            code, reason = (
                (410, "Expired") if isinstance(failed, Gone) else (503, "ServiceUnavailable")
            )
            self._chunk({"type": "ERROR", "object": _status(code, reason, str(failed))})
            self.wfile.write(b"0\r\n\r\n")
        finally:
            with self.server.lock:
                self.server.watchers.discard(self.connection)

    def _chunk(self, event: Obj) -> None:
        line = (json.dumps(event) + "\n").encode()
        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        self.wfile.flush()
        self.server.count(len(line))

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # many agents' watches and calls arrive together

    def __init__(self, address: tuple[str, int], store: MemoryCluster) -> None:
        super().__init__(address, _Handler)
        self.store = store
        self.lock = threading.Lock()
        self.watchers: set[socket.socket] = set()
        self.connections: set[socket.socket] = set()  # kept alive between requests too
        self.stopping = threading.Event()
        self.requests: Counter[str] = Counter()  # "GET pods", "WATCH nodes", "PUT configmaps"…
        self.bytes_sent = 0  # response bodies and watch events

    def request(self, method: str, resource: str) -> None:
        with self.lock:
            self.requests[f"{method} {resource}".strip()] += 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A caller that went away mid-request (a process stopped): nothing to report."""

    def count(self, sent: int) -> None:
        with self.lock:
            self.bytes_sent += sent

    def drop(self, everyone: bool) -> None:
        """Shut the watch streams' connections (every connection, when ``everyone``)."""
        with self.lock:
            for connection in self.connections if everyone else self.watchers:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


class LoopbackApiServer:
    """``start()`` serves on 127.0.0.1 (a free port the first time, the same port after a
    ``stop()``, so a client sees the API server go down and come back)."""

    def __init__(self, store: MemoryCluster) -> None:
        self.store = store
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: Counter[str] = Counter()  # of the runs before the current one
        self._bytes_before = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def traffic(self) -> tuple[Counter[str], int]:
        """Requests by method and resource, and bytes sent, since the first start."""
        server = self._server
        if server is None:
            return Counter(self.requests), self._bytes_before
        with server.lock:
            return self.requests + server.requests, self._bytes_before + server.bytes_sent

    def start(self) -> str:
        self._server = _Server(("127.0.0.1", self.port), self.store)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.url

    def drop_connections(self) -> None:
        """Break every open watch stream, as a load balancer or a restarting API server
        replica does, while the server keeps answering."""
        if self._server is not None:
            self._server.drop(everyone=False)

    def stop(self) -> None:
        if self._server is not None:
            self.requests, self._bytes_before = self.traffic()
            self._server.stopping.set()
            self._server.store.wake(self._server.stopping)
            self._server.shutdown()
            self._server.server_close()
            self._server.drop(everyone=True)
            self._server = None


def _api_groups(served: set[tuple[str, str]]) -> Obj:
    """Discovery's ``APIGroupList`` of the custom API groups served."""
    groups: dict[str, list[str]] = {}
    for group, version in sorted(served):
        groups.setdefault(group, []).append(version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {
                    "groupVersion": f"{group}/{versions[0]}",
                    "version": versions[0],
                },
            }
            for group, versions in groups.items()
        ],
    }


def kubeconfig(url: str) -> str:
    """A kubeconfig for a plain-HTTP API server such as this one (tests, demos)."""
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: loopback\n"
        f"clusters: [{{name: loopback, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: anyone, user: {}}]\n"
        "contexts: [{name: loopback, context: {cluster: loopback, user: anyone}}]\n"
    )


ATLAS_800_LABELS = {
    "accelerator": "huawei-Ascend910",
    "accelerator-type": "module",
    "host-arch": "huawei-arm",
}


def node_object(i: int) -> Obj:
    """``node-<i>``, an 8-chip 910 server as its kubelet reports it (InternalIP
    192.168.0.<i+1>), labelled as Huawei's installation labels an Atlas 800 training server
    (the labels job samples select: MindCluster ``docs/*/installation`` node labels)."""
    chips = {RESOURCE_NAME: "8"}
    return {
        "metadata": {"name": f"node-{i:02d}", "labels": dict(ATLAS_800_LABELS)},
        "status": {
            "capacity": dict(chips),
            "allocatable": dict(chips),
            "addresses": [{"type": "InternalIP", "address": f"192.168.0.{i + 1}"}],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=0)
    args = parser.parse_args()
    store = MemoryCluster()
    for i in range(args.nodes):
        store.put("Node", node_object(i))
    server = LoopbackApiServer(store)
    print("ready", server.start(), flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
