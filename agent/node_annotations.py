"""The node annotations Huawei's device plugin writes at start, from the driver's report
(Ascend/mind-cluster component/ascend-device-plugin pkg/server/manager.go
getNewNodeAnnotation): ClusterD reads them (component/clusterd/pkg/domain/node/node_storage.go),
and Huawei's Volcano reads ``baseDeviceInfos`` on the 950 (component/ascend-for-volcano
plugin/node.go buildPhyIdToDeviceIdMap)."""

from __future__ import annotations

import logging

from chip_drivers.chips import NodeChips
from contract.chip_names import NPU
from contract.go_json import go_json
from contract.rank_table import UNKNOWN
from infra.kube.port import KubeError, KubeGateway

log = logging.getLogger(__name__)

BASE_DEVICE_INFOS = "baseDeviceInfos"  # ascend-common api/consts.go BaseDevInfoAnno
SUPER_POD_ID = "superPodID"  # device-plugin pkg/common/constants.go SuperPodIDKey
SERVER_INDEX = "serverIndex"  # pkg/server/manager.go serverIndexKey
SERVER_TYPE = "serverType"  # pkg/server/manager.go serverTypeKey
RACK_ID = "rackID"  # ascend-common api/const_v2.go RackIDKey
# Every node annotation the agent may write (the chart's admission policy allows these).
NODE_ANNOTATIONS = (BASE_DEVICE_INFOS, SUPER_POD_ID, SERVER_INDEX, SERVER_TYPE, RACK_ID)


def node_annotations(chips: NodeChips) -> dict[str, str]:
    """The annotations as upstream's getNewNodeAnnotation makes them:

    - ``baseDeviceInfos``: per device name (``Ascend910-3``, ``npu-3``) the chip's ``IP`` and
      ``SuperDeviceID`` (an uint32 there: 0 when the driver cannot tell, Go's zero value,
      as upstream's without SuperPoD information), and on the 950 its ``DeviceID`` (the logic
      id, getNpuBaseInfo); Go's encoding: keys sorted, fields in struct order.
    - ``superPodID`` and ``serverIndex``: -2 when unknown (upstream's SuperPodIdAbnormal,
      ServerIdAbnormal).
    - ``serverType``: ``A3`` on an Atlas A3, ``npu`` on the 950 family, else empty (getDevType).
    - ``rackID``: on the 950 when the driver reports the rack (upstream: SuperPoD types 1D/2D).

    ``cardType`` is not written: upstream writes it only on 950 300I cards, known by their
    board ID (DCMI), which no driver here reports."""
    is_npu = chips.kind is NPU
    infos = {
        chips.device_id(chip): {
            **({"DeviceID": chip.logic_id} if is_npu else {}),
            "IP": chip.ip,
            "SuperDeviceID": chip.super_device_id if chip.super_device_id is not None else 0,
        }
        for chip in chips.chips
    }
    server_type = "npu" if is_npu else "A3" if chips.die_size else ""
    written = {
        BASE_DEVICE_INFOS: go_json(infos),
        SUPER_POD_ID: str(UNKNOWN if chips.super_pod_id is None else chips.super_pod_id),
        SERVER_INDEX: str(UNKNOWN if chips.server_index is None else chips.server_index),
        SERVER_TYPE: server_type,
    }
    if is_npu and chips.rack_id is not None:
        written[RACK_ID] = str(chips.rack_id)
    return written


def annotate_node(gateway: KubeGateway, node: str, chips: NodeChips) -> bool:
    """Write the annotations of ``node_annotations`` whose value differs, in one patch. True
    when one was written."""
    wanted = node_annotations(chips)
    try:
        present = gateway.get_node(node).get("metadata", {}).get("annotations") or {}
        changed = {key: value for key, value in wanted.items() if present.get(key) != value}
        if not changed:
            return False
        gateway.patch_node_annotations(node, changed)
    except KubeError as failed:
        log.warning("node %s: annotations %s not set (%s)", node, ", ".join(sorted(wanted)), failed)
        return False
    return True
