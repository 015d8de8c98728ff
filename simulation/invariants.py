"""The robustness run's invariants, each a pure check over what the cluster shows: the
evidence of every break, as ``(invariant, evidence)`` pairs."""

from __future__ import annotations

from collections.abc import Mapping

from contract.annotations import CHIPS_ANNOTATION, REAL_ANNOTATION
from contract.chip_names import RESOURCE_NAME
from contract.objects import Obj, npu_request
from simulation.cluster import Admitted

Broken = list[tuple[str, str]]


def containers(admitted: Mapping[str, Admitted], pods: Mapping[str, Obj]) -> Broken:
    """No chip in two live containers; every container's devices are its pod's AscendReal."""
    broken: Broken = []
    held: dict[tuple[str, str], str] = {}
    for key, container in admitted.items():
        pod = pods.get(key)
        if pod is None or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        visible = container.allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", "")
        for chip in visible.split(","):
            other = held.setdefault((container.node, chip), key)
            if other != key:
                broken.append(
                    (
                        "no chip in two live containers",
                        f"chip {chip} of {container.node}: {other} and {key}",
                    )
                )
        real = pod["metadata"].get("annotations", {}).get(REAL_ANNOTATION, "")
        recorded = ",".join(c.rsplit("-", 1)[-1] for c in real.split(",") if c)
        if real and recorded != visible:
            broken.append(
                (
                    "every container's devices are its pod's AscendReal",
                    f"{key}: container sees {visible}, AscendReal {real}",
                )
            )
    return broken


def bindings(pods: Mapping[str, Obj]) -> Broken:
    """No NPU pod bound without the scheduler's chips."""
    broken: Broken = []
    for key, pod in pods.items():
        resource, count = npu_request(pod)
        bound = (pod.get("spec") or {}).get("nodeName")
        notes = pod["metadata"].get("annotations") or {}
        if bound and count and resource == RESOURCE_NAME and CHIPS_ANNOTATION not in notes:
            broken.append(("no NPU pod bound without the scheduler's chips", f"{key} on {bound}"))
    return broken
