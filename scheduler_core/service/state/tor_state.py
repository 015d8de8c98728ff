"""The network as the extender tracks it: where each node is (its server IP, SuperPoD, rack,
sub-health, as its view says while it is offered), the ToR topology, and from them the ToR
states of switch affinity 2.0 (built from the bound pods' annotations, then changed by each
reservation), the ToRs under jobs that span several, and which cross-ToR jobs run behind
each server (``tor-share-cm``). Built again only when something it depends on has changed
and it is read (a gang is reserved, the ConfigMap is written). Kept under the extender's
state lock (``extender_state.ExtenderState``, which reaches it as ``network``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from contract.annotations import TOR_SHARED_ANNOTATION
from contract.tor_topology import Topology
from scheduler_core.engine import locality, tor_share
from scheduler_core.service.state.cluster_view import NodeView
from scheduler_core.service.state.gang_pods import GangPods
from scheduler_core.service.state.gangs import Reservation


class TorState:
    def __init__(self, settings: locality.Settings) -> None:
        self.settings = settings
        self.addresses: dict[str, str] = {}  # node → its server IP
        self.sub_healthy: set[str] = set()  # nodes a chip or switch of reports sub-health
        self._super_pods: dict[str, int] = {}
        self._racks: dict[str, int] = {}  # node → RackID (Atlas 950 SuperPoD)
        # node → (SuperPodID, RackID) last offered, not forgotten while it is left out (one
        # entry a node the cluster had: ``locality.Network.last_places``).
        self._last_places: dict[str, tuple[int, int]] = {}
        self._topology: Topology | None = None
        self.stale = True  # built again before it is next read
        self._network = locality.Network()
        self._jobs_on: dict[str, set[str]] = {}  # server IP → cross-ToR jobs there

    def set_node(self, name: str, view: NodeView | None) -> None:
        """Where a node offered now is (None: not offered: gone, or left out)."""
        where = self._where(name)
        self.addresses.pop(name, None)
        self._super_pods.pop(name, None)
        self._racks.pop(name, None)
        self.sub_healthy.discard(name)
        if view is not None:
            if view.address:
                self.addresses[name] = view.address
            if view.super_pod is not None:
                self._super_pods[name] = view.super_pod
            if view.rack is not None:
                self._racks[name] = view.rack
                if view.super_pod is not None:
                    self._last_places[name] = (view.super_pod, view.rack)
            if view.sub_healthy:
                self.sub_healthy.add(name)
        self.stale |= where != self._where(name)

    def _where(self, name: str) -> tuple[str | None, int | None, int | None, bool]:
        return (
            self.addresses.get(name),
            self._super_pods.get(name),
            self._racks.get(name),
            name in self.sub_healthy,
        )

    def set_topology(self, topology: Topology | None) -> None:
        self._topology = topology
        self.stale = True

    def view(self, pods: GangPods, reservations: Mapping[str, Reservation]) -> locality.Network:
        """The network now, built again first when something it depends on changed."""
        if self.stale:
            self._rebuild(pods, reservations)
            self.stale = False
        return self._network

    def _rebuild(self, pods: GangPods, reservations: Mapping[str, Reservation]) -> None:
        """The network now: bound pods' ToR states, then the live reservations'."""
        addresses, topology = self.addresses, self._topology
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
            dict(self._super_pods),
            states,
            sub_healthy=frozenset(self.sub_healthy),
            racks=dict(self._racks),
            last_places=dict(self._last_places),
        )
        spans = _spans(network, pods, reservations)
        self._network = dataclasses.replace(network, multi_job_tors=spans)
        self._jobs_on = jobs_on

    def reserved(self, gang: str, reservation: Reservation) -> None:
        """A new reservation changes the ToR states (under switch affinity 2.0)."""
        states = self._with_shared(self._network.tor_states, gang, reservation)
        self._network = dataclasses.replace(self._network, tor_states=states)

    def _with_shared(
        self, states: Mapping[int, tor_share.TorState], gang: str, reservation: Reservation
    ) -> dict[int, tor_share.TorState]:
        if reservation.shared is None:
            return dict(states)
        return tor_share.apply(states, reservation.shared, gang, reservation.schema)

    def tor_share_data(self) -> dict[str, str] | None:
        """``tor-share-cm`` content under switch affinity 2.0 (None otherwise), of the network
        as last read (``view``)."""
        network = self._network
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
