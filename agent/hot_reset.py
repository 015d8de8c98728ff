"""Which chips to hot-reset this cycle, as Huawei's device plugin decides it: pure functions of
the node's chips, their fault levels, the chips pods and processes hold, and the clock.

Upstream: Ascend/mind-cluster ``component/ascend-device-plugin/pkg/server/hot_reset_manager.go``
(``UnifiedHotReset``, run every cycle from ``manager.go`` ``handleDeviceInfoUpdate``),
``token_bucket.go`` and ``idle_time_mgr.go``. In short:

- ``-hotReset`` 0 (inference) and 2 (training, "offline") both enable it for every chip of the
  node, training and inference alike; -1 disables it (1, the online mode, was removed).
- An unhealthy chip whose level is not NotHandleFault, PreSeparateNPU, SubHealthFault or normal
  is a reset candidate; SeparateNPU and ManuallySeparateNPU are never reset, they need
  external ops (node annotation ``ResetInfo``, ``ManualResetDevs``).
- The reset group (``getResetRingDevices``): a 910 ring of 4, an A2 training ring of 8 (16 on
  a 16-chip A2 box), one chip on an 800I A2 without HCCS, a 300I A2, a 950 and the 310 family,
  the card on a 300I Duo, the associated dies on an A3.
- The gate (``isRingFree``, ``IsIdleTimeExceeded``): no chip of the group held by a pod or
  running a process, for 60 s.
- The bucket: 3 resets per chip per 6 h window (``TokenBucket``: the window starts when the
  chip's bucket is first used and is refilled whole once 6 h have passed); out of tokens, the
  chip needs external ops.

One deliberate difference: upstream keeps a chip's first idle time when its group is busy
again; here a busy group restarts the 60 s, so the group must be idle for 60 s in a row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from chip_drivers.chips import Chip, NodeChips
from chip_topology.products import Product
from chip_topology.routing import product_by_name
from contract.chip_names import ASCEND910, InvalidInput
from contract.fault_levels import (
    MANUALLY_SEPARATE,
    NORMAL,
    NOT_HANDLE,
    PRE_SEPARATE,
    SEPARATE,
    SUB_HEALTH,
)

HOT_RESET_OFF = -1
HOT_RESET_INFER = 0  # upstream common.HotResetInfer
HOT_RESET_TRAIN_OFFLINE = 2  # upstream common.HotResetTrainOffLine
IDLE_SECONDS = 60.0  # hot_reset_manager.go idleWaitSeconds
TOKENS = 3  # token_bucket.go tokenMaxCount
REFILL_SECONDS = 6 * 3600.0  # token_bucket.go tokenRefillInterval
# Levels left alone (filterFaultDevices); no level at all is a normal chip.
NOT_RESET = frozenset({NOT_HANDLE, PRE_SEPARATE, SUB_HEALTH, NORMAL, ""})
# Levels never reset: isolated chips need someone to act (markNeedExternalOps).
EXTERNAL_OPS = frozenset({SEPARATE, MANUALLY_SEPARATE})
RESET_INFO_ANNOTATION = "ResetInfo"  # pkg/common/constants.go ResetInfoAnnotationKey


def enabled(mode: int) -> bool:
    """``-hotReset`` 0 and 2 both run the same reset for every chip (UnifiedHotReset returns
    only for HotResetClose)."""
    return mode in (HOT_RESET_INFER, HOT_RESET_TRAIN_OFFLINE)


def _product(node: NodeChips) -> Product | None:
    if node.product is None:
        return None
    try:
        return product_by_name(node.product)
    except InvalidInput:
        return None


def reset_group(node: NodeChips, chip: int) -> frozenset[int]:
    """The chips reset with ``chip`` (upstream ``getResetRingDevices``), among the node's.

    A 910 whose product is unknown (a container seeing part of a server) gets the whole node:
    a ring that cannot be named is gated as if every chip were in it, so nothing a pod holds is
    ever reset with it."""
    present = frozenset(c.id for c in node.chips)
    if node.die_size:  # A3: the die (GetAssociatedLogicIDs; see docs/agent.md for the brother)
        die = node.die_of(chip)
        return frozenset(c for c in present if node.die_of(c) == die)
    product = _product(node)
    if product is not None and product.duo:  # 300I Duo: the card (getDuoCardDevices)
        card = _card_of(node, chip)
        return frozenset(c.id for c in node.chips if _card_of(node, c.id) == card)
    size = _ring_size(node, product)
    if size is None:
        return present
    start = chip // size * size  # getHccsRingDevices: ids [start, start + size)
    return frozenset(c for c in present if start <= c < start + size)


def _card_of(node: NodeChips, chip: int) -> int:
    for c in node.chips:
        if c.id == chip and c.card is not None:
            return c.card[0]
    return chip // 2  # two chips a Duo card (chip_topology card310px2 groups)


def _ring_size(node: NodeChips, product: Product | None) -> int | None:
    """``getRingSize`` by product (``Product.reset_ring``); None when a 910's ring is
    unknown."""
    if node.kind is not ASCEND910:
        return 1  # the 950 family (Ascend910A5RingsNum = 1), the 310 family's default ring
    if product is None:
        return None
    return product.reset_ring(len(node.chips), node.board_id)


@dataclass(frozen=True, slots=True)
class Bucket:
    """A chip's reset tokens (token_bucket.go ``TokenBucket``)."""

    tokens: int
    since: float  # when the window began (lastRefill)

    @staticmethod
    def new(now: float) -> Bucket:
        return Bucket(TOKENS, now)

    def refilled(self, now: float) -> Bucket:
        return Bucket(TOKENS, now) if now - self.since >= REFILL_SECONDS else self


@dataclass(frozen=True, slots=True)
class Book:
    """What the reset remembers between cycles."""

    idle_since: Mapping[int, float] = field(default_factory=dict)  # by faulty chip
    buckets: Mapping[int, Bucket] = field(default_factory=dict)
    resetting: frozenset[int] = frozenset()  # every chip of a group being reset
    # ResetInfo: chips waiting for a third party (until ``scan_after``), and for an operator.
    third_party: Mapping[int, float] = field(default_factory=dict)  # chip → scan time
    manual: frozenset[int] = frozenset()

    def tokens(self, chip: int, now: float) -> int:
        bucket = self.buckets.get(chip)
        return TOKENS if bucket is None else bucket.refilled(now).tokens


@dataclass(frozen=True, slots=True)
class Reset:
    """Reset ``fault``; the driver resets it with ``group``, all of which are idle."""

    fault: int
    group: frozenset[int]


@dataclass(frozen=True, slots=True)
class Cycle:
    """One cycle's facts."""

    node: NodeChips
    levels: Mapping[int, str]  # chip → fault level; missing: a normal chip
    busy: frozenset[int]  # chips a pod holds or a process runs on
    now: float
    idle_seconds: float = IDLE_SECONDS  # tests shorten it; upstream's is fixed


def faulty(chip: Chip, levels: Mapping[int, str]) -> bool:
    """Unhealthy as upstream's plugin counts it (its Health follows the codes' level): the
    driver says so, or a code the chip reports now is of a level that is not healthy. The
    codes are this cycle's, so a level the pipeline has not polled again since the chip came
    back from a reset does not make it faulty."""
    return not chip.healthy or (bool(chip.fault_codes) and levels.get(chip.id, "") not in NOT_RESET)


def candidates(cycle: Cycle) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(chips to reset, chips needing external ops) among the faulty ones
    (``filterFaultDevices``)."""
    reset, external = [], []
    for chip in sorted(cycle.node.chips, key=lambda c: c.id):
        if not faulty(chip, cycle.levels):
            continue
        level = cycle.levels.get(chip.id, "")
        if level in EXTERNAL_OPS:
            external.append(chip.id)
        elif level not in NOT_RESET:
            reset.append(chip.id)
    return tuple(reset), tuple(external)


def decide(book: Book, cycle: Cycle) -> tuple[Book, tuple[Reset, ...]]:
    """The resets to start now and the book after them."""
    healthy = {c.id for c in cycle.node.chips if not faulty(c, cycle.levels)}
    # checkDeviceRecovered: a healthy chip forgets its idle time and leaves ResetInfo.
    idle = {c: t for c, t in book.idle_since.items() if c not in healthy}
    third_party = {c: t for c, t in book.third_party.items() if c not in healthy}
    manual = set(book.manual - healthy)
    # A third party had its time: what is still faulty is an operator's (execRescan).
    for chip, scan_at in list(third_party.items()):
        if cycle.now >= scan_at:
            del third_party[chip]
            manual.add(chip)
    buckets = dict(book.buckets)
    resetting = set(book.resetting)
    to_reset, external = candidates(cycle)
    manual.update(external)
    started = []
    for chip in to_reset:
        if chip in resetting or chip in third_party:
            continue
        group = reset_group(cycle.node, chip)
        if group & cycle.busy or group & resetting:
            idle.pop(chip, None)  # busy again: the 60 s start over
            continue
        since = idle.setdefault(chip, cycle.now)
        if cycle.now - since < cycle.idle_seconds:
            continue
        bucket = buckets.get(chip, Bucket.new(cycle.now)).refilled(cycle.now)
        buckets[chip] = bucket
        if bucket.tokens <= 0:
            manual.add(chip)  # token exhausted, need external ops
            continue
        buckets[chip] = replace(bucket, tokens=bucket.tokens - 1)
        resetting |= group
        started.append(Reset(chip, group))
    after = Book(idle, buckets, frozenset(resetting), third_party, frozenset(manual))
    return after, tuple(started)


def finished(book: Book, reset: Reset, ok: bool, now: float, *, a3: bool, delay: float) -> Book:
    """The book after a reset ends. Success forgets the idle time (executeReset); a failure
    lists the chip in ResetInfo: an A3's for a third party to reset within ``delay`` seconds
    (-thirdPartyScanDelay), any other's for an operator (ascend910.go updateResetInfo)."""
    resetting = book.resetting - reset.group
    if ok:
        idle = {c: t for c, t in book.idle_since.items() if c != reset.fault}
        return replace(book, idle_since=idle, resetting=resetting)
    if a3:
        third_party = {**book.third_party, reset.fault: now + delay}
        return replace(book, resetting=resetting, third_party=third_party)
    return replace(book, resetting=resetting, manual=book.manual | {reset.fault})


def reset_device(chip: Chip | None, chip_id: int) -> dict[str, int]:
    """One ``ResetDevice`` (pkg/device/reset_info_mgr.go), fields in Go's order. CardId and
    DeviceId are npu-smi's NPU ID and chip index, -1 when the driver does not know them (as
    upstream's test ``should write device with default CardID``); LogicID falls back to the id."""
    card = chip.card if chip is not None and chip.card is not None else (-1, -1)
    return {
        "CardId": card[0],
        "DeviceId": card[1],
        "AssociatedCardId": 0,
        "PhyID": chip_id,
        "LogicID": chip.logic_id if chip is not None else chip_id,
    }


def reset_info(node: NodeChips, third_party: Iterable[int], manual: Iterable[int]) -> str:
    """The node annotation ``ResetInfo`` as upstream's ``json.Marshal(ResetInfo)`` writes it
    (``{"ThirdPartyResetDevs":[…],"ManualResetDevs":[…]}``, compact)."""
    by_id = {c.id: c for c in node.chips}
    body: dict[str, Any] = {
        "ThirdPartyResetDevs": [reset_device(by_id.get(c), c) for c in sorted(set(third_party))],
        "ManualResetDevs": [reset_device(by_id.get(c), c) for c in sorted(set(manual))],
    }
    return json.dumps(body, separators=(",", ":"))


def parse_reset_info(text: str) -> tuple[frozenset[int], frozenset[int]]:
    """The physical ids in a ``ResetInfo`` annotation: (third party's, manual); ValueError
    when it is not upstream's shape."""
    body = json.loads(text)
    if not isinstance(body, dict):
        raise ValueError("expected a JSON object")
    lists = []
    for key in ("ThirdPartyResetDevs", "ManualResetDevs"):
        devices = body.get(key) or []  # Go writes a nil slice as null
        if not isinstance(devices, list) or not all(
            isinstance(d, dict) and isinstance(d.get("PhyID"), int) for d in devices
        ):
            raise ValueError(f"{key}: expected a list of devices with a PhyID")
        lists.append(frozenset(d["PhyID"] for d in devices))
    return lists[0], lists[1]
