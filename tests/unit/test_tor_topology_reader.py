"""Reading the imported ToR topology from its ConfigMap (``contract/tor_topology.py``)."""

from __future__ import annotations

import logging

import pytest

from contract.tor_topology import TopologyReader
from tests.unit.helpers import server_ip, tor_info


def test_a_malformed_topology_reads_as_none_and_is_logged_once_until_it_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = TopologyReader()
    caplog.set_level(logging.ERROR, logger="contract.tor_topology")
    for _ in range(3):
        assert reader.read({"tor_info": "{not json"}) is None
    assert len(caplog.records) == 1
    assert "kube-system/basic-tor-node-cm ignored" in caplog.records[0].getMessage()
    topology = reader.read({"tor_info": tor_info(2)})
    assert topology is not None and reader.error == ""
    server = topology.server(server_ip(1, 2))
    assert server is not None and server.tor == 1
    reader.read({"tor_info": "{not json"})
    assert len(caplog.records) == 2, "said again: it was fixed in between"


def test_no_configmap_is_no_topology_and_no_error() -> None:
    reader = TopologyReader()
    assert reader.read(None) is None
    assert reader.error == ""
