"""A node in a box: fake driver state file, kubelet simulator and agent, over real sockets.

Socket paths must stay under 107 bytes, so the directory is ``short_dir`` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.device_plugin import DevicePlugin
from chip_drivers.fake import FakeDriver
from simulation.cluster import state_file
from simulation.kubelet import KubeletSimulator

RESOURCE = "huawei.com/Ascend910"


@dataclass
class Node:
    dir: Path
    state: Path
    kubelet: KubeletSimulator
    agent: DevicePlugin

    def write_state(self, text: str) -> None:
        partial = self.state.with_suffix(".tmp")
        partial.write_text(text)
        partial.replace(self.state)

    def new_agent(self, ascend_runtime: bool = True) -> DevicePlugin:
        self.agent = DevicePlugin(FakeDriver(self.state), self.dir, ascend_runtime=ascend_runtime)
        self.agent.start()
        return self.agent


def make_node(directory: Path, ascend_runtime: bool) -> Node:
    state = directory / "state.yaml"
    state.write_text(state_file())
    kubelet = KubeletSimulator(directory / "plugins", directory / "podres.sock")
    kubelet.start()
    node = Node(
        directory / "plugins",
        state,
        kubelet,
        DevicePlugin(FakeDriver(state), directory / "plugins", ascend_runtime),
    )
    node.agent.start()
    assert node.agent.wait_registered(30), "the agent did not register"
    assert kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8)
    return node


@contextmanager
def running_node(directory: Path, ascend_runtime: bool) -> Iterator[Node]:
    built = make_node(directory, ascend_runtime)
    try:
        yield built
    finally:
        built.agent.stop()
        built.kubelet.close()


@pytest.fixture
def node(short_dir: Path) -> Iterator[Node]:
    with running_node(short_dir, ascend_runtime=True) as built:
        yield built


@pytest.fixture
def node_without_runtime(short_dir: Path) -> Iterator[Node]:
    with running_node(short_dir, ascend_runtime=False) as built:
        yield built
