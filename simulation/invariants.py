"""The robustness run's invariants, each a pure check over what the cluster shows: the
evidence of every break, as ``(invariant, evidence)`` pairs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from contract.annotations import CHIPS_ANNOTATION, REAL_ANNOTATION
from contract.chip_names import RESOURCE_NAME, InvalidInput
from contract.objects import Obj, npu_request
from contract.vnpu import (
    NPU_CORE_ANNOTATION,
    NPU_CORE_RESOURCE,
    TEMPLATE_OF_SPEC,
    parse_core_choice,
    parse_virtual_name,
    template_cores,
)
from simulation.cluster import Admitted

# What the scheduler writes on the pods it places, by the resource they ask.
CHOICE_OF = {RESOURCE_NAME: CHIPS_ANNOTATION, NPU_CORE_RESOURCE: NPU_CORE_ANNOTATION}

Broken = list[tuple[str, str]]


def containers(admitted: Mapping[str, Admitted], pods: Mapping[str, Obj]) -> Broken:
    """No chip in two live containers; every container's devices are its pod's AscendReal."""
    broken: Broken = []
    held: dict[tuple[str, str], str] = {}
    for key, container in admitted.items():
        pod = _live(pods, key)
        if pod is None or npu_request(pod)[0] == NPU_CORE_RESOURCE:
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


def _live(pods: Mapping[str, Obj], key: str) -> Obj | None:
    pod = pods.get(key)
    if pod is None or pod["status"].get("phase") in ("Succeeded", "Failed"):
        return None
    return pod


def cores(admitted: Mapping[str, Admitted], pods: Mapping[str, Obj], per_chip: int) -> Broken:
    """No AI core of a 310P chip given twice (the vNPUs and whole chips of live containers
    take at most ``per_chip`` cores of each chip), and each container runs on the chip the
    scheduler chose (``huawei.com/npu-core``), as its ``AscendReal`` and devices say."""
    broken: Broken = []
    taken: Counter[tuple[str, int]] = Counter()
    takers: dict[tuple[str, int], list[str]] = {}
    for key, container in admitted.items():
        pod = _live(pods, key)
        if pod is None or npu_request(pod)[0] != NPU_CORE_RESOURCE:
            continue
        notes = pod["metadata"].get("annotations") or {}
        visible = container.allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", "")
        real = notes.get(REAL_ANNOTATION, "")
        try:
            choice = parse_core_choice(notes.get(NPU_CORE_ANNOTATION, ""))
            if choice.template is not None:
                vnpu = parse_virtual_name(real)
                template = TEMPLATE_OF_SPEC[vnpu.spec]
                shares = {vnpu.phy: template_cores(template)}
                on_choice = (vnpu.phy, str(vnpu.vdev), template) == (
                    choice.chips[0],
                    visible,
                    choice.template,
                )
            else:
                shares = {c: per_chip for c in choice.chips}
                chips = ",".join(map(str, choice.chips))
                recorded = ",".join(c.rsplit("-", 1)[-1] for c in real.split(","))
                on_choice = visible == chips == recorded
        except (InvalidInput, KeyError) as bad:
            broken.append(("each vNPU container runs on the chip chosen", f"{key}: {bad}"))
            continue
        if not on_choice:
            broken.append(
                (
                    "each vNPU container runs on the chip chosen",
                    f"{key}: chose {choice}, AscendReal {real}, container sees {visible}",
                )
            )
        for chip, count in shares.items():
            taken[(container.node, chip)] += count
            takers.setdefault((container.node, chip), []).append(f"{key} ({count})")
    for (node, chip), count in sorted(taken.items()):
        if count > per_chip:
            broken.append(
                (
                    "no AI core of a 310P chip given twice",
                    f"chip {chip} of {node}: {count} of {per_chip} cores to "
                    + ", ".join(takers[(node, chip)]),
                )
            )
    return broken


def bindings(pods: Mapping[str, Obj]) -> Broken:
    """No NPU pod bound without the scheduler's chips (or its vNPU choice)."""
    broken: Broken = []
    for key, pod in pods.items():
        resource, count = npu_request(pod)
        bound = (pod.get("spec") or {}).get("nodeName")
        notes = pod["metadata"].get("annotations") or {}
        choice = CHOICE_OF.get(resource)
        if bound and count and choice is not None and choice not in notes:
            broken.append(("no NPU pod bound without the scheduler's chips", f"{key} on {bound}"))
    return broken


def network(
    pods: Mapping[str, Obj],
    gangs: Mapping[str, tuple[str, list[str]]],
    tor_of: Mapping[str, int],
    super_pod_of: Mapping[str, int],
) -> Broken:
    """A switch-affinity gang (``tor-gang``: two pods, fewer than a ToR's servers) runs
    under one ToR; a SuperPoD gang (``sp-gang``) in one SuperPoD. ``gangs``: job → its shape
    and pod keys; ``tor_of``, ``super_pod_of``: node → its ToR, its SuperPoD."""
    rules = {
        "tor-gang": ("a switch-affinity gang runs under one ToR", tor_of),
        "sp-gang": ("a SuperPoD gang runs in one SuperPoD", super_pod_of),
    }
    broken: Broken = []
    for job, (shape, keys) in sorted(gangs.items()):
        if shape not in rules:
            continue
        invariant, place_of = rules[shape]
        nodes = sorted(
            {
                str(node)
                for key in keys
                if (pod := _live(pods, key)) is not None
                and (node := (pod.get("spec") or {}).get("nodeName"))
            }
        )
        places = {place_of.get(n) for n in nodes}
        if len(places) > 1 or None in places:
            where = ", ".join(f"{n} ({place_of.get(n)})" for n in nodes)
            broken.append((invariant, f"{job} on {where}"))
    return broken
