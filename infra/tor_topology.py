"""The imported ToR topology read from its ConfigMap (``kube-system/basic-tor-node-cm``),
as the scheduler and the DRA driver both follow it: a malformed one is logged once (until
it changes) and read as none."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from contract.annotations import TOPOLOGY_CONFIGMAP, TOPOLOGY_KEY
from contract.chip_names import InvalidInput
from contract.tor_topology import Topology, parse_topology

log = logging.getLogger(__name__)


class TopologyReader:
    def __init__(self) -> None:
        self.error = ""  # what was wrong with the last one read ("" if nothing)

    def read(self, data: Mapping[str, str] | None) -> Topology | None:
        """The topology in the ConfigMap's ``data`` (None: no ConfigMap, or a malformed
        one)."""
        if data is None:
            return None
        try:
            topology = parse_topology(data.get(TOPOLOGY_KEY, ""))
        except InvalidInput as bad:
            if str(bad) != self.error:
                log.error("%s/%s ignored: %s", *TOPOLOGY_CONFIGMAP, bad)
            self.error = str(bad)
            return None
        self.error = ""
        return topology
