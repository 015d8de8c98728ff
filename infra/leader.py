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

A replica that stops gives the Lease up at once, as client-go's ``ReleaseOnCancel`` (which
kube-scheduler sets: ``cmd/kube-scheduler/app/options/options.go``), so the other takes over at
its next try rather than a whole lease later. Given its pod, the leader labels it while it may
decide (``PodLabel``), as Patroni labels its primary's pod (``role``, ``patroni/dcs/
kubernetes.py``): a Service selecting the label routes to the leader alone, while every
replica stays Ready (and so may be evicted).
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

from infra.kube.port import KubeError, KubeGateway, NotFound, Obj

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
        # One write at a time: the release waits for a renewal in flight, and none follows it.
        self._writing = threading.Lock()
        # When the last write naming this replica the holder was *sent* (not answered: the
        # write may have landed at any moment after), on the monotonic clock.
        self.renewed_at: float | None = None

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        with self._writing:
            return self._get(name, namespace)

    def _get(self, name: str, namespace: str) -> tuple[bool, Any]:
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
        with self._writing:
            return self._create(name, namespace, election_record)

    def _create(self, name: str, namespace: str, election_record: Any) -> bool:
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
        with self._writing:
            return self._update(name, namespace, updated_record)

    def _update(self, name: str, namespace: str, updated_record: Any) -> bool:
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

    def stop_and_release(self) -> bool:
        """End every later call of the election, and give the lease up if this replica holds
        it (an empty holder, a lease of one second), so another candidate need not wait for it
        to expire; best effort. After a renewal in flight (the lock), on the Lease as it is
        now, as client-go's ``release`` (``tools/leaderelection/leaderelection.go``)."""
        with self._writing:
            self.stopped = True
            self.renewed_at = None
            try:
                lease = self._gateway.get_lease(self.namespace, self.name)
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") != self.identity:
                    return False
                now = to_micro_time(str(datetime.now()))
                released = {
                    **spec,
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "acquireTime": now,
                    "renewTime": now,
                }
                self._gateway.update_lease({**lease, "spec": released})
            except KubeError as failed:
                log.warning("lease %s/%s not released: %s", self.namespace, self.name, failed)
                return False
            return True


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


@dataclass(frozen=True, slots=True)
class PodLabel:
    """The label ``key: value`` a leader puts on its own pod ``namespace/pod`` (from the
    downward API) while it may decide, and takes off otherwise."""

    namespace: str
    pod: str
    key: str
    value: str

    def change(self, leads: bool) -> dict[str, str | None]:
        """The labels to merge into the pod (None removes one)."""
        return {self.key: self.value if leads else None}


class _Labeller:
    """Keeps the pod's label equal to whether this replica may decide: on each change it is
    told of, and every ``period`` (a paused leader that wakes past its renew deadline loses it
    before its election loop learns that it lost). A write that fails is logged once per
    error and tried again a period later. At start what the pod carries is unknown (a
    restarted container may have left the label): the first pass writes it either way."""

    def __init__(
        self, gateway: KubeGateway, label: PodLabel, leads: Callable[[], bool], period: float
    ) -> None:
        self._gateway = gateway
        self.label = label
        self._leads = leads
        self._period = period
        self._written: bool | None = None
        self._error = ""
        self._writing = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-label", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._write(self._leads())
            self._wake.wait(self._period)
            self._wake.clear()

    def _write(self, leads: bool) -> bool:
        with self._writing:
            if leads == self._written:
                return True
            where = f"{self.label.namespace}/{self.label.pod}"
            try:
                self._gateway.patch_pod_labels(
                    self.label.namespace, self.label.pod, self.label.change(leads)
                )
            except KubeError as failed:
                if str(failed) != self._error:
                    log.warning(
                        "pod %s: leader label not written (trying again): %s", where, failed
                    )
                self._error = str(failed)
                return False
            self._written, self._error = leads, ""
            log.info(
                "pod %s %s %s=%s",
                where,
                "labelled" if leads else "not labelled",
                self.label.key,
                self.label.value,
            )
            return True

    def stop(self, within: float) -> None:
        """End the loop, then take the label off, trying again until ``within`` seconds."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        deadline = time.monotonic() + within
        while not self._write(False) and time.monotonic() < deadline:
            time.sleep(0.2)


class LeaderElector:
    """Runs the election on a thread of its own, for ever: leading, losing, following, and
    trying again. ``leading`` is set while the client's loop believes this candidate holds
    the lease; ``may_decide`` says whether it may act on that belief now. Given ``label``,
    the pod it names carries the label while ``may_decide``."""

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
        label: PodLabel | None = None,
    ) -> None:
        self.identity = holder or identity()
        self.leading = threading.Event()
        self._lock = GatewayLeaseLock(gateway, namespace, name, self.identity, monotonic)
        self._on_started = on_started
        self._timing = timing
        self._monotonic = monotonic
        self._thread: threading.Thread | None = None
        self._ended = threading.Event()
        self._labeller = (
            None if label is None else _Labeller(gateway, label, self.may_decide, timing.retry)
        )

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
        self._poke()  # the Service's traffic comes once the view is fresh

    def _stopped(self) -> None:
        self.leading.clear()
        log.warning("%s lost the lease: no more decisions until it leads again", self.identity)
        self._poke()

    def _poke(self) -> None:
        if self._labeller is not None:
            self._labeller.poke()

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
        if self._labeller is not None:
            self._labeller.start()

    def stop(self) -> None:
        """Stop deciding at once, take the label off the pod, give the lease up if held (so
        the other replica takes over at its next try), and end the election."""
        self.leading.clear()
        self._ended.set()
        if self._labeller is not None:
            self._labeller.stop(within=self._timing.renew_deadline)
        if self._lock.stop_and_release():
            log.info("%s released %s/%s", self.identity, self._lock.namespace, self._lock.name)
        if self._thread is not None:
            self._thread.join(timeout=self._timing.retry + 1)
