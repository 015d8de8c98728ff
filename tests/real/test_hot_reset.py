"""Hot reset on the real API server: the agent (its own builder, the fake driver, the kubelet
simulator) under its node-bound ServiceAccount token, behind the chart's admission policies.
A 910 ring with a chip reporting a RestartNPU code is not reset while a pod holds another chip
of the ring; once the pod is gone and the ring stayed idle, the DeviceInfo lists the ring under
``-Recovering`` during the reset, then every chip healthy and free. A reset that fails is
written to the node annotation ``ResetInfo``, which the policy lets the agent write on its own
node and nowhere else (Ascend/mind-cluster component/ascend-device-plugin
pkg/server/hot_reset_manager.go, pkg/device/ascend910.go, pkg/device/reset_info_mgr.go)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.builder import AgentConfig, KubeSettings, NodeAgent, start_node_agent
from agent.hot_reset import RESET_INFO_ANNOTATION
from chip_drivers.fake import FakeDriver
from contract.deviceinfo import configmap_name
from infra.kube.client import KubernetesGateway, api_client
from simulation.kubelet import KubeletSimulator
from testbed.cluster import NAMESPACE, SCHEDULER_ACCOUNT, SCHEDULER_PROFILE, apply
from testbed.cluster import bound_agent_token as agent_token
from testbed.control_plane import ControlPlane, wait_until
from testbed.manifests import MANIFESTS, kustomize
from testbed.rest import Obj, Rest, RestError

NODE, OTHER = "reset-a", "reset-b"
AGENT_SCOPE = "ascend-npu-agent-scope"
RESTART_NPU = "80E18008"  # a RestartNPUCodes entry of Huawei's faultCode.json
IDLE = 2.0  # seconds a ring must stay idle: upstream's fixed 60 s, shortened for the test
DEADLINE = 120.0  # seconds: a shared 2-core machine
RES = "huawei.com/Ascend910"
TEAM = "training"
PODS = f"/api/v1/namespaces/{TEAM}/pods"


def refused_by_policy(rest: Rest, path: str, body: Obj, *, dry_run: bool = False) -> str:
    """The message of a PATCH the agent's scope policy refuses ("" when it is not refused)."""
    try:
        rest.request(
            "PATCH",
            path,
            body,
            query={"dryRun": "All"} if dry_run else None,
            content_type="application/merge-patch+json",
        )
    except RestError as refused:
        if (
            refused.status == 403
            and f"ValidatingAdmissionPolicy '{AGENT_SCOPE}'" in refused.message
        ):
            return refused.message
        raise
    return ""


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> ControlPlane:
    """The chart's RBAC and policies in force, and two nodes."""
    apply(control_plane, kustomize(MANIFESTS / "overlays" / "kube-scheduler"))
    admin = control_plane.rest()
    admin.ensure_namespace(TEAM)
    for name in (NODE, OTHER):
        try:
            admin.create("/api/v1/nodes", {"metadata": {"name": name}})
        except RestError as exists:
            if exists.status != 409:
                raise
    unbound = control_plane.rest(control_plane.service_account(NAMESPACE, "ascend-npu-agent"))
    probe = {"metadata": {"labels": {"probe": "1"}}}
    wait_until(
        lambda: bool(refused_by_policy(unbound, f"/api/v1/nodes/{NODE}", probe, dry_run=True)),
        DEADLINE,
        f"the policy {AGENT_SCOPE} in force",
    )
    return control_plane


class Node:
    def __init__(self, plane: ControlPlane, home: Path, state: dict[str, Any]) -> None:
        self.admin = plane.rest()
        self.path = home / "state.yaml"
        self.path.write_text(yaml.safe_dump(state))
        self.kubeconfig = plane.token_kubeconfig(agent_token(plane, NODE), f"agent-{NODE}")
        self.kubelet = KubeletSimulator(home / "plugins", home / "podres.sock")
        self.kubelet.start()
        config = AgentConfig(
            home / "plugins",
            ascend_runtime=True,
            period=0.2,
            kube=KubeSettings(NODE, True, home / "podres.sock", heartbeat=1.0),
            hot_reset=True,
            hot_reset_idle=IDLE,
        )
        gateway = KubernetesGateway(api_client(self.kubeconfig))
        self.agent: NodeAgent = start_node_agent(config, FakeDriver(self.path), gateway)

    def state(self) -> dict[str, Any]:
        raw: dict[str, Any] = yaml.safe_load(self.path.read_text())
        return raw

    def deviceinfo(self) -> tuple[dict[str, str], int]:
        """The DeviceList and UpdateTime the agent published ({} and -1 before it did)."""
        try:
            cm = self.admin.get(f"/api/v1/namespaces/kube-system/configmaps/{configmap_name(NODE)}")
        except RestError as missing:
            if missing.status == 404:
                return {}, -1
            raise
        info = json.loads(cm["data"]["DeviceInfoCfg"])["DeviceInfo"]
        return dict(info["DeviceList"]), int(info["UpdateTime"])

    def listed(self, key: str) -> str | None:
        return self.deviceinfo()[0].get(key)

    def reset_info(self) -> dict[str, Any] | None:
        notes = self.admin.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations") or {}
        text = notes.get(RESET_INFO_ANNOTATION)
        return None if text is None else dict(json.loads(text))

    def events(self) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the hot reset's Events about the Node, oldest first
        (the node controller records its own there too)."""
        found = self.admin.get(
            "/api/v1/namespaces/default/events",
            fieldSelector=f"involvedObject.kind=Node,involvedObject.name={NODE}",
        )["items"]
        found.sort(key=lambda e: e["metadata"]["creationTimestamp"])
        return [
            (e["type"], e["reason"], e["message"])
            for e in found
            if e["reason"].startswith("HotReset")
        ]

    def stop(self) -> None:
        self.agent.stop()
        self.kubelet.close()


@pytest.fixture
def node(plane: ControlPlane) -> Iterator[Node]:
    chips: list[dict[str, Any]] = [{"id": i} for i in range(8)]
    chips[2] |= {"health": "Unhealthy", "fault_codes": [RESTART_NPU]}
    home = Path(tempfile.mkdtemp(prefix="hr", dir="/tmp"))
    running = Node(plane, home, {"product": "module910x8", "chips": chips, "reset_seconds": 2})
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(home, ignore_errors=True)


def names(*chips: int) -> str:
    return ",".join(f"Ascend910-{c}" for c in chips)


def hold_chip(plane: ControlPlane, name: str, chip: int) -> str:
    """A pod of our scheduler bound to NODE with chip ``chip`` chosen for it, made as an admin
    and the scheduler make one: its path."""
    admin = plane.rest()
    body = {
        "metadata": {"name": name},
        "spec": {
            "schedulerName": SCHEDULER_PROFILE,
            "containers": [
                {"name": "main", "image": "train:1", "resources": {"limits": {RES: "1"}}}
            ],
            "tolerations": [{"operator": "Exists"}],  # no kubelet: no eviction
        },
    }
    admin.create(PODS, body)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": NODE},
    }
    admin.create(f"{PODS}/{name}/binding", binding)
    scheduler = plane.rest(plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT))
    chosen = {RES: f"Ascend910-{chip}", "predicate-time": "1"}
    scheduler.patch(f"{PODS}/{name}", {"metadata": {"annotations": chosen}})
    return f"{PODS}/{name}"


def test_a_training_ring_is_reset_once_idle_and_comes_back(plane: ControlPlane, node: Node) -> None:
    pod = hold_chip(plane, "holder", 1)
    # The agent sees the pod: chip 1 is not free, chip 2 unhealthy.
    wait_until(
        lambda: node.listed(RES) == names(0, 3, 4, 5, 6, 7), DEADLINE, "the pod's chip taken"
    )
    assert node.listed(f"{RES}-Unhealthy") == names(2)
    # Longer than the idle wait passes on the agent's clock (its DeviceInfo heartbeat): the
    # ring holds a pod, so no reset.
    _, seen = node.deviceinfo()
    wait_until(lambda: node.deviceinfo()[1] >= seen + IDLE + 2, DEADLINE, "the agent's clock")
    assert "resets" not in node.state() and "resetting" not in node.state()
    assert node.listed(f"{RES}-Recovering") == ""
    # The pod is gone: after the idle wait the ring 0-3 is reset, listed as recovering.
    node.admin.request("DELETE", pod, query={"gracePeriodSeconds": "0"})
    wait_until(
        lambda: node.listed(f"{RES}-Recovering") == names(0, 1, 2, 3), DEADLINE, "recovering"
    )
    assert node.state()["resetting"] == [0, 1, 2, 3]
    wait_until(lambda: node.state().get("resets") == {2: 1}, DEADLINE, "the reset done")
    wait_until(
        lambda: node.listed(RES) == names(*range(8)), DEADLINE, "every chip healthy and free"
    )
    listed = node.deviceinfo()[0]
    assert listed[f"{RES}-Recovering"] == "" and listed[f"{RES}-Unhealthy"] == ""
    assert node.reset_info() in (None, {"ThirdPartyResetDevs": [], "ManualResetDevs": []})
    # Upstream's reset Events on the Node (pkg/plugin/builtin/reset_record_plugin.go).
    wait_until(lambda: len(node.events()) == 2, DEADLINE, "the reset's Events")
    assert node.events() == [
        (
            "Warning",
            "HotResetStart",
            f"hot reset start, nodeName:{NODE}, ringDevs:0,1,2,3, faultDev:2, tokensLeft:2",
        ),
        ("Normal", "HotResetComplete", f"hot reset complete, nodeName:{NODE}, devices:0,1,2,3"),
    ]

    # A reset that fails: chip 5 is left to an operator in ResetInfo, which the agent's own
    # identity writes through the policy.
    raw = node.state()
    raw["chips"][5] |= {"health": "Unhealthy", "fault_codes": [RESTART_NPU]}
    raw["reset_fails"], raw["reset_seconds"] = [5], 0
    node.path.write_text(yaml.safe_dump(raw))

    def listed_for_an_operator() -> bool:
        info = node.reset_info()
        return info is not None and [d["PhyID"] for d in info["ManualResetDevs"]] == [5]

    wait_until(listed_for_an_operator, DEADLINE, "chip 5 in ResetInfo")
    info = node.reset_info()
    assert info is not None and info["ThirdPartyResetDevs"] == []
    failed = ("Warning", "HotResetFailed")
    wait_until(lambda: failed in [e[:2] for e in node.events()], DEADLINE, "HotResetFailed")
    message = next(e[2] for e in node.events() if e[:2] == failed)
    assert message.startswith(f"hot reset failed, nodeName:{NODE}, devices:4,5,6,7, err:")
    assert set(info["ManualResetDevs"][0]) == {
        "CardId",
        "DeviceId",
        "AssociatedCardId",
        "PhyID",
        "LogicID",
    }


def test_the_agent_writes_reset_info_on_its_node_alone(plane: ControlPlane) -> None:
    kubeconfig = plane.token_kubeconfig(agent_token(plane, NODE), f"agent-{NODE}")
    agent = plane.rest(kubeconfig)
    text = '{"ThirdPartyResetDevs":[],"ManualResetDevs":[]}'
    mine = {"metadata": {"annotations": {RESET_INFO_ANNOTATION: text}}}
    assert not refused_by_policy(agent, f"/api/v1/nodes/{NODE}", mine)
    assert refused_by_policy(agent, f"/api/v1/nodes/{OTHER}", mine, dry_run=True)
    more = {"metadata": {"annotations": {RESET_INFO_ANNOTATION: text, "x": "y"}}}
    says = refused_by_policy(agent, f"/api/v1/nodes/{NODE}", more, dry_run=True)
    assert "annotations of its node, not x" in says, says
