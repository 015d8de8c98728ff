"""The agent's view of a pod, read from the API server's JSON."""

from __future__ import annotations

from agent.handshake import PodInfo
from scheduler_core.kube.port import Obj, npu_limit


def pod_info(pod: Obj) -> PodInfo:
    meta = pod.get("metadata", {})
    status = pod.get("status", {}) or {}
    return PodInfo(
        namespace=meta.get("namespace", "default"),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        phase=status.get("phase", "Pending") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        reason=status.get("reason", "") or "",
        npu_limit=npu_limit(pod),
        resource_version=meta.get("resourceVersion", ""),
        annotations=dict(meta.get("annotations") or {}),
    )
