"""Each component checks at start, on the real API server, that the admission policies it
relies on exist and deny: with the shipped manifests applied the agent, the scheduler service
and the DRA driver start (each under its own real token, as deployed); with a policy's binding
deleted, or made to only warn, each refuses in one line (exit 2) when told
``--require-admission-policies`` as the manifests tell it (the scheduler's and the DRA
driver's default too), and starts when told ``--allow-missing-policies`` (the agent's default:
a drop-in under Huawei's DaemonSets), counting the missing ones in its gauge."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulation.cluster import state_file
from simulation.dra_cluster import driver_command
from simulation.processes import free_port, service_command_with
from testbed.cluster import AGENT_ACCOUNT, NAMESPACE, SCHEDULER_ACCOUNT, apply
from testbed.control_plane import ControlPlane, wait_until
from testbed.dra import bound_driver_token
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj, Rest, RestError
from tests.real.test_deploy import bound_token

NODE = "node-a"  # the agent's
DRA_NODE = "node-d"  # the DRA driver's (a node runs one of them)
DEADLINE = 60.0
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


@dataclass
class Plane:
    plane: ControlPlane
    admin: Rest
    shipped: list[Obj]
    workdir: Path


@pytest.fixture(scope="module")
def shipped(control_plane: ControlPlane) -> Plane:
    documents = kustomize(MANIFESTS / "base") + kustomize(MANIFESTS / "overlays" / "dra")
    apply(control_plane, documents)
    admin = control_plane.rest()
    for node in (NODE, DRA_NODE):
        try:
            admin.create("/api/v1/nodes", {"metadata": {"name": node}})
        except RestError as exists:
            if exists.status != 409:
                raise
    workdir = control_plane.workdir / "policies-at-start"
    workdir.mkdir(exist_ok=True)
    return Plane(control_plane, admin, documents, workdir)


@pytest.fixture
def plane(shipped: Plane) -> Iterator[Plane]:
    yield shipped
    for name in RELIED_ON.values():  # as shipped again (an apply would merge the actions)
        try:
            shipped.admin.delete(f"{BINDINGS}/{name}")
        except RestError as gone:
            if gone.status != 404:
                raise
    apply(shipped.plane, [d for d in shipped.shipped if d["kind"].startswith("ValidatingAdm")])


def metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


def command(component: str, plane: Plane, port: int) -> list[str]:
    """The component as deployed (its own token), its metrics on ``port``."""
    home = plane.workdir / component
    (home / "plugins").mkdir(parents=True, exist_ok=True)
    (home / "state.yaml").write_text(state_file())
    if component == "agent":
        kubeconfig = bound_token(plane.plane, AGENT_ACCOUNT, NODE)
        return [
            sys.executable,
            "-m",
            "agent",
            "serve",
            "--driver=fake",
            f"--fake-state={home / 'state.yaml'}",
            f"--plugin-dir={home / 'plugins'}",
            "--kube=kubeconfig",
            f"--kubeconfig={kubeconfig}",
            f"--node-name={NODE}",
            "--volcano-type=true",
            f"--pod-resources-socket={home / 'podres.sock'}",
            f"--metrics-listen=127.0.0.1:{port}",
        ]
    if component == "scheduler":
        kubeconfig = plane.plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT)
        return service_command_with(kubeconfig, port, policies_installed=True)
    token = plane.plane.token_kubeconfig(bound_driver_token(plane.plane, DRA_NODE), "dra-start")
    return [
        *driver_command(DRA_NODE, home, kubeconfig_file=token, policies_installed=True),
        f"--metrics-listen=127.0.0.1:{port}",
    ]


GAUGE = {
    "agent": "ascend_agent_admission_policies_missing",
    "scheduler": "ascend_scheduler_admission_policies_missing",
    "dra": "ascend_dra_driver_admission_policies_missing",
}
# The binding each test takes away, one each component relies on.
RELIED_ON = {
    "agent": "ascend-npu-agent-scope",
    "scheduler": "ascend-npu-scheduler-scope",
    "dra": "ascend-npu-dra-slices",
}
COMPONENTS = sorted(GAUGE)


def started(component: str, plane: Plane, *flags: str) -> float:
    """Start the component, wait for its metrics, stop it: its gauge of missing policies."""
    port = free_port()
    argv = [*command(component, plane, port), *flags]
    log = plane.workdir / f"{component}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: GAUGE[component] in metrics(port) or process.poll() is not None,
            DEADLINE,
            f"{component} serving /metrics",
        )
        assert process.poll() is None, log.read_text()[-2000:]
        lines = metrics(port).splitlines()
        return next(float(line.split()[-1]) for line in lines if line.startswith(GAUGE[component]))
    finally:
        process.terminate()
        process.wait(30)


def refused(component: str, plane: Plane) -> str:
    # The agent as the chart runs it (agent.yaml: require-admission-policies); the others
    # refuse by default.
    told = ["--require-admission-policies"] if component == "agent" else []
    done = subprocess.run(
        [*command(component, plane, free_port()), *told],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    return done.stderr


@pytest.mark.parametrize("component", COMPONENTS)
def test_with_the_shipped_policies_each_component_starts(component: str, plane: Plane) -> None:
    assert started(component, plane) == 0


@pytest.mark.parametrize("component", COMPONENTS)
def test_without_a_binding_it_relies_on_each_component_refuses_to_start(
    component: str, plane: Plane
) -> None:
    plane.admin.delete(f"{BINDINGS}/{RELIED_ON[component]}")
    stderr = refused(component, plane)
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert f"ValidatingAdmissionPolicyBinding {RELIED_ON[component]} does not exist" in stderr
    assert started(component, plane, "--allow-missing-policies") == 1
    if component == "agent":  # its default
        assert started(component, plane) == 1


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_binding_that_only_warns_counts_as_missing(component: str, plane: Plane) -> None:
    path = f"{BINDINGS}/{RELIED_ON[component]}"
    plane.admin.patch(path, {"spec": {"validationActions": ["Warn", "Audit"]}})
    stderr = refused(component, plane)
    assert "does not Deny" in stderr and RELIED_ON[component] in stderr
