"""The gateway on the official ``kubernetes`` client: what the agent runs with in a cluster.

Responses are read as raw JSON (``_preload_content=False``), watch streams line by line,
so callers see exactly the objects the API server sent, as the in-memory store gives them
(the client's typed models decode an order of magnitude slower). HTTP 404, 409 and 410
become NotFound, Conflict and Gone (a watch's ERROR event with code 410 too); any other
failure, including an unreachable server or a broken stream, a KubeError.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from infra.kube.port import (
    Conflict,
    Forbidden,
    Gone,
    KubeError,
    NotFound,
    Obj,
    Page,
    Selection,
    WatchEvent,
)

REQUEST_TIMEOUT = 10.0
# Connections kept to the API server. The client's default is 5 per core (10 on two cores):
# kube-scheduler binds asynchronously, and with more binds in flight than that each extra one
# opened, and dropped, a TLS connection of its own ("Connection pool is full" under the real
# kube-scheduler at 1,000 pods).
CONNECTIONS = 64
T = TypeVar("T")


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as failed:
        message = f"{what}: HTTP {failed.status} {failed.reason}"
        if failed.status == 403:
            raise Forbidden(message) from None
        if failed.status == 404:
            raise NotFound(message) from None
        if failed.status == 409:
            raise Conflict(message) from None
        if failed.status == 410:
            raise Gone(message) from None
        raise KubeError(message) from None
    except (urllib3.exceptions.HTTPError, OSError) as failed:
        raise KubeError(
            f"{what}: the API server is unreachable ({type(failed).__name__})"
        ) from None


def api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """The official client for a kubeconfig file, or in-cluster without one."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = CONNECTIONS
    try:
        if kubeconfig is not None:
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as failed:
        raise KubeError(f"no Kubernetes configuration: {failed}") from None
    except (TypeError, ValueError, AttributeError) as failed:  # YAML, but not a kubeconfig
        raise KubeError(f"{kubeconfig}: not a kubeconfig file ({type(failed).__name__})") from None
    return client.ApiClient(configuration)


def _json(response: Any) -> Obj:
    body = json.loads(response.data)
    if not isinstance(body, dict):
        raise KubeError("the API server answered with something other than an object")
    return body


class KubernetesGateway:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._client = api_client

    # Each API's generated class is made when first used: CoreV1Api alone holds 21 MiB of
    # models, which the DRA driver (other groups' objects and one node read) never needs.
    @functools.cached_property
    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._client)

    @functools.cached_property
    def _coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self._client)

    @functools.cached_property
    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._client)

    @functools.cached_property
    def _apis(self) -> client.ApisApi:
        return client.ApisApi(self._client)

    def _get_path(self, what: str, path: str, **names: str) -> Obj:
        """A GET of one object by its path, through the client's transport (its
        configuration, authentication and errors) but no generated API class."""

        def call() -> Any:
            request = self._client.param_serialize(
                method="GET",
                resource_path=path,
                path_params=names,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(*request, _request_timeout=REQUEST_TIMEOUT)
            response.read()
            if not 200 <= response.status <= 299:
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response

        return _call(what, lambda: _json(call()))

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
        return KubernetesGateway(api_client(kubeconfig))

    def _read(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """One call, its answer as the API server's JSON."""
        return _call(
            what,
            lambda: _json(
                method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
            ),
        )

    def served(self, group: str, version: str) -> bool:
        listed = self._read(f"discover {group}/{version}", self._apis.get_api_versions)
        return any(
            g.get("name") == group
            and any(v.get("version") == version for v in g.get("versions") or ())
            for g in listed.get("groups") or ()
        )

    @staticmethod
    def _api(kind: str) -> tuple[str, str, str]:
        """``plural.group/version`` → group, version, plural."""
        resource, version = kind.split("/", 1)
        plural, group = resource.split(".", 1)
        return group, version, plural

    def get_object(self, kind: str, namespace: str, name: str) -> Obj:
        group, version, plural = self._api(kind)
        if namespace:
            return self._read(
                f"get {plural} {namespace}/{name}",
                self._custom.get_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
            )
        return self._read(
            f"get {plural} {name}",
            self._custom.get_cluster_custom_object,
            group,
            version,
            plural,
            name,
        )

    def create_object(self, kind: str, body: Obj) -> Obj:
        group, version, plural = self._api(kind)
        namespace = (body.get("metadata") or {}).get("namespace") or ""
        if namespace:
            return self._read(
                f"create {plural} in {namespace}",
                self._custom.create_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                body,
            )
        return self._read(
            f"create {plural}",
            self._custom.create_cluster_custom_object,
            group,
            version,
            plural,
            body,
        )

    def replace_object(self, kind: str, body: Obj) -> Obj:
        group, version, plural = self._api(kind)
        meta = body.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta["name"]
        if namespace:
            return self._read(
                f"replace {plural} {namespace}/{name}",
                self._custom.replace_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
                body,
            )
        return self._read(
            f"replace {plural} {name}",
            self._custom.replace_cluster_custom_object,
            group,
            version,
            plural,
            name,
            body,
        )

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        group, version, plural = self._api(kind)
        if namespace:
            self._read(
                f"delete {plural} {namespace}/{name}",
                self._custom.delete_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
            )
            return
        self._read(
            f"delete {plural} {name}",
            self._custom.delete_cluster_custom_object,
            group,
            version,
            plural,
            name,
        )

    def _collection(self, what: Selection) -> tuple[Callable[..., Any], tuple[str, ...]]:
        """The client's list call for a collection, and its positional arguments."""
        if "/" in what.kind:  # another API group's resource: plural.group/version
            group, version, plural = self._api(what.kind)
            if what.namespace:
                return self._custom.list_namespaced_custom_object, (
                    group,
                    version,
                    what.namespace,
                    plural,
                )
            return self._custom.list_cluster_custom_object, (group, version, plural)
        core = self._core
        calls: dict[tuple[str, bool], Callable[..., Any]] = {
            ("Pod", False): core.list_pod_for_all_namespaces,
            ("Pod", True): core.list_namespaced_pod,
            ("ConfigMap", False): core.list_config_map_for_all_namespaces,
            ("ConfigMap", True): core.list_namespaced_config_map,
            ("Node", False): core.list_node,
        }
        call = calls.get((what.kind, bool(what.namespace)))
        if call is None:
            raise KubeError(f"{what} cannot be listed")
        return call, ((what.namespace,) if what.namespace else ())

    @staticmethod
    def _selectors(what: Selection) -> dict[str, str]:
        chosen = {"label_selector": what.labels, "field_selector": what.fields}
        return {k: v for k, v in chosen.items() if v}

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        call, args = self._collection(what)
        paging: dict[str, Any] = {"limit": limit} if limit > 0 else {}
        if token:
            paging["_continue"] = token
        body = self._read(f"list {what}", call, *args, **self._selectors(what), **paging)
        meta = body.get("metadata") or {}
        return Page(
            list(body.get("items") or []),
            str(meta.get("resourceVersion", "")),
            str(meta.get("continue") or ""),
        )

    def watch(self, what: Selection, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        call, args = self._collection(what)
        response = _call(
            f"watch {what}",
            lambda: call(
                *args,
                **self._selectors(what),
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=max(1, round(timeout)),
                _preload_content=False,
                _request_timeout=(REQUEST_TIMEOUT, timeout + REQUEST_TIMEOUT),
            ),
        )
        try:
            lines = iter_resp_lines(response)
            while (line := _call(f"watch {what}", lambda: next(lines, None))) is not None:
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    message = f"watch {what}: {obj.get('message', 'error')}"
                    raise Gone(message) if obj.get("code") == 410 else KubeError(message)
                yield WatchEvent(str(kind), obj)
        finally:
            response.close()
            response.release_conn()

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
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str,
        *,
        uid: str = "",
    ) -> Obj:
        # A resourceVersion inside a patch is a precondition: 409 if the pod has changed. A
        # uid is one too: the patched pod's would differ from the stored one's, which is
        # immutable (422, ValidateObjectMetaUpdate in k8s.io/apimachinery/pkg/api/validation).
        metadata: Obj = {"annotations": dict(annotations), "resourceVersion": resource_version}
        if uid:
            metadata["uid"] = uid
        body = {"metadata": metadata}
        return self._read(
            f"patch pod {namespace}/{name}", self._core.patch_namespaced_pod, name, namespace, body
        )

    def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> Obj:
        body = {"metadata": {"labels": dict(labels)}}
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

    def read_configmap_by_patch(self, namespace: str, name: str) -> Obj:
        return self._read(
            f"read configmap {namespace}/{name}",
            self._core.patch_namespaced_config_map,
            name,
            namespace,
            {},
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
        return self._get_path(f"get node {name}", "/api/v1/nodes/{name}", name=name)

    def patch_node_labels(self, name: str, labels: Mapping[str, str]) -> Obj:
        body = {"metadata": {"labels": dict(labels)}}
        return self._read(f"patch node {name}", self._core.patch_node, name, body)

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> Obj:
        body = {"metadata": {"annotations": dict(annotations)}}
        return self._read(f"patch node {name}", self._core.patch_node, name, body)

    def create_event(self, namespace: str, body: Obj) -> Obj:
        return self._read(
            f"create event in {namespace}", self._core.create_namespaced_event, namespace, body
        )
