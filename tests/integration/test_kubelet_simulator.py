"""The kubelet simulator's own restart: it wipes every socket of its plugin directory while
the plugins' owners remove and make theirs, and must not fail whoever removed one first (a
seeded robustness run once died on ``FileNotFoundError`` there, checking nothing)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from deviceplugin_api.v1beta1 import api_pb2 as dp
from deviceplugin_api.v1beta1 import api_pb2_grpc as dp_grpc
from simulation.kubelet import KUBELET_SOCKET, KubeletSimulator


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[KubeletSimulator]:
    kubelet = KubeletSimulator(short_dir / "plugins")
    kubelet.start()
    yield kubelet
    kubelet.close()


def listening(path: Path) -> socket.socket:
    """A plugin's socket file at ``path`` (bound and listening, as a gRPC server's)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


def serves_registration(kubelet: KubeletSimulator) -> bool:
    """kubelet.sock answers Register (with a refusal: the version is not one it takes)."""
    with grpc.insecure_channel(f"unix://{kubelet.plugin_dir / KUBELET_SOCKET}") as channel:
        try:
            dp_grpc.RegistrationStub(channel).Register(
                dp.RegisterRequest(version="v0", endpoint="x.sock", resource_name="a.b/c"),
                timeout=10,
            )
        except grpc.RpcError as refused:
            return refused.code() is grpc.StatusCode.INVALID_ARGUMENT
    return False


def test_a_socket_its_owner_removes_between_the_look_and_the_unlink_fails_no_restart(
    kubelet: KubeletSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = kubelet.plugin_dir / "Ascend910.sock"
    server = listening(plugin)
    looked: list[Path] = []
    is_socket: Callable[[Path], bool] = Path.is_socket

    def seen_then_removed(path: Path) -> bool:
        found = is_socket(path)
        if path == plugin:  # the agent saw kubelet.sock go and removed its own meanwhile
            looked.append(path)
            path.unlink()
        return found

    monkeypatch.setattr(Path, "is_socket", seen_then_removed)
    with server:
        kubelet.restart()
    assert looked == [plugin], "the wipe looked at the plugin's socket"
    assert not plugin.exists()
    assert serves_registration(kubelet)


def test_restarts_while_plugins_make_and_remove_their_sockets_all_succeed(
    kubelet: KubeletSimulator,
) -> None:
    stop = threading.Event()
    made = 0

    def plugin_churn() -> None:
        nonlocal made
        path = kubelet.plugin_dir / "churn.sock"
        while not stop.is_set():
            try:
                listening(path).close()  # the file stays: a socket nobody serves any more
                made += 1
            except OSError:
                pass  # the previous one is still there (the kubelet has not wiped it yet)
            path.unlink(missing_ok=True)

    churn = threading.Thread(target=plugin_churn, daemon=True)
    churn.start()
    try:
        for _ in range(30):
            kubelet.restart()
    finally:
        stop.set()
        churn.join(timeout=10)
    assert made > 0
    assert serves_registration(kubelet)
