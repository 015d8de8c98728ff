"""Where the service reads chip and node faults, checked at start and shown while it runs.

Huawei's Volcano plugin reads one source or the other (Ascend/mind-cluster component/
ascend-for-volcano/common/k8s/cmmgr.go ``InitCmInformer``): the DeviceInfo ConfigMaps of
``kube-system`` (with NodeD's ``mindx-dl-nodeinfo-<node>`` where told), or ClusterD's
``mindx-dl/cluster-info-*`` (``useClusterInfoManager``). Reading ``mindx-dl`` needs a Role
there; without it every list is refused and the service would never become ready, so the
start lists once and refuses (exit 2) with the missing grant named. The source is then an
info metric, ``ascend_scheduler_fault_source{source}``, beside the start log's line.
"""

from __future__ import annotations

from contract import clusterd, deviceinfo, nodeinfo
from infra.kube.port import Forbidden, KubeError, KubeGateway, Selection
from infra.metrics import Gauge, Registry

DEVICEINFO, CLUSTERD, NODED = "deviceinfo", "clusterd", "noded"


def sources(use_clusterd: bool, noded: bool) -> tuple[str, ...]:
    """What is read: ClusterD's ConfigMaps instead of both the others (informers.py)."""
    if use_clusterd:
        return (CLUSTERD,)
    return (DEVICEINFO, NODED) if noded else (DEVICEINFO,)


def refusal(gateway: KubeGateway, use_clusterd: bool, noded: bool) -> str | None:
    """The one-line refusal when the service's identity may not list the ConfigMaps it is
    told to read in ``mindx-dl`` (None: it may, or it reads nothing there). A list of one, by
    the same label the watch uses."""
    if use_clusterd:
        flag, value = "--use-cluster-info-manager", "clusterInfoManager"
        namespace, label = clusterd.NAMESPACE, clusterd.CONSUMER_LABEL
    elif noded:
        flag, value = "--noded", "noded"
        namespace, label = nodeinfo.NAMESPACE, nodeinfo.CONSUMER_LABEL
    else:
        return None
    what = Selection("ConfigMap", namespace, labels="=".join(label))
    try:
        gateway.list_page(what, 1)
    except Forbidden as refused:
        off = (
            ' (without ClusterD: useClusterInfoManager: "false" in init-params, or '
            "--use-cluster-info-manager=false)"
            if use_clusterd
            else ""
        )
        return (
            f"{flag}: this identity may not list ConfigMaps in {namespace} ({refused}); "
            f"grant list and watch of configmaps there (the chart: scheduler.{value}=true adds "
            f"the Role ascend-npu-scheduler-{CLUSTERD if use_clusterd else NODED}){off}"
        )
    except KubeError as failed:
        return f"{flag}: ConfigMaps in {namespace} could not be listed: {failed}"
    return None


def report(of: Registry, use_clusterd: bool, noded: bool) -> None:
    """``ascend_scheduler_fault_source{source}`` 1 for each source read (an info metric)."""
    gauge = Gauge(
        "ascend_scheduler_fault_source",
        f"The fault sources read: {DEVICEINFO} ({deviceinfo.NAMESPACE} DeviceInfo), {NODED} "
        f"(NodeD's {nodeinfo.NAMESPACE} reports), {CLUSTERD} (ClusterD's {clusterd.NAMESPACE}/"
        "cluster-info-*, instead of both); always 1.",
        ["source"],
        registry=of,
    )
    for source in sources(use_clusterd, noded):
        gauge.labels(source).set(1)
