"""Prepare and unprepare claims, one call at a time: the driver's side of the kubelet's
``NodePrepareResources`` / ``NodeUnprepareResources`` without the wire (``plugin`` adapts
it to both API versions).

The obligations of a DRA kubelet plugin (``shared/reference/dra.md`` §2.4, from the Go
helper's ``kubeletplugin`` and ``dra-example-driver``'s ``state.go``): every claim asked gets
an answer, devices or an error; a claim already prepared gets the same devices again (the
kubelet asks again after its restarts); the claim is read back and checked (``claims``); no
chip goes to two claims (the last line of defence behind the allocator); unprepare of a
claim not prepared here succeeds (it may be long gone); the CDI spec is written, then the
record; calls are serialized.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from chip_drivers.chips import NodeChips
from contract.objects import Obj
from dra_driver.cdi import CdiWriter
from dra_driver.checkpoint import Checkpoint, Prepared
from dra_driver.claims import (
    API_ERROR,
    CHECKPOINT,
    NOT_FOUND,
    TAKEN,
    UNHEALTHY,
    ClaimRef,
    ClaimRefused,
    Grant,
    granted,
)
from dra_driver.slices import product_of
from infra.kube.port import KubeError, NotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    request: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""
    reason: str = ""  # why it failed, one of claims.FAILURE_REASONS ("" when prepared)


class Preparer:
    def __init__(
        self,
        driver: str,
        node: str,
        *,
        read_claim: Callable[[str, str], Obj],
        chips: Callable[[], NodeChips],
        checkpoint: Checkpoint,
        cdi: CdiWriter,
        labels: Mapping[str, str] | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.driver = driver
        self.node = node
        self._read_claim = read_claim
        self._chips = chips
        self._checkpoint = checkpoint
        self._cdi = cdi
        self._labels = labels  # the Node's: its product when the chip driver names none
        self._on_change = on_change  # the prepared chips changed (the ringFree hint)
        self._lock = threading.Lock()
        self._prepared = checkpoint.load()
        for stray in cdi.claims_with_specs() - set(self._prepared):
            cdi.remove(stray)  # written before a crash, never recorded: never answered

    def prepared(self) -> dict[str, Prepared]:
        with self._lock:
            return dict(self._prepared)

    def prepared_chips(self) -> frozenset[int]:
        with self._lock:
            return frozenset(c for p in self._prepared.values() for c in p.chips)

    def prepare(self, claims: Iterable[ClaimRef]) -> dict[str, Outcome]:
        with self._lock:
            outcomes = {}
            changed = False
            for ref in claims:
                try:
                    outcomes[ref.uid], fresh = self._prepare(ref)
                    changed |= fresh
                except ClaimRefused as refused:
                    log.warning("claim %s (%s) not prepared: %s", ref, ref.uid, refused)
                    outcomes[ref.uid] = Outcome(error=str(refused), reason=refused.reason)
        if changed:
            self._on_change()
        return outcomes

    def _prepare(self, ref: ClaimRef) -> tuple[Outcome, bool]:
        known = self._prepared.get(ref.uid)
        if known is not None:
            self._cdi.write(ref.uid, known.grants)  # /var/run/cdi may be gone after a reboot
            return self._outcome(ref.uid, known.grants), False
        try:
            claim = self._read_claim(ref.namespace, ref.name)
        except NotFound:
            raise ClaimRefused(f"claim {ref} not found", NOT_FOUND) from None
        except KubeError as failed:
            raise ClaimRefused(f"claim {ref} could not be read: {failed}", API_ERROR) from None
        node = self._chips()
        by_id = {c.id: c for c in node.chips}
        grants = granted(
            claim,
            ref,
            driver=self.driver,
            node=self.node,
            chips=by_id,
            product=product_of(node, self._labels),
        )
        unhealthy = sorted(g.chip for g in grants if not by_id[g.chip].healthy)
        if unhealthy:
            raise ClaimRefused(f"claim {ref}: chips {unhealthy} are unhealthy", UNHEALTHY)
        for uid, other in self._prepared.items():
            if taken := sorted(other.chips & {g.chip for g in grants}):
                raise ClaimRefused(
                    f"claim {ref}: chips {taken} are prepared for claim {other.claim} ({uid})",
                    TAKEN,
                )
        self._cdi.write(ref.uid, grants)
        record = {**self._prepared, ref.uid: Prepared(ref, grants)}
        try:
            self._checkpoint.save(record)
        except OSError as failed:
            self._cdi.remove(ref.uid)
            raise ClaimRefused(
                f"claim {ref}: the checkpoint could not be written: {failed}", CHECKPOINT
            ) from None
        self._prepared = record
        log.info("prepared claim %s (%s): chips %s", ref, ref.uid, [g.chip for g in grants])
        return self._outcome(ref.uid, grants), True

    def _outcome(self, uid: str, grants: tuple[Grant, ...]) -> Outcome:
        return Outcome(
            tuple(
                PreparedDevice(g.request, g.pool, g.device, (self._cdi.device_id(uid, g),))
                for g in grants
            )
        )

    def unprepare(self, claims: Iterable[ClaimRef]) -> dict[str, str]:
        """Each claim's error ("" when unprepared, or never prepared here)."""
        with self._lock:
            errors = {}
            record = dict(self._prepared)
            for ref in claims:
                errors[ref.uid] = ""
                if record.pop(ref.uid, None) is not None:
                    self._cdi.remove(ref.uid)
                    log.info("unprepared claim %s (%s)", ref, ref.uid)
            changed = record != self._prepared
            if changed:
                try:
                    self._checkpoint.save(record)
                except OSError as failed:
                    return {uid: f"the checkpoint could not be written: {failed}" for uid in errors}
                self._prepared = record
        if changed:
            self._on_change()
        return errors
