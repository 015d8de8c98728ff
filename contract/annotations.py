"""The pod annotations of the scheduler ↔ device-plugin contract, the labels and
annotations of gangs, in one place for the scheduler and the agent."""

from __future__ import annotations

from contract.chip_names import RESOURCE_NAME, InvalidInput, quoted

CHIPS_ANNOTATION = RESOURCE_NAME  # the scheduler's chips: Ascend910-4,Ascend910-5
PREDICATE_TIME = "predicate-time"  # UnixNano when scheduled; CONSUMED once allocated
CONSUMED = str(2**64 - 1)  # strconv.FormatUint(math.MaxUint64, 10)
REAL_ANNOTATION = "huawei.com/AscendReal"
KUBELET_ANNOTATION = "huawei.com/kltDev"
RANK_TABLE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
RANK_INDEX_ANNOTATION = "hccl/rankIndex"  # a multi-node job's pod: its rank
GANG_LABEL = "ascend.npu/gang"  # pods of one multi-node job started together
GANG_SIZE_ANNOTATION = "ascend.npu/gang-size"  # how many pods the gang has

MAX_UINT64 = 2**64 - 1
MAX_RANK = 99_999  # ranks of a job of 100,000 nodes
MAX_GANG_SIZE = 100_000


def _decimal(text: str, key: str, digits: int) -> int:
    if not text or len(text) > digits or not text.isascii() or not text.isdigit():
        raise InvalidInput(
            f"{key} {quoted(text)} is not a decimal number of at most {digits} digits"
        )
    return int(text)


def parse_predicate_time(text: str) -> int:
    """``predicate-time``: a decimal uint64 (UnixNano, or CONSUMED)."""
    value = _decimal(text, PREDICATE_TIME, 20)
    if value > MAX_UINT64:
        raise InvalidInput(f"{PREDICATE_TIME} {quoted(text)} is larger than a uint64")
    return value


def parse_rank(text: str) -> int:
    """``hccl/rankIndex``: 0 .. MAX_RANK."""
    value = _decimal(text, RANK_INDEX_ANNOTATION, 5)
    if value > MAX_RANK:
        raise InvalidInput(f"{RANK_INDEX_ANNOTATION} {value} is larger than {MAX_RANK}")
    return value


def parse_gang_size(text: str) -> int:
    """``ascend.npu/gang-size``: 1 .. MAX_GANG_SIZE."""
    value = _decimal(text, GANG_SIZE_ANNOTATION, 6)
    if not 1 <= value <= MAX_GANG_SIZE:
        raise InvalidInput(f"{GANG_SIZE_ANNOTATION} {value} is not in 1..{MAX_GANG_SIZE}")
    return value
