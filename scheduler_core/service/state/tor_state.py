"""The network as the extender tracks it: ToR states of switch affinity 2.0 (built from the
bound pods' annotations, then changed by each reservation), the ToRs under jobs that span
several, and which cross-ToR jobs run behind each server (``tor-share-cm``). Built again
only when something it depends on has changed and it is read (a gang is reserved, the
ConfigMap is written)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from contract.annotations import TOR_SHARED_ANNOTATION
from contract.tor_topology import Topology
from scheduler_core.engine import locality, tor_share
from scheduler_core.service.state.gangs import GangPods, Reservation


class TorState:
    def __init__(self, settings: locality.Settings) -> None:
        self.settings = settings
        self.network = locality.Network()
        self._jobs_on: dict[str, set[str]] = {}  # server IP → cross-ToR jobs there

    def rebuild(
        self,
        addresses: Mapping[str, str],
        super_pods: Mapping[str, int],
        topology: Topology | None,
        pods: GangPods,
        reservations: Mapping[str, Reservation],
        *,
        sub_healthy: frozenset[str] = frozenset(),
        racks: Mapping[str, int] | None = None,
    ) -> None:
        """The network now: bound pods' ToR states, then the live reservations'."""
        on_tors = [
            (gang, addresses[m.node], m.annotations, m.large_model)
            for gang, members in pods.bound.items()
            for m in members
            if m.node in addresses
        ]
        states = tor_share.states_from_pods(topology, on_tors) if topology else {}
        jobs_on: dict[str, set[str]] = {}
        for key, ip, notes, _ in on_tors:
            if notes.get(TOR_SHARED_ANNOTATION) in ("1", "2"):
                jobs_on.setdefault(ip, set()).add(key)
        for gang, reservation in reservations.items():
            if reservation.shared is not None and topology is not None:
                states = self._with_shared(states, gang, reservation)
                for p in reservation.placements.values():
                    if address := addresses.get(p.node):
                        jobs_on.setdefault(address, set()).add(gang)
        network = locality.Network(
            topology,
            dict(addresses),
            dict(super_pods),
            states,
            sub_healthy=sub_healthy,
            racks=dict(racks or {}),
        )
        spans = _spans(network, pods, reservations)
        self.network = dataclasses.replace(network, multi_job_tors=spans)
        self._jobs_on = jobs_on

    def reserved(self, gang: str, reservation: Reservation) -> None:
        """A new reservation changes the ToR states (under switch affinity 2.0)."""
        states = self._with_shared(self.network.tor_states, gang, reservation)
        self.network = dataclasses.replace(self.network, tor_states=states)

    def _with_shared(
        self, states: Mapping[int, tor_share.TorState], gang: str, reservation: Reservation
    ) -> dict[int, tor_share.TorState]:
        if reservation.shared is None:
            return dict(states)
        return tor_share.apply(states, reservation.shared, gang, reservation.schema)

    def tor_share_data(self) -> dict[str, str] | None:
        """``tor-share-cm`` content under switch affinity 2.0 (None otherwise)."""
        network = self.network
        if self.settings.nslb_version != "2.0" or network.topology is None:
            return None
        node_of_ip = {ip: n for n, ip in network.addresses.items()}
        return tor_share.encode(network.topology, network.tor_states, self._jobs_on, node_of_ip)


def _spans(
    network: locality.Network, pods: GangPods, reservations: Mapping[str, Reservation]
) -> frozenset[int]:
    """ToRs under a gang (bound or reserved) that spans more than one ToR."""
    nodes_of: dict[str, list[str]] = {
        g: [p.node for p in r.placements.values()] for g, r in reservations.items()
    }
    for key, members in pods.bound.items():
        nodes_of.setdefault(key, []).extend(m.node for m in members if m.node in network.addresses)
    spans: Iterable[set[int]] = (network.tors_of(nodes) for nodes in nodes_of.values())
    return frozenset(t for span in spans if len(span) > 1 for t in span)
