"""Huawei's device-plugin DaemonSets with only the image swapped, on the real API server with
none of our admission policies: under each shipped argument line, verbatim
(tests/data/huawei_device_plugin/), the agent starts (the DaemonSets' liveness probe answers),
puts one Warning Event ``NPUAdmissionPoliciesMissing`` on its Node naming each missing policy
and what it guards, and counts them in ``ascend_agent_admission_policies_missing``.

Under Huawei's own service account (its RBAC applied as shipped) the agent may not even read
the policies: they count as missing and the log says why. Under the chart's agent account
(the second step of docs/compatibility.md's walk), applying the chart's admission-policy
documents brings the gauge to 0 within the re-check period, without a restart.

What the DaemonSets cannot say comes from the environment, as in
tests/integration/test_huawei_daemonset.py: the API (a node-bound token, as a DaemonSet pod's
projected one), the fake driver, the plugin directory, the metrics port (Huawei's DaemonSets
serve none) and the re-check period (2 s instead of 10 min).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from simulation.cluster import state_file, vnpu_state_file
from simulation.kubelet import KubeletSimulator
from simulation.processes import free_port
from testbed.cluster import AGENT_ACCOUNT, apply, bound_token
from testbed.control_plane import ControlPlane, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj, Rest, RestError
from tests.integration.test_huawei_daemonset import DATA, HUAWEI_LOG, shipped_command

DEADLINE = 90.0  # a loaded machine: the agent's start, the Event's write
RECHECK = 2  # seconds, for the test (the default is 600)
GAUGE = "ascend_agent_admission_policies_missing"
REASON = "NPUAdmissionPoliciesMissing"
AGENT_POLICIES = ("ascend-npu-annotations", "ascend-npu-agent-scope")
DAEMONSETS = [
    ("ascendplugin-volcano.yaml", state_file()),
    ("ascendplugin.yaml", state_file()),
    ("ascendplugin-310P-1usoc.yaml", vnpu_state_file()),
    ("ascendplugin-310P-1usoc-volcano.yaml", vnpu_state_file()),
]


def _is_policy(document: Obj) -> bool:
    return str(document["kind"]).startswith("ValidatingAdmissionPolicy")


@dataclass
class Plane:
    plane: ControlPlane
    admin: Rest
    policies: list[Obj]  # the chart's admission-policy documents, not applied


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> Plane:
    """The chart's objects but its admission policies (our agent's account and RBAC)."""
    documents = kustomize(MANIFESTS / "base")
    apply(control_plane, [d for d in documents if not _is_policy(d)])
    return Plane(control_plane, control_plane.rest(), [d for d in documents if _is_policy(d)])


@pytest.fixture
def no_policies(plane: Plane) -> Iterator[Plane]:
    yield plane
    for document in plane.policies:  # as before the test: none installed
        path = plane.admin.path(document["apiVersion"], document["kind"])
        try:
            plane.admin.delete(f"{path}/{document['metadata']['name']}")
        except RestError as gone:
            if gone.status != 404:
                raise


def _huawei_rbac(manifest: str) -> tuple[str, list[Obj]]:
    """The DaemonSet file's ServiceAccount, ClusterRole and binding, and the account's name."""
    documents = [d for d in yaml.safe_load_all((DATA / manifest).read_text()) if d]
    rbac = [d for d in documents if d["kind"] != "DaemonSet"]
    (account,) = [d["metadata"]["name"] for d in rbac if d["kind"] == "ServiceAccount"]
    return account, rbac


def _node(admin: Rest, manifest: str, account: str) -> str:
    name = f"{Path(manifest).stem}-{account}"[:63].lower()
    try:
        admin.create("/api/v1/nodes", {"metadata": {"name": name}})
    except RestError as exists:
        if exists.status != 409:
            raise
    return name


def _events(admin: Rest, node: str) -> list[Obj]:
    found = admin.get(
        "/api/v1/namespaces/default/events",
        fieldSelector=f"involvedObject.name={node},reason={REASON}",
    )
    items: list[Obj] = found.get("items") or []
    return items


def _gauge(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(GAUGE)]
    return values[0] if values else None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as probe:
            return bool(probe.status == 200 and probe.read() == b"ok\n")
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Agent:
    process: subprocess.Popen[bytes]
    log: Path  # the DaemonSet's -logFile
    output: Path
    metrics: int
    healthz: int

    def text(self) -> str:
        logs = [self.output, self.log]
        return "".join(p.read_text(errors="replace") for p in logs if p.exists())


@pytest.fixture
def home() -> Iterator[Path]:
    # The plugin directory's socket paths must stay short: under /tmp.
    path = Path(tempfile.mkdtemp(prefix="hwp", dir="/tmp"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


@contextmanager
def _started(
    plane: Plane, home: Path, manifest: str, state: str, *, account: str, node: str
) -> Iterator[Agent]:
    """The agent as Huawei's DaemonSet runs ``device-plugin``, its arguments verbatim but the
    -logFile path and the healthz port (both of this machine), under ``account``'s token."""
    program, *arguments = shlex.split(shipped_command(manifest))
    assert program.endswith("device-plugin")
    healthz = free_port()
    log = home / "devicePlugin.log"
    arguments = [
        a.replace(HUAWEI_LOG, str(log)).replace("=11251", f"={healthz}") for a in arguments
    ]
    token = bound_token(plane.plane, account, node)
    kubeconfig = plane.plane.token_kubeconfig(token, f"{account}-{node}")
    (home / "state.yaml").write_text(state)
    kubelet = KubeletSimulator(home / "plugins")
    kubelet.start()
    metrics = free_port()
    environment = {
        **os.environ,
        "NODE_NAME": node,
        "ASCEND_AGENT_KUBE": "kubeconfig",
        "ASCEND_AGENT_KUBECONFIG": str(kubeconfig),
        "ASCEND_AGENT_FAKE_STATE": str(home / "state.yaml"),
        "ASCEND_AGENT_PLUGIN_DIR": str(home / "plugins"),
        "ASCEND_AGENT_POD_RESOURCES_SOCKET": str(home / "podres.sock"),
        "ASCEND_AGENT_METRICS_LISTEN": f"127.0.0.1:{metrics}",
        "ASCEND_AGENT_POLICIES_RECHECK_PERIOD": str(RECHECK),
    }
    output = home / "output.txt"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "agent", *arguments], env=environment, stdout=out, stderr=out
        )
    agent = Agent(process, log, output, metrics, healthz)
    try:
        wait_until(
            lambda: _answers(f"http://127.0.0.1:{healthz}/") or process.poll() is not None,
            DEADLINE,
            "the DaemonSet's liveness probe (GET / on the healthz port)",
        )
        assert process.poll() is None, agent.text()[-3000:]
        yield agent
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, agent.text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        kubelet.close()


def _warned_on_the_node(plane: Plane, agent: Agent, node: str) -> Obj:
    wait_until(lambda: bool(_events(plane.admin, node)), DEADLINE, f"the Event on {node}")
    (event,) = _events(plane.admin, node)
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Node"
    message = str(event["message"])
    assert "ascend-npu-annotations (only the NPU scheduler and agent may set" in message
    assert "ascend-npu-agent-scope (the agent's token writes only its own node" in message
    assert "WITHOUT the admission policies" in agent.text()
    return event


def _rereads(agent: Agent) -> int:
    return agent.text().count("still WITHOUT the admission policies")


@pytest.mark.parametrize(("manifest", "state"), DAEMONSETS)
def test_under_huaweis_own_account_the_agent_starts_and_says_what_is_unguarded(
    no_policies: Plane, home: Path, manifest: str, state: str
) -> None:
    plane = no_policies
    account, rbac = _huawei_rbac(manifest)
    apply(plane.plane, rbac)
    node = _node(plane.admin, manifest, account)
    with _started(plane, home, manifest, state, account=account, node=node) as agent:
        event = _warned_on_the_node(plane, agent, node)
        # Huawei's ClusterRole reads no admission policy: not known to be enforced.
        assert "could not be read" in event["message"] and "403" in event["message"]
        wait_until(lambda: _gauge(agent.metrics) == 2, DEADLINE, f"{GAUGE} 2")
        # Re-read every period, warned each time; the Event stays one (once per start).
        wait_until(lambda: _rereads(agent) >= 2, DEADLINE, "two re-reads")
        assert len(_events(plane.admin, node)) == 1
        assert _events(plane.admin, node)[0].get("count") == 1
        assert _gauge(agent.metrics) == 2


@pytest.mark.parametrize(("manifest", "state"), DAEMONSETS)
def test_once_the_policies_are_installed_the_gauge_falls_to_zero(
    no_policies: Plane, home: Path, manifest: str, state: str
) -> None:
    plane = no_policies
    node = _node(plane.admin, manifest, AGENT_ACCOUNT)
    with _started(plane, home, manifest, state, account=AGENT_ACCOUNT, node=node) as agent:
        event = _warned_on_the_node(plane, agent, node)
        for name in AGENT_POLICIES:
            assert f"ValidatingAdmissionPolicy {name} does not exist" in event["message"]
        wait_until(lambda: _gauge(agent.metrics) == 2, DEADLINE, f"{GAUGE} 2")
        apply(plane.plane, plane.policies)  # the chart's admission-policy documents
        wait_until(lambda: _gauge(agent.metrics) == 0, RECHECK * 10, f"{GAUGE} 0")
        # The re-read sets the gauge, then logs: the line may follow a moment later.
        enforced = "the admission policies ascend-npu-annotations, ascend-npu-agent-scope are "
        wait_until(lambda: enforced in agent.text(), DEADLINE, "the log says they are enforced")


def test_told_to_require_them_the_agent_refuses_as_before(no_policies: Plane, home: Path) -> None:
    manifest, state = DAEMONSETS[0]
    node = _node(no_policies.admin, manifest, AGENT_ACCOUNT)
    token = bound_token(no_policies.plane, AGENT_ACCOUNT, node)
    kubeconfig = no_policies.plane.token_kubeconfig(token, f"require-{node}")
    (home / "state.yaml").write_text(state)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "agent", "serve", "--require-admission-policies"),
            *("--kube=kubeconfig", f"--kubeconfig={kubeconfig}", f"--node-name={node}"),
            *(f"--fake-state={home / 'state.yaml'}", f"--plugin-dir={home / 'plugins'}"),
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: refusing to start without the admission policies")
    assert done.stderr.count("\n") == 1
