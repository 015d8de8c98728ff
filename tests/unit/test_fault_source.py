"""The fault source checked at start (a 403 on ``mindx-dl`` is a refusal naming the chart
value, exit 2) and shown while the service runs (``ascend_scheduler_fault_source``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import clusterd, nodeinfo
from infra.kube import policies
from infra.kube.client import KubernetesGateway
from infra.kube.port import Forbidden, KubeError, Page, Selection
from infra.metrics import exposition, registry
from scheduler_core import __main__ as cli
from scheduler_core import fault_source
from scheduler_core.init_params import from_configuration
from simulation.memory import MemoryCluster
from tests.unit.test_init_params import SHIPPED, args_of


class Refusing(MemoryCluster):
    """Refuses every list in ``mindx-dl`` with ``error``, as the API server without a Role."""

    def __init__(self, error: KubeError) -> None:
        super().__init__()
        self.error = error
        self.listed: list[Selection] = []

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        self.listed.append(what)
        if what.namespace == clusterd.NAMESPACE:
            raise self.error
        return super().list_page(what, limit, token)


FORBIDDEN = Forbidden("list configmaps in mindx-dl: HTTP 403 Forbidden")


def test_clusterd_without_its_role_is_refused_naming_the_rbac_and_the_chart_value() -> None:
    gateway = Refusing(FORBIDDEN)
    said = fault_source.refusal(gateway, use_clusterd=True, noded=True)
    assert said is not None and "\n" not in said
    assert said.startswith("--use-cluster-info-manager: this identity may not list ConfigMaps")
    assert "scheduler.clusterInfoManager=true" in said and "ascend-npu-scheduler-clusterd" in said
    assert 'useClusterInfoManager: "false"' in said
    (listed,) = gateway.listed
    assert listed.labels == "mx-consumer-volcano=true", "the label the watch lists by"
    said = fault_source.refusal(gateway, use_clusterd=False, noded=True)
    assert said is not None and "scheduler.noded=true" in said
    assert gateway.listed[-1].labels == "=".join(nodeinfo.CONSUMER_LABEL)
    assert fault_source.refusal(gateway, use_clusterd=False, noded=False) is None
    assert len(gateway.listed) == 2, "DeviceInfo alone: nothing listed in mindx-dl"
    unreachable = Refusing(KubeError("list: the API server is unreachable (OSError)"))
    said = fault_source.refusal(unreachable, use_clusterd=True, noded=False)
    assert said is not None and "could not be listed" in said
    assert fault_source.refusal(MemoryCluster(), use_clusterd=True, noded=False) is None


def test_serve_exits_2_with_the_one_line_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gateway = Refusing(FORBIDDEN)
    monkeypatch.setattr(KubernetesGateway, "from_environment", lambda *_: gateway)
    monkeypatch.setattr(policies, "check", lambda *_: ([], None))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    argv = ["serve", "--insecure", "--kube=kubeconfig", f"--kubeconfig={kubeconfig}"]
    assert cli.main([*argv, "--use-cluster-info-manager=true"]) == cli.EXIT_BAD_INPUT
    (line,) = [e for e in capsys.readouterr().err.splitlines() if e.startswith("error:")]
    assert line.startswith("error: --use-cluster-info-manager:") and "403" in line


def test_the_metric_names_each_source_read() -> None:
    for clusterd_on, noded, shown in (
        (False, False, {"deviceinfo"}),
        (False, True, {"deviceinfo", "noded"}),
        (True, True, {"clusterd"}),
    ):
        metrics = registry()
        fault_source.report(metrics, clusterd_on, noded)
        text = exposition(metrics)
        assert {
            line.split('"')[1]
            for line in text.splitlines()
            if line.startswith("ascend_scheduler_fault_source{")
        } == shown


def test_init_params_reading_clusterd_overridden_off_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    args = args_of(["--use-cluster-info-manager=false"])
    cli._settle(args, from_configuration(SHIPPED))
    assert args.cluster_info_manager is False
    assert any("scheduler.clusterInfoManager" in r.message for r in caplog.records)
    caplog.clear()
    args = args_of(["--use-cluster-info-manager=false"])
    cli._settle(
        args,
        from_configuration(
            SHIPPED.replace('"useClusterInfoManager":"true"', '"useClusterInfoManager":"false"')
        ),
    )
    assert not any("scheduler.clusterInfoManager" in r.message for r in caplog.records)
