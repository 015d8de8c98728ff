"""A small JSON client for the test bed's API server, as a kubeconfig's user: what the tests
do to the cluster as an admin, a tenant or a component's ServiceAccount, with the status code
of every refusal (403 from RBAC or admission, 409, 422) kept for the tests to check.

The official client's typed models are what the components use; the tests want the API
server's raw answers (and server-side apply), so they talk JSON here.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode

import urllib3
import yaml

Obj = dict[str, Any]


class RestError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            self.message = str(json.loads(body).get("message", body))
        except ValueError:
            self.message = body
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


class Rest:
    def __init__(self, kubeconfig: Path) -> None:
        loaded = yaml.safe_load(kubeconfig.read_text())
        cluster = loaded["clusters"][0]["cluster"]
        user = loaded["users"][0]["user"]
        self.server = str(cluster["server"])
        context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        if "client-certificate" in user:
            context.load_cert_chain(user["client-certificate"], user["client-key"])
        self._headers = {"Accept": "application/json"}
        if "token" in user:
            self._headers["Authorization"] = f"Bearer {user['token']}"
        self._pool = urllib3.PoolManager(ssl_context=context, retries=False, timeout=30.0)

    def request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        response = self._pool.request(method, url, body=data, headers=headers)
        text = response.data.decode(errors="replace")
        if response.status >= 300:
            raise RestError(method, path, response.status, text)
        answer: Obj = json.loads(text) if text else {}
        return answer

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Obj, kind: str = "merge") -> Obj:
        types = {"merge": "application/merge-patch+json", "json": "application/json-patch+json"}
        return self.request("PATCH", path, body, content_type=types[kind])

    def delete(self, path: str) -> Obj:
        return self.request("DELETE", path)

    def status(self, method: str, path: str, body: Obj | None = None) -> int:
        """The status code of a call (200s included): for what may be refused."""
        try:
            self.request(method, path, body)
        except RestError as refused:
            return refused.status
        return 200

    # --- objects by kind -------------------------------------------------------------------

    _plurals: ClassVar[dict[tuple[str, str], tuple[str, bool]]] = {}

    def path(self, api_version: str, kind: str, name: str = "", namespace: str = "") -> str:
        """The REST path of ``kind`` (found by discovery, as kubectl finds it)."""
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if (api_version, kind) not in Rest._plurals:
            for resource in self.get(base)["resources"]:
                if "/" not in resource["name"]:
                    Rest._plurals[(api_version, resource["kind"])] = (
                        resource["name"],
                        bool(resource["namespaced"]),
                    )
        plural, namespaced = Rest._plurals[(api_version, kind)]
        where = f"/namespaces/{namespace}" if namespaced and namespace else ""
        return f"{base}{where}/{plural}" + (f"/{name}" if name else "")

    def apply(self, document: Obj, manager: str = "testbed") -> Obj:
        """Server-side apply (``kubectl apply --server-side --force-conflicts``)."""
        meta = document["metadata"]
        path = self.path(
            document["apiVersion"], document["kind"], meta["name"], meta.get("namespace", "")
        )
        return self.request(
            "PATCH",
            path,
            document,
            query={"fieldManager": manager, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def ensure_namespace(self, name: str) -> str:
        """The namespace, with its ``default`` ServiceAccount: kube-controller-manager makes
        that one asynchronously, and until it has, the ServiceAccount admission plugin refuses
        every pod there (``error looking up service account``); made here if still missing."""
        for path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": name}}),
            (f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}),
        ):
            try:
                self.create(path, body)
            except RestError as exists:
                if exists.status != 409:
                    raise
        return name
