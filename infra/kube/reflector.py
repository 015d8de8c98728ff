"""A reflector: one collection kept current in memory, as client-go's reflector keeps it.

List once (paginated), then watch from the list's resourceVersion: each event updates the
store, a bookmark moves the version on, a window of a random 5–10 minutes ends and the next
one resumes from the last version, a dropped stream is resumed the same way after a jittered
exponential backoff (0.8 s doubling to 30 s), and only a version the API server no longer
keeps (410 Gone) makes it list again. A list replaces the store and reports the difference,
so whatever was missed while disconnected, the store afterwards equals a fresh read.

Objects are converted as they arrive (``convert``: only the fields the caller reads), so
memory follows what matters, not the API server's objects. ``on_change`` hears every change
(a list's as one batch) under the reflector's lock, in order.

A caller's own write is kept at once (``apply``), but never over a newer watch event: the
object a write returned may arrive after the watch has delivered a later change of it (an
update, or its deletion). As client-go's mutation cache (``k8s.io/client-go/tools/cache/
mutation_cache.go``, ``NewIntegerResourceVersionMutationCache``), versions are compared as
integers when both are numbers (etcd's revisions are; Kubernetes calls them opaque, so any
other form lets the write win) and the newer copy wins. Unlike that cache, which forgets a
write once the key is missing from its store, a deletion is remembered (a tombstone at the
delete's version, for ``TOMBSTONE_TTL``) so that an older write's answer arriving after it
is dropped, not brought back to life.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from infra.kube.port import Gone, KubeError, KubeGateway, Obj, Selection, WatchEvent

log = logging.getLogger(__name__)

T = TypeVar("T")
PAGE_SIZE = 500
WINDOW = (300.0, 600.0)  # seconds a watch stays open, drawn at random (client-go: 5–10 min)
STOP_WAIT = 1.0
# Seconds a deletion is remembered: longer than any write's answer can take to come back
# (the client's request timeout is 10 s). client-go's token controller keeps its mutation
# cache's entries 60 s (pkg/controller/serviceaccount/tokens_controller.go).
TOMBSTONE_TTL = 60.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits after failures: ``first`` doubling up to ``cap``, each drawn at random between
    half and all of it, so thousands of clients do not come back in step."""

    first: float = 0.8
    cap: float = 30.0

    def delay(self, failures: int, rng: random.Random) -> float:
        full = min(self.cap, self.first * 2 ** max(failures - 1, 0))
        return rng.uniform(full / 2, full)


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    key: str  # namespace/name (name alone for objects without a namespace)
    old: T | None  # None: added
    new: T | None  # None: deleted


@dataclass
class Counts:
    lists: int = 0  # full lists (the first one included)
    gone: int = 0  # lists forced by 410 Gone
    watches: int = 0  # watch requests opened
    events: int = 0  # changes applied from watches
    failures: int = 0  # API failures survived


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def newer(candidate: str, current: str, strictly: bool = False) -> bool:
    """Whether ``candidate`` is as new as ``current`` (or newer, ``strictly``). Versions are
    compared only when both are numbers (etcd revisions, the store's counter); else the
    candidate wins."""
    if candidate.isdigit() and current.isdigit():
        return int(candidate) > int(current) if strictly else int(candidate) >= int(current)
    return True


@dataclass(frozen=True, slots=True)
class Drift:
    """Where a store differs from a fresh read of its collection, as kube-scheduler's cache
    comparer reports its cache against its listers (``pkg/scheduler/backend/cache/debugger/
    comparer.go``): keys missed, kept though gone, or kept at an older version. Changes newer
    than the read are not drift."""

    missed: tuple[str, ...] = ()
    redundant: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.missed or self.redundant or self.stale)


@dataclass
class _Entry(Generic[T]):
    version: str
    value: T


@dataclass
class Reflector(Generic[T]):
    gateway: KubeGateway
    what: Selection
    convert: Callable[[Obj], T | None]  # None: not kept (not an object the caller reads)
    on_change: Callable[[list[Change[T]]], None] = lambda changes: None
    on_api_error: Callable[[], None] = lambda: None
    on_loop_error: Callable[[str], None] = lambda name: None
    name: str = ""
    page_size: int = PAGE_SIZE
    window: tuple[float, float] = WINDOW
    backoff: Backoff = field(default_factory=Backoff)
    rng: random.Random = field(default_factory=random.Random)
    counts: Counts = field(default_factory=Counts)
    clock: Callable[[], float] = time.monotonic  # the tombstones' ages

    def __post_init__(self) -> None:
        self.name = self.name or str(self.what)
        self._store: dict[str, _Entry[T]] = {}
        # key → (the deletion's version, when it was learnt), oldest first
        self._tombstones: dict[str, tuple[str, float]] = {}
        self._version = ""  # every change up to this one is in the store
        self._lock = threading.RLock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None

    # ---- reading -------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Listed at least once."""
        return self._synced.is_set()

    def values(self) -> list[T]:
        with self._lock:
            return [e.value for e in self._store.values()]

    def get(self, key: str) -> T | None:
        with self._lock:
            entry = self._store.get(key)
            return None if entry is None else entry.value

    @property
    def version(self) -> str:
        with self._lock:
            return self._version

    @property
    def tombstones(self) -> int:
        """Deletions remembered now (each for ``TOMBSTONE_TTL``)."""
        with self._lock:
            self._prune()
            return len(self._tombstones)

    def compare(self) -> tuple[Drift, dict[str, T]]:
        """The store against a fresh read of the collection (which it leaves as it is): the
        drift, and what the read found."""
        fresh, version = self._read()
        with self._lock:
            ahead = {k for k, e in self._store.items() if newer(e.version, version, True)}
            moved_on = newer(self._version, version, True)  # a deletion may be newer
            drift = Drift(
                missed=tuple(sorted(k for k in fresh if k not in self._store and not moved_on)),
                redundant=tuple(
                    sorted(k for k in self._store if k not in fresh and k not in ahead)
                ),
                stale=tuple(
                    sorted(
                        k
                        for k, e in fresh.items()
                        if k in self._store and newer(e.version, self._store[k].version, True)
                    )
                ),
            )
        return drift, {k: e.value for k, e in fresh.items()}

    def _read(self) -> tuple[dict[str, _Entry[T]], str]:
        """The collection listed (paginated) and converted; the list's resourceVersion. An
        object the store holds at the same resourceVersion keeps its converted value (the
        version changes with every write): a list repeated often converts only what changed."""
        fresh: dict[str, _Entry[T]] = {}
        page = self.gateway.list_page(self.what, self.page_size)
        while True:
            for obj in page.items:  # converted page by page: only what is read stays
                key, version = object_key(obj), _version(obj)
                known = self._store.get(key)
                if known is not None and version and known.version == version:
                    fresh[key] = known
                    continue
                value = self._convert(obj)
                if value is not None:
                    fresh[key] = _Entry(version, value)
            if not page.next:
                return fresh, page.resource_version
            page = self.gateway.list_page(self.what, self.page_size, page.next)

    # ---- writing -------------------------------------------------------------------

    def apply(self, obj: Obj, deleted: bool = False) -> None:
        """An object as the caller's own write returned it: kept at once (unless the store
        has a newer one, or a newer deletion of it), so the caller's next decision sees its
        own write."""
        with self._lock:
            self._prune()
            key, version = object_key(obj), _version(obj)
            old = self._store.get(key)
            if old is not None and not newer(version, old.version):
                return
            tombstone = self._tombstones.get(key)
            if tombstone is not None and not newer(version, tombstone[0], strictly=True):
                return  # deleted since that write: its answer is history
            self._put(key, None if deleted else obj, version, notify=True)

    def relist(self) -> list[T]:
        """List the collection and replace the store with it, reporting the difference; the
        values listed (the store may move on as soon as this returns).

        Watch events wait meanwhile: one applied before the list started is in the list, one
        after it is newer than the list's version and applies on top."""
        with self._lock:
            fresh, version = self._read()
            changes = [
                Change(k, old.value, None) for k, old in self._store.items() if k not in fresh
            ]
            for change in changes:  # deleted by the list's version at the latest
                self._bury(change.key, version)
            for key, entry in fresh.items():
                self._tombstones.pop(key, None)
                old = self._store.get(key)
                if old is None or old.version != entry.version:
                    changes.append(Change(key, None if old is None else old.value, entry.value))
            self._store = fresh
            self._version = version
            self.counts.lists += 1
            self._failing_since = None
            self._synced.set()
            if changes:
                self.on_change(changes)
            return [e.value for e in fresh.values()]

    def _convert(self, obj: Obj) -> T | None:
        try:
            return self.convert(obj)
        except Exception:
            self.on_loop_error(self.name)
            log.exception("%s: %s left out: it could not be read", self.name, object_key(obj))
            return None

    def _put(self, key: str, obj: Obj | None, version: str, notify: bool) -> None:
        """The lock is held."""
        old = self._store.get(key)
        value = None if obj is None else self._convert(obj)
        if obj is None:
            self._bury(key, version)
        else:
            self._tombstones.pop(key, None)
        if value is None:
            self._store.pop(key, None)
        else:
            self._store[key] = _Entry(version, value)
        if notify and (old is not None or value is not None):
            self.on_change([Change(key, None if old is None else old.value, value)])

    def _bury(self, key: str, version: str) -> None:
        """Remember a deletion (the lock is held); moved to the end: the newest."""
        self._tombstones.pop(key, None)
        self._tombstones[key] = (version, self.clock())
        self._prune()

    def _prune(self) -> None:
        """Forget deletions older than ``TOMBSTONE_TTL`` (the lock is held)."""
        oldest = self.clock() - TOMBSTONE_TTL
        while self._tombstones:
            key, (_, learnt) = next(iter(self._tombstones.items()))
            if learnt > oldest:
                return
            del self._tombstones[key]

    def _event(self, event: WatchEvent) -> None:
        version = _version(event.object)
        with self._lock:
            if event.type == "BOOKMARK":
                self._version = version or self._version
                return
            # A list that ran meanwhile may already hold this change, or a newer one.
            if self._version and not newer(version, self._version, strictly=True):
                return
            key = object_key(event.object)
            self._put(key, None if event.type == "DELETED" else event.object, version, True)
            self._version = version or self._version
            self.counts.events += 1

    # ---- the loop ------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch {self.name}", daemon=True)
        self._thread.start()

    def stop(self, wait: float = STOP_WAIT) -> None:
        """Stop following. A watch blocked in the client ends with its next event or
        bookmark (the watch cache sends a quiet watch one a minute: k8s.io/apiserver
        pkg/storage/cacher/cacher.go, defaultBookmarkFrequency): it is waited for at most
        ``wait`` seconds; the thread is a daemon, so shutdown does not wait for it."""
        stop_all([self], wait)

    def failing_for(self) -> float:
        """Seconds since the API server failed it with no success after (0: all is well)."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

    def _run(self) -> None:
        listed = self._synced.is_set()
        failures = 0
        while not self._stop.is_set():
            try:
                if not listed:
                    self.relist()
                    listed = True
                self._follow()
                failures = 0
                self._failing_since = None
            except Gone as gone:
                self.counts.gone += 1
                log.info("%s: %s; listing again", self.name, gone)
                listed = False
            except KubeError as failed:
                failures += 1
                self._failed()
                self.on_api_error()
                wait = self.backoff.delay(failures, self.rng)
                log.warning("%s: %s; trying again in %.1f s", self.name, failed, wait)
                self._stop.wait(wait)
            except Exception:
                failures += 1
                self._failed()
                self.on_loop_error(self.name)
                wait = self.backoff.delay(failures, self.rng)
                log.exception("%s failed; listing again in %.1f s", self.name, wait)
                listed = False
                self._stop.wait(wait)

    def _failed(self) -> None:
        self.counts.failures += 1
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def _follow(self) -> None:
        """One watch window from the current version."""
        self.counts.watches += 1
        stream: Iterable[WatchEvent] = self.gateway.watch(
            self.what, self.version, self.rng.uniform(*self.window)
        )
        for event in stream:
            self._failing_since = None
            if self._stop.is_set():
                return
            self._event(event)


def stop_all(reflectors: Iterable[Reflector[Any]], wait: float = STOP_WAIT) -> None:
    """Stop several reflectors together: all are told first, then each is waited for within
    one shared ``wait`` (told and waited for one by one, seven watches took 7 s)."""
    told = list(reflectors)
    for reflector in told:
        reflector._stop.set()
    deadline = time.monotonic() + wait
    for reflector in told:
        if reflector._thread is not None:
            reflector._thread.join(timeout=max(0.0, deadline - time.monotonic()))
