"""The rank table annotation ``ascend.kubectl.kubernetes.io/ascend-910-configuration`` (the
950 family's: ``ascend-npu-configuration``)."""

from __future__ import annotations

from collections.abc import Iterable

from contract.annotations import NPU_RANK_TABLE_ANNOTATION, RANK_TABLE_ANNOTATION
from contract.chip_names import ASCEND910, NPU, ChipKind
from contract.go_json import go_json

# Per training chip kind, the annotation its rank table is written in; the inference chips
# have none.
RANK_TABLE_ANNOTATIONS = {ASCEND910: RANK_TABLE_ANNOTATION, NPU: NPU_RANK_TABLE_ANNOTATION}


def rank_table_annotation(kind: ChipKind) -> str | None:
    """The annotation a kind's rank table goes in; None for the inference chips."""
    return RANK_TABLE_ANNOTATIONS.get(kind)


def rank_table(pod_name: str, server_id: str, devices: Iterable[tuple[int, str]]) -> str:
    """The pod's chips (physical id, device IP) sorted by id, as Go marshals Huawei's
    ``RankTable`` struct (field order, not sorted keys)."""
    listed = ",".join(
        '{"device_id":' + go_json(str(chip)) + ',"device_ip":' + go_json(ip) + "}"
        for chip, ip in sorted(devices)
    )
    return (
        '{"pod_name":'
        + go_json(pod_name)
        + ',"server_id":'
        + go_json(server_id)
        + ',"devices":['
        + listed
        + "]}"
    )
