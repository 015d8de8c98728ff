"""The scheduler's pod deletions, each marked first: the admission policy lets the
scheduler's account delete only an NPU pod carrying ``ascend-npu.io/deleting``, which only
the scheduler may write (charts/ascend-npu/templates/admission-policy.yaml), so no deletion
of its is silent or of a pod it has no business with."""

from __future__ import annotations

from contract.annotations import DELETING_ANNOTATION
from infra.kube.port import KubeGateway


def delete_marked(
    gateway: KubeGateway,
    namespace: str,
    name: str,
    uid: str,
    *,
    grace_seconds: int | None,
    reason: str,
) -> None:
    """Mark the pod ``uid`` with why it goes (the reason of its Event), then delete it. Both
    hold only while the pod is still ``uid``: another of that name (a controller's new one)
    is neither marked nor deleted. NotFound when it is gone; KubeError when refused."""
    gateway.patch_pod_annotations(namespace, name, {DELETING_ANNOTATION: reason}, "", uid=uid)
    gateway.delete_pod(namespace, name, uid, grace_seconds)
