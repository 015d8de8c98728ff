"""The pod annotations of the scheduler ↔ device-plugin contract, the labels and
annotations of gangs, in one place for the scheduler and the agent."""

from __future__ import annotations

from contract.chip_names import RESOURCE_NAME

CHIPS_ANNOTATION = RESOURCE_NAME  # the scheduler's chips: Ascend910-4,Ascend910-5
PREDICATE_TIME = "predicate-time"  # UnixNano when scheduled; CONSUMED once allocated
CONSUMED = str(2**64 - 1)  # strconv.FormatUint(math.MaxUint64, 10)
REAL_ANNOTATION = "huawei.com/AscendReal"
KUBELET_ANNOTATION = "huawei.com/kltDev"
RANK_TABLE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
RANK_INDEX_ANNOTATION = "hccl/rankIndex"  # a multi-node job's pod: its rank
GANG_LABEL = "ascend.npu/gang"  # pods of one multi-node job started together
GANG_SIZE_ANNOTATION = "ascend.npu/gang-size"  # how many pods the gang has
