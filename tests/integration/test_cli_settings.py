"""The real commands refusing a bad setting at start: exit code 2 and one line on stderr
naming the setting (issue 35), never a traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulation.cluster import state_file


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a command that exited 2 (log lines may come before it)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    *_, last = done.stderr.splitlines()
    assert last.startswith("error: ")
    return last


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose API server refuses connections (a port bound but not listening):
    the service starts, logs that the cluster is not read, and comes to its bind."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        path = tmp_path / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        yield path


def test_a_malformed_listen_address_is_one_line_and_exit_2() -> None:
    done = run("scheduler_core", "serve", "--listen", "nonsense")
    assert (
        done.stderr == "error: --listen: expected HOST:PORT (e.g. 0.0.0.0:8888), got 'nonsense'\n"
    )
    assert done.returncode == 2


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen"])
def test_a_scheduler_port_in_use_names_its_flag(
    flag: str, taken_port: int, unreachable_kubeconfig: Path
) -> None:
    addresses = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0"}
    addresses[flag] = f"127.0.0.1:{taken_port}"
    done = run(
        "scheduler_core",
        "serve",
        "--insecure",
        "--kube",
        "kubeconfig",
        "--kubeconfig",
        str(unreachable_kubeconfig),
        "--allow-missing-policies",  # no API server answers: the ports are what is tested
        *(token for pair in addresses.items() for token in pair),
    )
    assert refused(done) == f"error: {flag} 127.0.0.1:{taken_port}: address already in use"


def test_a_negative_period_in_the_settings_file_is_refused_naming_the_key(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "scheduler.yaml"
    settings.write_text("refresh-period: -1\n")
    done = run("scheduler_core", "serve", "--config", str(settings))
    assert done.stderr == (
        f"error: config {settings}: refresh-period: expected a number greater than 0, got '-1'\n"
    )
    assert done.returncode == 2


def test_the_agent_metrics_port_in_use_names_its_flag(short_dir: Path, taken_port: int) -> None:
    (short_dir / "state.yaml").write_text(state_file())
    done = run(
        "agent",
        "--plugin-dir",
        str(short_dir / "plugins"),
        "--fake-state",
        str(short_dir / "state.yaml"),
        "--metrics-listen",
        f"127.0.0.1:{taken_port}",
    )
    assert done.stderr == (
        f"error: --metrics-listen 127.0.0.1:{taken_port}: address already in use\n"
    )
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--metrics-listen", "nonsense"],
            "error: --metrics-listen: expected HOST:PORT (e.g. 0.0.0.0:8888), got 'nonsense'",
        ),
        (
            ["-maxAge=3"],
            "error: --log-max-age/-maxAge: expected a whole number from 7 to 700, got '3'",
        ),
        (["--plugin-dir", "{file}"], "error: --plugin-dir {file}: not a directory"),
    ],
)
def test_a_bad_agent_setting_is_one_line_and_exit_2(
    args: list[str], error: str, tmp_path: Path
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    done = run("agent", *(a.format(file=file) for a in args), "--fake-state", "/nonexistent")
    assert (done.returncode, done.stderr) == (2, error.format(file=file) + "\n")


def test_place_refuses_a_misspelt_key_and_exits_1_when_nothing_fits() -> None:
    node = {"name": "n1", "product": "module910x8", "free": ["Ascend910-0", "Ascend910-1"]}
    job = {"name": "j", "product": "module910x8", "tasks": [{"name": "t", "npu": 2}]}
    typo = run(
        "scheduler_core",
        "place",
        stdin=json.dumps({"nodes": [{**node, "unhealty": ["Ascend910-0"]}], "job": job}),
    )
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr == (
        "error: nodes[0]: unknown key 'unhealty' (allowed: name, product, allocatable, free, "
        "unhealthy, network_unhealthy, card_sub_healthy, switch_sub_healthy)\n"
    )
    job["tasks"] = [{"name": "t", "npu": 4}]
    no_fit = run("scheduler_core", "place", stdin=json.dumps({"nodes": [node], "job": job}))
    assert no_fit.returncode == 1 and no_fit.stderr == ""
    assert json.loads(no_fit.stdout)["feasible"] is False
