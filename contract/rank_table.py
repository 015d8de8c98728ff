"""The rank table annotation ``ascend.kubectl.kubernetes.io/ascend-910-configuration`` (the
950 family's: ``ascend-npu-configuration``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contract.annotations import NPU_RANK_TABLE_ANNOTATION, RANK_TABLE_ANNOTATION
from contract.chip_names import ASCEND910, NPU, ChipKind
from contract.go_json import go_json

# Per training chip kind, the annotation its rank table is written in; the inference chips
# have none.
RANK_TABLE_ANNOTATIONS = {ASCEND910: RANK_TABLE_ANNOTATION, NPU: NPU_RANK_TABLE_ANNOTATION}


def rank_table_annotation(kind: ChipKind) -> str | None:
    """The annotation a kind's rank table goes in; None for the inference chips."""
    return RANK_TABLE_ANNOTATIONS.get(kind)


# Upstream's "not known" of a SuperPoD id, server index, rack id and super device id
# (Ascend/mind-cluster component/ascend-device-plugin pkg/common/constants.go SdIdAbnormal,
# SuperPodIdAbnormal, ServerIdAbnormal; constants_v2.go RackIdAbnormal).
UNKNOWN = -2


@dataclass(frozen=True, slots=True)
class ServerPlace:
    """Where the pod's server is: its node's IP and, in a SuperPoD, the SuperPoD, the server's
    index in it and (950) its rack; None where the driver cannot tell."""

    host_ip: str
    super_pod_id: int | None = None
    server_index: int | None = None
    rack_id: int | None = None


@dataclass(frozen=True, slots=True)
class RankDevice:
    """One chip of the pod: physical id, device IP and, in a SuperPoD, its super device id."""

    id: int
    ip: str
    super_device_id: int | None = None


def _known(value: int | None) -> int:
    return UNKNOWN if value is None else value


def rank_table(
    pod_name: str, pod_uid: str, place: ServerPlace, devices: Iterable[RankDevice]
) -> str:
    """The pod's chips sorted by id, as Go marshals Huawei's ``Instance`` (field order, not
    sorted keys; Ascend/mind-cluster component/ascend-device-plugin pkg/common/proto.go
    ``Instance``, ``Device``, filled by pkg/common/common.go ``GetPodConfiguration`` and
    pkg/device/ascendcommon.go ``getConfigAnno``): ``server_id`` is the pod's UID,
    ``host_ip`` and ``server_ip`` the node's IP, and every chip has its ``super_device_id``
    (-2 when unknown, as upstream's for a chip it has no SuperPoD information of).
    ``levelList`` (950 rank levels, omitempty) is left out: no driver here reports it."""
    listed = ",".join(
        '{"device_id":'
        + go_json(str(device.id))
        + ',"device_ip":'
        + go_json(device.ip)
        + ',"super_device_id":'
        + go_json(str(_known(device.super_device_id)))
        + "}"
        for device in sorted(devices, key=lambda d: d.id)
    )
    return (
        '{"pod_name":'
        + go_json(pod_name)
        + ',"server_id":'
        + go_json(pod_uid)
        + ',"host_ip":'
        + go_json(place.host_ip)
        + ',"super_pod_id":'
        + go_json(_known(place.super_pod_id))
        + ',"devices":['
        + listed
        + '],"rack_id":'
        + go_json(_known(place.rack_id))
        + ',"server_index":'
        + go_json(str(_known(place.server_index)))
        + ',"server_ip":'
        + go_json(place.host_ip)
        + "}"
    )
