"""The gateway on the official ``kubernetes`` client: what the agent runs with in a cluster.

Responses are read as raw JSON (``_preload_content=False``) so the agent sees exactly the
objects the API server sent, as the in-memory store gives them. HTTP 404 and 409 become
NotFound and Conflict; any other failure, including an unreachable server, a KubeError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from contract.objects import Obj
from infra.kube.port import Conflict, KubeError, NotFound, WatchEvent

REQUEST_TIMEOUT = 10.0
T = TypeVar("T")


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as failed:
        message = f"{what}: HTTP {failed.status} {failed.reason}"
        if failed.status == 404:
            raise NotFound(message) from None
        if failed.status == 409:
            raise Conflict(message) from None
        raise KubeError(message) from None
    except (urllib3.exceptions.HTTPError, OSError) as failed:
        raise KubeError(
            f"{what}: the API server is unreachable ({type(failed).__name__})"
        ) from None


def _json(response: Any) -> Obj:
    body = json.loads(response.data)
    if not isinstance(body, dict):
        raise KubeError("the API server answered with something other than an object")
    return body


class KubernetesGateway:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)

    @staticmethod
    def for_url(url: str) -> KubernetesGateway:
        """A client for a plain-HTTP API server (the loopback fake)."""
        configuration = client.Configuration()
        configuration.host = url
        configuration.retries = False  # an unreachable server fails fast; the caller retries
        return KubernetesGateway(client.ApiClient(configuration))

    @staticmethod
    def from_environment(kubeconfig: Path | None = None) -> KubernetesGateway:
        """In-cluster service account, or a kubeconfig file when one is given."""
        configuration = client.Configuration()
        try:
            if kubeconfig is not None:
                config.load_kube_config(
                    config_file=str(kubeconfig), client_configuration=configuration
                )
            else:
                config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as failed:
            raise KubeError(f"no Kubernetes configuration: {failed}") from None
        return KubernetesGateway(client.ApiClient(configuration))

    def _read(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """One call, its answer as the API server's JSON."""
        return _call(
            what,
            lambda: _json(
                method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
            ),
        )

    def list_pods(self, node: str | None) -> tuple[list[Obj], str]:
        selector = {"field_selector": f"spec.nodeName={node}"} if node else {}
        body = self._read("list pods", self._core.list_pod_for_all_namespaces, **selector)
        return list(body.get("items") or []), str(
            body.get("metadata", {}).get("resourceVersion", "")
        )

    def watch_pods(self, node: str, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        stream = watch.Watch().stream(
            self._core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
            resource_version=resource_version,
            timeout_seconds=max(1, round(timeout)),
            _request_timeout=timeout + REQUEST_TIMEOUT,
        )
        while True:
            event = _call("watch pods", lambda: next(stream, None))
            if event is None:
                return
            if event["type"] == "ERROR":
                raise KubeError(f"watch pods: {event['raw_object'].get('message', 'error')}")
            yield WatchEvent(event["type"], event["raw_object"])

    def list_configmaps(self, namespace: str) -> list[Obj]:
        body = self._read(
            f"list configmaps in {namespace}", self._core.list_namespaced_config_map, namespace
        )
        return list(body.get("items") or [])

    def list_nodes(self) -> list[Obj]:
        return list(self._read("list nodes", self._core.list_node).get("items") or [])

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "annotations": dict(annotations),
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._read(
            f"bind pod {namespace}/{name}",
            self._core.create_namespaced_pod_binding,
            name,
            namespace,
            body,
        )

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._read(
            f"get pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace
        )

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        options = client.V1DeleteOptions(
            grace_period_seconds=grace_seconds,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        self._read(
            f"delete pod {namespace}/{name}",
            self._core.delete_namespaced_pod,
            name,
            namespace,
            body=options,
        )

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str], resource_version: str
    ) -> Obj:
        # A resourceVersion inside a patch is a precondition: 409 if the pod has changed.
        body = {"metadata": {"annotations": dict(annotations), "resourceVersion": resource_version}}
        return self._read(
            f"patch pod {namespace}/{name}", self._core.patch_namespaced_pod, name, namespace, body
        )

    def get_configmap(self, namespace: str, name: str) -> Obj:
        return self._read(
            f"get configmap {namespace}/{name}",
            self._core.read_namespaced_config_map,
            name,
            namespace,
        )

    def create_configmap(self, body: Obj) -> Obj:
        namespace = body["metadata"]["namespace"]
        return self._read(
            f"create configmap {namespace}",
            self._core.create_namespaced_config_map,
            namespace,
            body,
        )

    def update_configmap(self, body: Obj) -> Obj:
        meta = body["metadata"]
        return self._read(
            f"update configmap {meta['namespace']}/{meta['name']}",
            self._core.replace_namespaced_config_map,
            meta["name"],
            meta["namespace"],
            body,
        )

    def get_lease(self, namespace: str, name: str) -> Obj:
        return self._read(
            f"get lease {namespace}/{name}",
            self._coordination.read_namespaced_lease,
            name,
            namespace,
        )

    def create_lease(self, body: Obj) -> Obj:
        namespace = body["metadata"]["namespace"]
        return self._read(
            f"create lease {namespace}",
            self._coordination.create_namespaced_lease,
            namespace,
            body,
        )

    def update_lease(self, body: Obj) -> Obj:
        meta = body["metadata"]
        return self._read(
            f"update lease {meta['namespace']}/{meta['name']}",
            self._coordination.replace_namespaced_lease,
            meta["name"],
            meta["namespace"],
            body,
        )

    def get_node(self, name: str) -> Obj:
        return self._read(f"get node {name}", self._core.read_node, name)

    def patch_node_labels(self, name: str, labels: Mapping[str, str]) -> Obj:
        body = {"metadata": {"labels": dict(labels)}}
        return self._read(f"patch node {name}", self._core.patch_node, name, body)

    def create_event(self, namespace: str, body: Obj) -> Obj:
        return self._read(
            f"create event in {namespace}", self._core.create_namespaced_event, namespace, body
        )
