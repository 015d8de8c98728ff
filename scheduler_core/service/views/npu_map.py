"""The live NPU map (``--npu-map``): the scheduler's own view as a page an admin watches.

``GET /map`` is a static page (``npu_map.html``, ``npu_map.js``, ``npu_map.css`` beside this
file), ``GET /map/state`` the view as JSON: nodes grouped by SuperPoD and ToR, each node's chips
in its product's topology (``chip_topology.products``: 910's two HCCS rings of 4, 910B's full
mesh of 8, inference cards), each chip free, held (by which pod) or faulty, the nodes left out
and why, and the gangs waiting and why. Served on the verbs' port behind the verbs'
authentication, read-only.

The page polls ``/map/state`` (every 500 ms) with the last ETag; unchanged, the answer is a 304
without a body. Polling rather than server-sent events: an event stream holds a connection
(``infra.http_connections.Limits.max_connections``) for as long as a tab stays open, and
one of the bounded handler threads whenever it writes, where a poll holds one for a
millisecond. The snapshot is built from the view at most once per ``MAX_AGE`` whoever polls
(``benchmarks/npu_map.py``: its cost at 5,000 nodes).

Everything a tenant writes (pod names, namespaces, gang names) reaches the page as JSON
strings that the script puts in the DOM with ``textContent`` only; the page's
Content-Security-Policy allows no inline script and no other origin.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import msgspec

from chip_topology.products import Family, Product
from chip_topology.routing import product_by_name
from infra.http import Response
from scheduler_core.engine import locality
from scheduler_core.engine.model import NodeState
from scheduler_core.service.state.extender_state import ExtenderState
from scheduler_core.service.state.holds import WaitingGang

MAX_AGE = 0.25  # seconds a built snapshot is served before the view is read again
FREE, HELD, FAULTY = "free", "held", "faulty"
# How the page draws a product's groups of chips.
LAYOUTS = {
    Family.ASCEND910: "rings",
    Family.ASCEND910B: "mesh",
    Family.ASCEND910A3: "cards",  # an A3 die: a package of two chips, drawn as a card
    Family.INFERENCE: "cards",
}
# The page's own files and no other origin; no inline script or style, no frames, no forms.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
)
FILES = {  # path → (package file, content type)
    "/map": ("npu_map.html", "text/html; charset=utf-8"),
    "/map/map.js": ("npu_map.js", "text/javascript; charset=utf-8"),
    "/map/map.css": ("npu_map.css", "text/css; charset=utf-8"),
}
STATE = "/map/state"
PATHS = frozenset(FILES) | {STATE}


@dataclass(frozen=True, slots=True)
class MapInputs:
    """What the map shows, read from the scheduler's view at one moment."""

    nodes: Mapping[str, NodeState]  # the NPU nodes the session offers
    usable: Mapping[str, Collection[int]]  # node → chips it may offer now
    holders: Mapping[str, Mapping[int, str]]  # node → chip → the pod holding it
    left_out: Mapping[str, str]  # node → why it is not used
    network: locality.Network
    waiting: Mapping[str, WaitingGang]  # gang → as its last try saw it
    now: float


def read_view(state: ExtenderState, holders: Mapping[str, Mapping[int, str]]) -> MapInputs:
    """The map's inputs from the extender's state, read under its lock (the verbs wait for
    it as long as this takes: copies of a few mappings, no per-chip work)."""
    with state.lock:
        nodes = dict(state.session.nodes)
        return MapInputs(
            nodes,
            {name: state.session.usable(name) for name in nodes},
            holders,
            dict(state.left_out),
            state.network_view(),
            dict(state.gangs.waiting),
            state.clock(),
        )


def _chip(chip: int, node: NodeState, usable: Collection[int], holders: Mapping[int, str]) -> Any:
    """``[id, state, holder]``: faulty (unhealthy, or its network is), free (offered now), or
    held (by the pod named, or "" while the scheduler holds it: assumed, reserved)."""
    if chip in node.unhealthy or chip in node.network_unhealthy:
        return [chip, FAULTY, ""]
    if chip in usable:
        return [chip, FREE, ""]
    return [chip, HELD, holders.get(chip, "")]


def _groups(product: Product, known: Collection[int]) -> tuple[tuple[int, ...], ...]:
    """The product's groups to draw: an inference product names up to 64 chips, so only the
    cards up to the highest chip the node knows (as ``chip_topology.diagram`` draws them)."""
    if not product.rules.draw_known_groups:
        return product.groups
    top = max(known, default=-1)
    return tuple(g for g in product.groups if g[0] <= top)


def node_json(
    node: NodeState, usable: Collection[int], holders: Mapping[int, str], network: locality.Network
) -> dict[str, Any]:
    """One node as the page draws it: its product's groups of chips (``layout``: how they
    are linked), each chip ``[id, state, holder]``."""
    product = product_by_name(node.product)  # the session keeps only nodes of a known one
    groups = _groups(product, {*node.free, *node.unhealthy, *holders})
    return {
        "name": node.name,
        "product": node.product,
        "layout": LAYOUTS[product.family],
        "groups": [[_chip(c, node, usable, holders) for c in group] for group in groups],
        "sub_healthy": node.name in network.sub_healthy,
    }


def _key(value: int | None) -> tuple[bool, int]:
    return (value is None, value or 0)


Drawn = dict[str, Any] | msgspec.Raw  # a node as the page reads it, or its JSON already
NodeCache = dict[str, tuple[tuple[Any, ...], msgspec.Raw]]  # node → its inputs, its JSON


def _tree(inputs: MapInputs, draw: Callable[[str], Drawn]) -> dict[str, Any]:
    network = inputs.network
    tree: dict[int | None, dict[int | None, list[Drawn]]] = {}
    for name in sorted(inputs.nodes):
        pod = network.super_pods.get(name)
        tree.setdefault(pod, {}).setdefault(network.tor_of(name), []).append(draw(name))
    return {
        "superpods": [
            {
                "id": pod,
                "tors": [{"id": t, "nodes": tors[t]} for t in sorted(tors, key=_key)],
            }
            for pod, tors in sorted(tree.items(), key=lambda item: _key(item[0]))
        ],
        "left_out": [{"name": n, "reason": r} for n, r in sorted(inputs.left_out.items())],
        "gangs": [
            {
                "name": gang,
                "product": wait.product,
                "npu": wait.npu,
                "missing": wait.missing,
                "waiting_seconds": max(0, int(inputs.now - wait.since)),
                "reason": wait.reason,
            }
            for gang, wait in sorted(inputs.waiting.items())
        ],
    }


def _inputs_of(inputs: MapInputs, name: str) -> tuple[Any, ...]:
    return (
        inputs.nodes[name],
        inputs.usable.get(name, ()),
        inputs.holders.get(name, {}),
        inputs.network,
    )


def snapshot(inputs: MapInputs) -> dict[str, Any]:
    """The map's JSON: SuperPoDs (``null``: nodes in none) of ToRs (``null``: not in the ToR
    topology) of nodes, the nodes left out, the waiting gangs; every list in a stable order so
    an unchanged view gives the same bytes (and ETag)."""
    return _tree(inputs, lambda name: node_json(*_inputs_of(inputs, name)))


def encode(inputs: MapInputs, cache: NodeCache) -> bytes:
    """``snapshot(inputs)`` as JSON, each node encoded again only when what it is drawn from
    changed since the last call (``cache``, updated: at 5,000 nodes most are as they were)."""
    kept = dict(cache)
    cache.clear()

    def draw(name: str) -> msgspec.Raw:
        node, usable, holders, network = _inputs_of(inputs, name)
        key = (node, usable, holders, name in network.sub_healthy)
        last = kept.get(name)
        if last is not None and last[0] == key:
            cache[name] = last
        else:
            cache[name] = (
                key,
                msgspec.Raw(msgspec.json.encode(node_json(*_inputs_of(inputs, name)))),
            )
        return cache[name][1]

    return msgspec.json.encode(_tree(inputs, draw))


def _file(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


class NpuMap:
    """The map's routes over a reader of the view; the snapshot built at most once per
    ``max_age`` seconds (the page's viewers share it)."""

    def __init__(
        self,
        read: Callable[[], MapInputs],
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._max_age = max_age
        self._clock = clock
        self._files = {path: (_file(name), kind) for path, (name, kind) in FILES.items()}
        self._lock = threading.Lock()
        self._built: tuple[float, bytes, str] | None = None  # when, the JSON, its ETag
        self._nodes: NodeCache = {}

    def state(self) -> tuple[bytes, str]:
        """The snapshot's JSON and its ETag (a hash of it: equal views, equal tags)."""
        with self._lock:
            now = self._clock()
            if self._built is None or now - self._built[0] >= self._max_age:
                body = encode(self._read(), self._nodes)
                tag = '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
                self._built = (now, body, tag)
            return self._built[1], self._built[2]

    def get(self, path: str) -> Response | None:
        """The answer to a GET of the map's paths (the query ignored); None for others."""
        path = path.partition("?")[0]
        if path == STATE:
            body, tag = self.state()
            return Response(200, body, headers=(*SECURITY_HEADERS, ("ETag", tag)))
        if path in self._files:
            body, kind = self._files[path]
            return Response(200, body, kind, headers=SECURITY_HEADERS)
        return None
