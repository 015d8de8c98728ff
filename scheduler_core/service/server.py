"""The scheduler service's wiring: the parts (``state``, ``verbs``, ``controllers``,
``views``) built and joined, the routes (``routes``) served behind who may call them
(``access``), the election (``election``) followed, and the lifecycle: start, the maintenance
pass, readiness, stop.

The cluster is read once and then watched (``state.informers``): each change reaches the
extender's state as it arrives. ``GET /readyz`` is ready while every watch is well and was
last seen well recently, leader or not: every replica may be evicted (docs/ha.md); ``GET
/leader`` answers 200 only while this replica answers the verbs, as Patroni's. Every
``refresh_period`` a maintenance pass, which reads nothing, lets time act (DeviceInfo ageing,
assumed binds and reservations expiring) and, on the leader, runs the controllers: the pods of
fault jobs deleted so they restart, what changed of ``volcano-system/vcjob-fault-npu-cm``, the
jobs' ``fault-config-<job>`` and ``reset-config-<job>`` and ``volcano-system/tor-share-cm``
written, the pods whose vNPU could not be made deleted.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

from infra.http import HttpServer, Limits
from infra.kube.port import KubeError, KubeGateway
from scheduler_core.service.access import OPEN, Access
from scheduler_core.service.controllers.configmaps import OwnedConfigMaps, TorShare
from scheduler_core.service.controllers.creations import FailedCreations
from scheduler_core.service.controllers.malformed import MalformedPods
from scheduler_core.service.controllers.reset_configs import ResetConfigs
from scheduler_core.service.controllers.restarts import FaultRestarter
from scheduler_core.service.election import Election, elector
from scheduler_core.service.routes import COMPARE_PERIOD, Routes
from scheduler_core.service.state.informers import ClusterInformers
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.verbs.volcano import VolcanoVerbs
from scheduler_core.service.views.metrics import Metrics, read_cluster
from scheduler_core.service.views.npu_map import NpuMap, read_view

log = logging.getLogger(__name__)

STALE_PERIODS = 3  # not ready once the last good read is this many periods old


class SchedulerService:
    def __init__(
        self,
        gateway: KubeGateway,
        extender: Extender,
        refresh_period: float = 1.0,
        self_maintain: bool = True,
        clock: Callable[[], float] = time.time,
        *,
        election: Election | None = None,
        compare_period: float = COMPARE_PERIOD,
        npu_map: bool = False,
        noded: bool = False,
        clusterd: bool = False,
        force_enqueue: bool = True,
    ) -> None:
        self.extender = extender
        # With an election, only the leader answers the verbs and carries the label the
        # Service selects; every replica is ready while its view is fresh, and the others keep
        # reading the cluster, so a new leader starts warm (and reads it once more first).
        self.leader = None if election is None else elector(gateway, election, self._lead)
        if self.leader is not None:
            extender.state.fence = self.leader.may_decide  # re-checked before a decision is written
        state = extender.state
        self.metrics = Metrics(lambda: state.binds, state.node_count)
        self.metrics.read(lambda: read_cluster(state, self.deciding()), state.gangs.ttl)
        malformed = MalformedPods(state.events, lambda: self.metrics.malformed("pod"))
        self.informers = ClusterInformers(
            gateway,
            extender.state,
            clock,
            self_maintain=self_maintain,
            noded=noded,
            clusterd=clusterd,
            on_pods=malformed.report,
            on_api_error=self.metrics.watch_failed,
            on_loop_error=self.metrics.loop_failed,
        )
        self._period = refresh_period
        self._clock = clock
        self._stop = threading.Event()
        self._server: HttpServer | None = None
        self._metrics_server: HttpServer | None = None
        self.metrics_url = ""
        self._thread: threading.Thread | None = None
        self._last_read: float | None = None
        self._reading = threading.Lock()  # one read or maintenance pass at a time
        # The controllers the leader runs at each maintenance pass, in this order.
        configmaps = OwnedConfigMaps(gateway)
        self.restarts = FaultRestarter(gateway, state, configmaps, self.informers.fault_record_data)
        self.controllers: tuple[Callable[[], None], ...] = (
            self.restarts.run,
            ResetConfigs(gateway, state).run,
            FailedCreations(gateway, state, self.metrics.vnpu_restarted).run,
            TorShare(state, configmaps).run,
        )
        # The live NPU map (--npu-map): on the verbs' port only, behind their authentication.
        shown = NpuMap(lambda: read_view(state, self.informers.holders())) if npu_map else None
        self.routes = Routes(
            extender,
            VolcanoVerbs(extender, self._fresh_view, force_enqueue),
            self.informers,
            self.metrics,
            shown,
            deciding=self.deciding,
            ready=self.ready,
            compare_period=compare_period,
        )

    def refresh(self) -> None:
        """Read the whole cluster again (the first read; a new leader's), then maintain."""
        self.informers.relist()
        self.maintain()

    def maintain(self) -> None:
        """The periodic pass: time acts on the view, fault jobs restart, the scheduler's
        ConfigMaps are written when they changed. It reads nothing from the API server."""
        self.restarts.restore_once()
        self.informers.tick()
        self.extender.state.expire()  # holds and assumed binds, on a standby's view too
        if self.deciding():  # a standby deletes and writes nothing: the leader does
            for controller in self.controllers:
                controller()
        if self.informers.healthy():
            self._last_read = self._clock()

    def _maintain_loop(self) -> None:
        # start() has just read the cluster: the first pass is one period later.
        while not self._stop.wait(self._period):
            with self._reading:
                self._safely(self.maintain)

    def _lead(self) -> None:
        """This replica now leads: read everything once more, fault record included."""
        self.restarts.lead()
        self.refresh_once_safely()

    def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        access: Access = OPEN,
        metrics_at: tuple[str, int] | None = None,
    ) -> str:
        """Serve the verbs (and the probes and metrics) on ``host:port``, and the probes and
        metrics alone on ``metrics_at`` too when given (a port a NetworkPolicy can open to
        monitoring while the verbs' port admits only the schedulers)."""
        self.refresh_once_safely()
        self.extender.state.warm()
        # The view lives as long as the service; keep the cyclic collector from walking it
        # on every pause (at 5,000 nodes those walks were the tail of each request).
        gc.freeze()
        self.informers.start()
        self._server = HttpServer(
            "extender",
            self.routes.get_with_map,
            self.routes.post,
            # Volcano posts its whole session at onSessionOpen (jobs, nodes, queues: tens of
            # MiB at a few thousand nodes), which the service reads none of, and every node's
            # NodeInfo at prioritize (past 8 MiB from ~2,600 nodes), which it must read.
            limits=Limits(
                drained=frozenset({"/volcano/onSessionOpen"}),
                large=frozenset({"/volcano/prioritize"}),
            ),
            tls=access.tls,
            guard=lambda caller: access.guard(caller, self.metrics.refused),
            guarded_get=self.routes.guarded_get,
        )
        url = self._server.start(host, port)
        if metrics_at is not None:
            self._metrics_server = HttpServer("scheduler-metrics", self.routes.get)
            self.metrics_url = self._metrics_server.start(*metrics_at)
        self._thread = threading.Thread(target=self._maintain_loop, name="maintain", daemon=True)
        self._thread.start()
        if self.leader is not None:
            self.leader.start()
        return url

    def _fresh_view(self) -> None:
        """Volcano opens a session: the watches keep the view current; a service that does
        not watch (a test's) reads the cluster at most once a period for it."""
        if self.informers.watching:
            return
        with self._reading:
            last = self._last_read
            if last is None or self._clock() - last >= self._period:
                self._safely(self.refresh)

    def refresh_once_safely(self) -> None:
        """One read of the whole cluster; no failure stops anything: it is counted, logged,
        and ``/readyz`` turns false once the last good read is three periods old."""
        with self._reading:
            self._safely(self.refresh)

    def _safely(self, step: Callable[[], None]) -> None:
        try:
            step()
        except KubeError as failed:
            self.metrics.refresh_failed()
            log.warning("cluster not read: %s", failed)
        except Exception:
            self.metrics.refresh_failed()
            log.exception("refresh failed")

    def ready(self) -> bool:
        """The cluster has been read, and not too long ago: this replica could lead now.
        Leader or not: were only the leader ready, a PodDisruptionBudget could never let it
        be evicted (a node drain would hang); the leader label routes the verbs instead."""
        last = self._last_read
        return last is not None and self._clock() - last <= STALE_PERIODS * self._period

    def deciding(self) -> bool:
        """Whether this replica decides now: there is no election, or it leads and has
        renewed its lease within the renew deadline."""
        return self.leader is None or self.leader.may_decide()

    def stop(self) -> None:
        # The election first: the other replica takes over while this one winds down.
        if self.leader is not None:
            self.leader.stop()
        self._stop.set()
        self.informers.stop()
        for server in (self._server, self._metrics_server):
            if server is not None:
                server.stop()
