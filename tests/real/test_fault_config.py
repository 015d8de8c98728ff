"""The fault-code override on the real API server: the agent (its own builder, the fake driver,
the kubelet simulator, its node-bound ServiceAccount token under the chart's RBAC) reads
``kube-system/mindx-dl-fault-config`` as Huawei's device plugin does (Ascend/mind-cluster
component/ascend-device-plugin pkg/server/manager.go ``pollFaultCodeCM``, every
``PollInterval`` seconds): a new level for a code takes effect in the DeviceInfo, and a
malformed key is logged and ignored."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.builder import AgentConfig, KubeSettings, start_node_agent
from chip_drivers.fake import FakeDriver
from contract.deviceinfo import configmap_name, decode
from infra.kube.client import KubernetesGateway, api_client
from simulation.kubelet import KubeletSimulator
from testbed.cluster import apply
from testbed.cluster import bound_agent_token as agent_token
from testbed.control_plane import ControlPlane, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import RestError

NODE = "fault-config-a"
CODE = "80E18008"  # a RestartNPUCodes entry of Huawei's faultCode.json: unhealthy by default
OVERRIDE = "/api/v1/namespaces/kube-system/configmaps/mindx-dl-fault-config"
POLL = "30"  # seconds: upstream's shortest PollInterval
DEADLINE = 120.0  # seconds: a shared 2-core machine, and a poll every 30 s


def override(table: str, customization: str | None = None) -> dict[str, object]:
    data = {"faultCode.json": table, "PollInterval": POLL}
    if customization is not None:
        data["faultCustomization.json"] = customization
    return {
        "metadata": {"name": "mindx-dl-fault-config", "namespace": "kube-system"},
        "data": data,
    }


@pytest.fixture
def plane(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The chart's RBAC in force, the node, and the override before the agent starts."""
    apply(control_plane, kustomize(MANIFESTS / "overlays" / "kube-scheduler"))
    admin = control_plane.rest()
    admin.create("/api/v1/nodes", {"metadata": {"name": NODE}})
    admin.create(
        "/api/v1/namespaces/kube-system/configmaps",
        override(f'{{"NotHandleFaultCodes":["{CODE}"]}}'),
    )
    try:
        yield control_plane
    finally:
        admin.request("DELETE", OVERRIDE)


def test_the_agent_reads_the_override_and_ignores_a_malformed_key(
    plane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.faults.pipeline")
    admin = plane.rest()
    home = Path(tempfile.mkdtemp(prefix="fc", dir="/tmp"))
    chips: list[dict[str, object]] = [{"id": i} for i in range(8)]
    chips[0] |= {"fault_codes": [CODE]}
    (home / "state.yaml").write_text(yaml.safe_dump({"product": "module910x8", "chips": chips}))
    kubelet = KubeletSimulator(home / "plugins", home / "podres.sock")
    kubelet.start()
    kubeconfig = plane.token_kubeconfig(agent_token(plane, NODE), f"agent-{NODE}")
    config = AgentConfig(
        home / "plugins",
        ascend_runtime=True,
        period=0.2,
        kube=KubeSettings(NODE, True, home / "podres.sock", heartbeat=1.0),
    )
    gateway = KubernetesGateway(api_client(kubeconfig))
    agent = start_node_agent(config, FakeDriver(home / "state.yaml"), gateway)

    def level() -> str | None:
        """Chip 0's level in the DeviceInfo (None before the agent wrote one)."""
        try:
            cm = admin.get(f"/api/v1/namespaces/kube-system/configmaps/{configmap_name(NODE)}")
        except RestError as missing:
            if missing.status == 404:
                return None
            raise
        info = decode(cm["data"])
        levels = {f.level for f in info.faults if f.chip == 0 and not f.network}
        assert (0 in info.unhealthy) == (levels != {"NotHandleFault"}), info
        return next(iter(levels), "")

    def logged(text: str) -> bool:
        return any(text in r.getMessage() for r in caplog.records)

    try:
        # Read at start: the override's level, not the shipped table's RestartNPU.
        wait_until(lambda: level() == "NotHandleFault", DEADLINE, "the override's level")
        # At the next poll (one, to keep the test short): a new level for the code takes
        # effect, and a malformed key beside it is one line naming it, its last good value
        # staying (which value stays: tests/unit/test_fault_escalation.py).
        admin.request(
            "PUT",
            OVERRIDE,
            override(f'{{"SeparateNPUCodes":["{CODE}"]}}', customization='{"FaultFrequency": ['),
        )
        wait_until(lambda: level() == "SeparateNPU", DEADLINE, "the new level")
        wait_until(
            lambda: logged("key faultCustomization.json ignored"), DEADLINE, "the bad key logged"
        )
        bad = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
        assert len(bad) == 1 and "faultCustomization.json" in bad[0], bad
    finally:
        agent.stop()
        kubelet.close()
        shutil.rmtree(home, ignore_errors=True)
