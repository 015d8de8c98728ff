"""kube-scheduler's DRA allocation, as a stand-in for tests, the demo and the trace replay:
which devices of a node satisfy a pod's claims, and the node score.

Written from the structured allocator of Kubernetes 1.35 (``k8s.io/dynamic-resource-
allocation/structured/internal/stable/allocator_stable.go``) and the ``DynamicResources``
plugin, as ``shared/reference/dra.md`` §3.4, §6.6 and §8 describe them:

- a node's devices are those of its node-local slices (the highest generation of each pool),
  in pool, slice and list order; a device allocated to any claim is in use;
- each request in order: ``exactly`` (its class's selectors and its own, all true; a count,
  or ``All`` matching devices) or ``firstAvailable`` (its subrequests tried in order);
- ``matchAttribute`` constraints: every device of the requests named (all, when none are)
  has the attribute, all with one value; a device without it is never chosen for them;
- first fit, with backtracking: the first complete solution in that order wins, nothing
  scores devices (upstream has no device scoring yet);
- the node score: for every ``firstAvailable`` request, 8 minus the index of the subrequest
  taken, summed over the pod's claims (the earlier rungs of a ladder score higher).

CEL selectors are evaluated by cel-python over ``device.driver``, ``device.attributes`` and
``device.capacity`` grouped by domain (the driver's own attributes under its name); an
evaluation error fails the allocation, as upstream's does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from contract.objects import Obj

MAX_SUBREQUESTS = 8  # the score's base: firstAvailable holds at most 8


class AllocationError(RuntimeError):
    """The claim cannot be allocated at all (an expression fails, a class is missing)."""


@dataclass(frozen=True, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Any]  # qualified name (bare in the driver's domain) → value
    capacity: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name

    def attribute(self, qualified: str) -> Any:
        """``domain/id``: the driver's own attributes are stored without their domain."""
        domain, _, ident = qualified.rpartition("/")
        if domain == self.driver and ident in self.attributes:
            return self.attributes[ident]
        return self.attributes.get(qualified)


@dataclass(frozen=True, slots=True)
class Choice:
    request: str  # ``name`` or ``name/subrequest``
    devices: tuple[Device, ...]
    rank: int | None  # the subrequest's index for firstAvailable


def _value(attribute: Mapping[str, Any]) -> Any:
    for kind in ("int", "bool", "string", "version"):
        if kind in attribute:
            return attribute[kind]
    return None


def node_devices(slices: Iterable[Obj], node: str) -> list[Device]:
    """The devices of the node's slices, in pool, slice and list order, of each pool's
    highest generation only."""
    mine = [s for s in slices if (s.get("spec") or {}).get("nodeName") == node]
    newest: dict[tuple[str, str], int] = {}
    for item in mine:
        spec = item["spec"]
        pool = (spec["driver"], spec["pool"]["name"])
        newest[pool] = max(newest.get(pool, 0), int(spec["pool"]["generation"]))
    devices = []
    for item in sorted(mine, key=lambda s: (s["spec"]["pool"]["name"], s["metadata"]["name"])):
        spec = item["spec"]
        if int(spec["pool"]["generation"]) != newest[(spec["driver"], spec["pool"]["name"])]:
            continue
        for device in spec.get("devices") or []:
            devices.append(
                Device(
                    spec["driver"],
                    spec["pool"]["name"],
                    device["name"],
                    {k: _value(v) for k, v in (device.get("attributes") or {}).items()},
                    dict(device.get("capacity") or {}),
                )
            )
    return devices


def in_use(claims: Iterable[Obj]) -> set[tuple[str, str, str]]:
    """Every device some claim's allocation holds."""
    used = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            used.add((result["driver"], result["pool"], result["device"]))
    return used


class Selectors:
    """CEL device selectors compiled once each, evaluated per device."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}
        self._activations: dict[tuple[str, str, str], Any] = {}

    def matches(self, expression: str, device: Device) -> bool:
        program = self._programs.get(expression)
        if program is None:
            try:
                program = self._env.program(self._env.compile(expression))
            except CELParseError as bad:
                raise AllocationError(f"selector {expression!r}: {bad}") from None
            self._programs[expression] = program
        try:
            result = program.evaluate({"device": self._activation(device)})
        except CELEvalError as failed:
            raise AllocationError(f"selector {expression!r} on {device.name}: {failed}") from None
        if isinstance(result, CELEvalError):
            raise AllocationError(f"selector {expression!r} on {device.name}: {result}")
        return bool(result)

    def _activation(self, device: Device) -> Any:
        known = self._activations.get(device.key)
        if known is None:
            grouped: dict[str, dict[str, Any]] = {}
            for name, value in device.attributes.items():
                domain, _, ident = name.rpartition("/")
                grouped.setdefault(domain or device.driver, {})[ident] = value
            capacity: dict[str, dict[str, Any]] = {}
            for name, value in device.capacity.items():
                domain, _, ident = name.rpartition("/")
                capacity.setdefault(domain or device.driver, {})[ident] = value.get("value")
            known = json_to_cel(
                {"driver": device.driver, "attributes": grouped, "capacity": capacity}
            )
            self._activations[device.key] = known
        return known

    def forget(self) -> None:
        """Devices changed (a slice re-published): their activations are rebuilt."""
        self._activations.clear()


@dataclass(frozen=True, slots=True)
class _Alternative:
    request: str
    name: str  # as written in results: ``request`` or ``request/subrequest``
    selectors: tuple[str, ...]
    count: int | None  # None: All
    rank: int | None


def _alternatives(request: Obj, classes: Mapping[str, Obj]) -> list[_Alternative]:
    def one(spec: Obj, name: str, rank: int | None) -> _Alternative:
        klass = classes.get(spec.get("deviceClassName", ""))
        if klass is None:
            raise AllocationError(f"DeviceClass {spec.get('deviceClassName')!r} not found")
        expressions = [
            s["cel"]["expression"]
            for s in [*klass.get("spec", {}).get("selectors", []), *spec.get("selectors", [])]
        ]
        count = None if spec.get("allocationMode") == "All" else int(spec.get("count", 1))
        return _Alternative(request["name"], name, tuple(expressions), count, rank)

    if "firstAvailable" in request:
        return [
            one(sub, f"{request['name']}/{sub['name']}", i)
            for i, sub in enumerate(request["firstAvailable"])
        ]
    return [one(request.get("exactly") or {}, request["name"], None)]


class Allocator:
    def __init__(self, classes: Mapping[str, Obj]) -> None:
        self.classes = dict(classes)
        self.selectors = Selectors()

    def allocate(
        self, claim: Obj, devices: Sequence[Device], used: set[tuple[str, str, str]]
    ) -> list[Choice] | None:
        """The first solution for the claim on these devices (None: it does not fit)."""
        spec = claim["spec"]["devices"]
        requests = spec.get("requests") or []
        constraints = [c for c in spec.get("constraints") or [] if c.get("matchAttribute")]
        options = [_alternatives(r, self.classes) for r in requests]
        free = [d for d in devices if d.key not in used]
        return next(self._search(options, 0, free, [], constraints), None)

    def _search(
        self,
        options: list[list[_Alternative]],
        index: int,
        free: list[Device],
        chosen: list[Choice],
        constraints: list[Obj],
    ) -> Iterator[list[Choice]]:
        if index == len(options):
            yield list(chosen)
            return
        for alternative in options[index]:
            taken = {d.key for c in chosen for d in c.devices}
            fitting = [
                d
                for d in free
                if d.key not in taken
                and all(self.selectors.matches(e, d) for e in alternative.selectors)
            ]
            count = len(fitting) if alternative.count is None else alternative.count
            if count == 0 or count > len(fitting):
                continue
            for devices in itertools.combinations(fitting, count):
                choice = Choice(alternative.name, devices, alternative.rank)
                if _constrained(constraints, [*chosen, choice]):
                    yield from self._search(
                        options, index + 1, free, [*chosen, choice], constraints
                    )


def _constrained(constraints: list[Obj], chosen: list[Choice]) -> bool:
    """Every matchAttribute holds over the devices chosen so far."""
    for constraint in constraints:
        names = constraint.get("requests") or []
        attribute = constraint["matchAttribute"]
        values = set()
        for choice in chosen:
            base = choice.request.split("/", 1)[0]
            if names and base not in names and choice.request not in names:
                continue
            for device in choice.devices:
                value = device.attribute(attribute)
                if value is None:
                    return False
                values.add(value)
        if len(values) > 1:
            return False
    return True


def score(choices: Iterable[list[Choice]]) -> int:
    """The ``DynamicResources`` score of a node for a pod's claims (``computeScore``);
    kube-scheduler then normalizes it to 0–100 over the nodes and weighs it 2 in the default
    profile, which keeps the order of nodes this gives."""
    return sum(MAX_SUBREQUESTS - c.rank for claim in choices for c in claim if c.rank is not None)


def allocation(node: str, choices: list[Choice]) -> Obj:
    """``status.allocation`` as the scheduler writes it for a node-local claim."""
    return {
        "devices": {
            "results": [
                {"request": c.request, "driver": d.driver, "pool": d.pool, "device": d.name}
                for c in choices
                for d in c.devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
