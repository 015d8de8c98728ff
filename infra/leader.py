"""Leader election on a coordination.k8s.io/v1 Lease, through the Kubernetes port.

The election itself is the official client's (``kubernetes.leaderelection``); only its lock
is ours, so the same election runs over the official client and over the in-memory store of
the tests. Defaults are kube-scheduler's: a lease of 15 s, renewed every 2 s, given up when
not renewed for 10 s (a leader that cannot renew stops deciding before another may start).

The client's loop learns it lost the lease only when it next tries to renew, and a paused
process (SIGSTOP, a long GC, a frozen VM) wakes up still believing it leads. So whether this
replica may decide is not the loop's flag alone: ``may_decide`` also asks that the last
renewal this replica wrote be younger than the renew deadline on the monotonic clock, and that
the election thread be alive. Another candidate takes over only once a whole lease has passed
since it saw that renewal, so a replica that obeys ``may_decide`` never decides beside it
(client-go's ``LeaderElector.IsLeader`` plus the renew deadline, ``leaderelection.go``).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

from contract.objects import Obj
from infra.kube.port import KubeError, KubeGateway, NotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Timing:
    lease: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        # The client's election exits the process on these; say so before it starts.
        if not self.lease > self.renew_deadline > 1.2 * self.retry >= 1.2:
            raise ValueError(
                f"leader election needs lease {self.lease} s > renew deadline "
                f"{self.renew_deadline} s > 1.2 x retry period {self.retry} s, retry >= 1 s"
            )


def identity() -> str:
    """``<hostname>_<uuid>``, as kube-scheduler names its candidates."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class _Stopped(Exception):
    """Raised by a stopped lock, to end the client's election loop (it has no stop)."""


class _Missing:
    """What the election reads as "no such lock": an error whose body says 404."""

    def __init__(self, code: int, reason: str) -> None:
        self.body = json.dumps({"code": code})
        self.reason = reason


def to_micro_time(text: str) -> str:
    """The election's ``str(datetime)`` (local, naive) as a Lease MicroTime (UTC)."""
    return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_micro_time(micro: str) -> str:
    """A Lease MicroTime back as the election's ``str(datetime)``. The API's MicroTime is
    RFC 3339 with microseconds, but writers differ in the zone (``Z``, ``+00:00``, another
    offset) and in the fraction (none, milli, micro): accept them all; no zone means UTC."""
    moment = datetime.fromisoformat(micro)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return str(moment.astimezone().replace(tzinfo=None))


class GatewayLeaseLock:
    """The lock interface ``kubernetes.leaderelection`` expects, on a Lease of the port."""

    def __init__(
        self,
        gateway: KubeGateway,
        namespace: str,
        name: str,
        holder: str,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gateway = gateway
        self.namespace = namespace
        self.name = name
        self.identity = holder
        self.stopped = False
        self._current: Obj | None = None
        self._monotonic = monotonic
        # When the last write naming this replica the holder was *sent* (not answered: the
        # write may have landed at any moment after), on the monotonic clock.
        self.renewed_at: float | None = None

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        if self.stopped:
            raise _Stopped
        try:
            lease = self._gateway.get_lease(namespace, name)
        except NotFound as missing:
            return False, _Missing(404, str(missing))
        except KubeError as failed:
            return False, _Missing(503, str(failed))
        self._current = lease
        spec = lease.get("spec") or {}
        if not spec.get("holderIdentity"):
            return True, None
        return True, LeaderElectionRecord(
            spec["holderIdentity"],
            str(spec.get("leaseDurationSeconds", "")),
            from_micro_time(spec["acquireTime"]) if spec.get("acquireTime") else None,
            from_micro_time(spec["renewTime"]) if spec.get("renewTime") else None,
        )

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if self.stopped:
            raise _Stopped
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": _spec(election_record, None),
        }
        sent = self._monotonic()
        try:
            self._current = self._gateway.create_lease(body)
        except KubeError as failed:
            log.info("lease %s/%s not created: %s", namespace, name, failed)
            return False
        self._wrote(election_record, sent)
        return True

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.stopped:
            raise _Stopped
        if self._current is None:
            return False
        body = {**self._current, "spec": _spec(updated_record, self._current)}
        sent = self._monotonic()
        try:
            self._current = self._gateway.update_lease(body)
        except KubeError as failed:  # a Conflict: someone else wrote it first
            log.info("lease %s/%s not updated: %s", namespace, name, failed)
            return False
        self._wrote(updated_record, sent)
        return True

    def _wrote(self, record: Any, sent: float) -> None:
        self.renewed_at = sent if record.holder_identity == self.identity else None

    def release(self) -> None:
        """Give the lease up (an empty holder), so another candidate need not wait for it to
        expire; best effort."""
        if self._current is None or (self._current.get("spec") or {}).get("holderIdentity") != (
            self.identity
        ):
            return
        spec = {**self._current["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
        self.renewed_at = None
        try:
            self._gateway.update_lease({**self._current, "spec": spec})
        except KubeError as failed:
            log.info("lease %s/%s not released: %s", self.namespace, self.name, failed)


def _spec(record: Any, previous: Obj | None) -> Obj:
    """The Lease's spec for ``record``; ``leaseTransitions`` counted as client-go counts it
    (``tools/leaderelection/leaderelection.go`` ``tryAcquireOrRenew``: kept while the same
    holder renews, one more whenever another takes it). The Python client's record has no
    such field: without this, every write dropped it (seen on the real API server)."""
    prior = (previous or {}).get("spec") or {}
    transitions = int(prior.get("leaseTransitions") or 0)
    if previous is not None and prior.get("holderIdentity") != record.holder_identity:
        transitions += 1
    return {
        "holderIdentity": record.holder_identity,
        "leaseDurationSeconds": int(float(record.lease_duration)),
        "acquireTime": to_micro_time(record.acquire_time),
        "renewTime": to_micro_time(record.renew_time),
        "leaseTransitions": transitions,
    }


class LeaderElector:
    """Runs the election on a thread of its own, for ever: leading, losing, following, and
    trying again. ``leading`` is set while the client's loop believes this candidate holds
    the lease; ``may_decide`` says whether it may act on that belief now."""

    def __init__(
        self,
        gateway: KubeGateway,
        namespace: str,
        name: str,
        *,
        on_started: Callable[[], None] = lambda: None,
        timing: Timing = Timing(),
        holder: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity = holder or identity()
        self.leading = threading.Event()
        self._lock = GatewayLeaseLock(gateway, namespace, name, self.identity, monotonic)
        self._on_started = on_started
        self._timing = timing
        self._monotonic = monotonic
        self._thread: threading.Thread | None = None
        self._ended = threading.Event()

    def may_decide(self) -> bool:
        """Whether this replica may decide now: it leads, its election is alive, and its last
        renewal is younger than the renew deadline. Checked at every verb and again right
        before a decision is written (a decision made while leading may not land after)."""
        renewed = self._lock.renewed_at
        return (
            self.leading.is_set()
            and self._thread is not None
            and self._thread.is_alive()
            and renewed is not None
            and self._monotonic() - renewed < self._timing.renew_deadline
        )

    def _started(self) -> None:
        self._on_started()  # e.g. a fresh view of the cluster before the first decision
        self.leading.set()
        log.info("%s leads %s/%s", self.identity, self._lock.namespace, self._lock.name)

    def _stopped(self) -> None:
        self.leading.clear()
        log.warning("%s lost the lease: no more decisions until it leads again", self.identity)

    def start(self) -> None:
        config = electionconfig.Config(
            self._lock,
            lease_duration=self._timing.lease,
            renew_deadline=self._timing.renew_deadline,
            retry_period=self._timing.retry,
            onstarted_leading=self._started,
            onstopped_leading=self._stopped,
        )

        def run() -> None:
            while not self._lock.stopped:
                try:
                    leaderelection.LeaderElection(config).run()
                except _Stopped:
                    return
                except Exception:
                    # Whatever broke the client's loop, this replica no longer knows whether
                    # it leads: it stops deciding, and runs the election again a period later.
                    self.leading.clear()
                    self._lock.renewed_at = None
                    log.exception("%s: the leader election failed; following", self.identity)
                    if self._ended.wait(self._timing.retry):
                        return

        self._thread = threading.Thread(target=run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop deciding at once, give the lease up if held, and end the election."""
        leading = self.leading.is_set()
        self.leading.clear()
        self._lock.stopped = True
        self._ended.set()
        if leading:
            self._lock.release()
        if self._thread is not None:
            self._thread.join(timeout=self._timing.retry + 1)
