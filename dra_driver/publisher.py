"""The node's ResourceSlice kept as the chips are: a small controller, as the Go helper's
``resourceslice`` controller (``k8s.io/dynamic-resource-allocation/resourceslice/
resourceslicecontroller.go``) keeps a driver's slices.

It watches this driver's slices of this node (field selectors ``spec.driver`` and
``spec.nodeName``, through a reflector), and one worker makes them what they should be: the
slice created when missing (the kubelet deletes a node's slices when it starts, and a
driver's 30 s after it went away), replaced when the chips changed (health, or the
``ringFree`` hint after a prepare or unprepare), any other slice of this driver on the node
deleted. After each write the stored object is compared with what was sent: fields the API
server dropped silently (a feature gate it has off) are named in the log once and in
``dropped``, and not sent for again and again.

``published``: the last pass ended with the slice stored as it should be, and the watch
still holds it (a deleted slice is not published until the next pass has written it again).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping

from chip_drivers.chips import NodeChips
from contract.dra import SLICE_KIND, slice_name
from contract.objects import Obj, node_address
from dra_driver.slices import desired_slice, dropped_fields, ring_free
from infra.kube.port import Conflict, KubeError, KubeGateway, NotFound, Selection
from infra.kube.reflector import STOP_WAIT, Backoff, Change, Reflector

log = logging.getLogger(__name__)
RESYNC = 30.0  # seconds: the slice checked even without a change


class SlicePublisher:
    def __init__(
        self,
        gateway: KubeGateway,
        driver: str,
        node: str,
        chips: Callable[[], NodeChips],
        prepared_chips: Callable[[], frozenset[int]],
        *,
        ring_free_hint: bool = True,
        tor_ip: Callable[[], str | None] = lambda: None,
        labels: Mapping[str, str] | None = None,
        backoff: Backoff | None = None,
        on_watch_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda name: None,
    ) -> None:
        self._gateway = gateway
        self.driver = driver
        self.node = node
        self.name = slice_name(node, driver)
        self._chips = chips
        self._prepared_chips = prepared_chips
        self._ring_free_hint = ring_free_hint
        self._tor_ip = tor_ip
        self._labels = labels  # the Node's: its product when the chip driver names none
        self._backoff = backoff or Backoff(0.2, 10.0)
        self._node_uid = ""
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sent: tuple[Obj, Obj] | None = None  # (spec sent, spec stored) of the last write
        self.dropped: list[str] = []
        self.address = ""  # the node's InternalIP, read with its UID
        self.writes = 0
        self.failures = 0
        self._passed = False  # the last pass ended with the slice as it should be
        self.slices: Reflector[Obj] = Reflector(
            gateway,
            Selection(SLICE_KIND, fields=f"spec.driver={driver},spec.nodeName={node}"),
            lambda obj: obj,
            self._changed,
            on_watch_error,
            on_loop_error,
            name="resourceslices",
        )

    def _changed(self, changes: list[Change[Obj]]) -> None:
        self.wake()

    def wake(self) -> None:
        """Something the slice says may have changed: look again."""
        self._wanted.set()

    def start(self) -> None:
        self._wanted.set()  # the first publication
        self.slices.start()
        self._thread = threading.Thread(target=self._run, name="slice-publisher", daemon=True)
        self._thread.start()

    @property
    def published(self) -> bool:
        return self._passed and self.slices.get(self.name) is not None

    def published_devices(self) -> int:
        """Devices in the slice as the API server stores it (0 while there is none)."""
        stored = self.slices.get(self.name) or {}
        return len((stored.get("spec") or {}).get("devices") or [])

    def stop(self) -> None:
        """Stop; a pass in flight is waited for ``STOP_WAIT`` at most, the watch not at all
        (it ends with its next event or bookmark; a stopping driver must not wait)."""
        self._stop.set()
        self._wanted.set()
        self.slices.stop(wait=0)
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wanted.wait(timeout=RESYNC)
            self._wanted.clear()
            if self._stop.is_set():
                return
            try:
                self.publish()
                failures = 0
            except KubeError as failed:
                failures += 1
                self.failures += 1
                self._passed = False
                log.warning("ResourceSlice %s not published: %s", self.name, failed)
                self._stop.wait(self._backoff.delay(failures, self.slices.rng))
                self._wanted.set()

    def desired(self) -> Obj:
        chips = self._chips()
        labels = self._labels
        free = ring_free(chips, self._prepared_chips(), labels) if self._ring_free_hint else None
        return desired_slice(
            self.driver,
            self.node,
            self._node_uid,
            chips,
            labels=labels,
            free=free,
            tor_ip=self._tor_ip(),
        )

    def publish(self) -> None:
        """One pass: the slice made what it should be (KubeError when a call fails)."""
        if not self.slices.synced:
            self.slices.relist()
        if not self._node_uid:
            node = self._gateway.get_node(self.node)
            self._node_uid = str(node["metadata"].get("uid", ""))
            self.address = node_address(node)
        for other in self.slices.values():
            name = other["metadata"]["name"]
            if name != self.name:
                log.info("deleting ResourceSlice %s: not this driver's slice of the node", name)
                with contextlib.suppress(NotFound):
                    self._gateway.delete_object(SLICE_KIND, "", name)
        wanted = self.desired()
        current = self.slices.get(self.name)
        if current is not None and self._published(current, wanted):
            self._passed = True
            return
        try:
            if current is None:
                stored = self._gateway.create_object(SLICE_KIND, wanted)
            else:
                wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                stored = self._gateway.replace_object(SLICE_KIND, wanted)
        except (Conflict, NotFound):
            self._passed = False
            self.slices.relist()  # another writer, or the kubelet's wipe: look again
            self._wanted.set()
            return
        self.writes += 1
        self._passed = True
        self.slices.apply(stored)
        self._sent = (wanted["spec"], stored.get("spec") or {})
        dropped = dropped_fields(wanted["spec"], stored.get("spec") or {})
        if dropped and dropped != self.dropped:
            log.error(
                "the API server dropped fields of ResourceSlice %s (a feature gate off?): %s",
                self.name,
                ", ".join(dropped),
            )
        self.dropped = dropped

    def _published(self, current: Obj, wanted: Obj) -> bool:
        """The stored slice is what this spec gives (as the API server stores it)."""
        stored = current.get("spec")
        if stored == wanted["spec"]:
            return True
        return self._sent is not None and self._sent == (wanted["spec"], stored)
