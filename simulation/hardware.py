"""The servers a simulated cluster can hold: each product as its node looks to Kubernetes (the
labels Huawei's installation gives it, MindCluster ``docs/en/scheduling/developer_guide/
installation_deployment/manual_installation/01_preparing_for_installation.md``, and its chips at
the kubelet) and as the fake driver models it (``chip_drivers/fake.py``'s state file)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract.chip_names import ASCEND310P, ASCEND910, NPU, ChipKind
from contract.objects import Obj

ASCEND910_LABELS = {"accelerator": "huawei-Ascend910", "host-arch": "huawei-arm"}


@dataclass(frozen=True, slots=True)
class Hardware:
    """One kind of server: its name prefix, the fake driver's product, its chips and labels.
    ``super_pod``: its nodes are one physical SuperPoD of this id (A3, 950 SuperPoDs);
    ``rack``: so many of its nodes share a rack (the 950 SuperPoD's racks of 8 servers)."""

    prefix: str
    product: str
    chips: int
    labels: Mapping[str, str]
    kind: ChipKind = ASCEND910
    servertype: str = ""
    super_pod: int | None = None
    rack: int | None = None

    def node_name(self, i: int) -> str:
        return f"{self.prefix}-{i:02d}"

    def node_object(self, i: int, subnet: int) -> Obj:
        """The node as its kubelet reports it (InternalIP 192.168.<subnet>.<i+1>)."""
        chips = {self.kind.resource: str(self.chips)}
        return {
            "metadata": {"name": self.node_name(i), "labels": dict(self.labels)},
            "status": {
                "capacity": dict(chips),
                "allocatable": dict(chips),
                "addresses": [{"type": "InternalIP", "address": f"192.168.{subnet}.{i + 1}"}],
            },
        }

    def state(self, i: int, subnet: int) -> str:
        """The fake driver's state file of node ``i``."""
        lines = [f"chip_type: {self.kind.name}", f"product: {self.product}"]
        if self.servertype:
            lines.append(f"servertype: {self.servertype}")
        if self.super_pod is not None:
            lines += [f"super_pod_id: {self.super_pod}", f"server_index: {i}"]
        if self.rack is not None:
            lines.append(f"rack_id: {i // self.rack}")
        lines.append("chips:")
        lines += [
            f"  - {{id: {c}, health: Healthy, ip: 10.{subnet}.{i}.{c + 10}}}"
            for c in range(self.chips)
        ]
        return "\n".join(lines) + "\n"


ATLAS_800 = Hardware(
    "a800",
    "module910x8",
    8,
    {**ASCEND910_LABELS, "accelerator-type": "module"},
    servertype="Ascend910-32",
)
ATLAS_300T = Hardware("a300t", "card910x2", 2, {**ASCEND910_LABELS, "accelerator-type": "card"})
ATLAS_300T_A2 = Hardware(
    "a300t-a2", "card910x2", 8, {**ASCEND910_LABELS, "accelerator-type": "card"}
)
ATLAS_800T_A2 = Hardware(
    "a800t-a2",
    "module910bx8",
    8,
    {**ASCEND910_LABELS, "accelerator-type": "module-910b-8"},
    servertype="Ascend910B-20",
)
ATLAS_200T_A2_BOX16 = Hardware(
    "box16",
    "module910bx16",
    16,
    {**ASCEND910_LABELS, "host-arch": "huawei-x86", "accelerator-type": "module-910b-16"},
)
ATLAS_800T_A3 = Hardware(
    "a3", "module910a3x16", 16, {**ASCEND910_LABELS, "accelerator-type": "module-a3-16"}
)
ATLAS_900_A3_SUPERPOD = Hardware(
    "a3sp",
    "superpod910a3x16",
    16,
    {**ASCEND910_LABELS, "accelerator-type": "module-a3-16-super-pod"},
    super_pod=0,
)
ATLAS_300I_DUO = Hardware(
    "duo",
    "chip310px2",
    16,
    {"accelerator": "huawei-Ascend310P", "infer-card-type": "card-300i-duo"},
    kind=ASCEND310P,
)
ATLAS_350 = Hardware("a350", "atlas350x8", 8, {"accelerator": "huawei-npu"}, kind=NPU)
ATLAS_950_SUPERPOD = Hardware(
    "a950sp",
    "superpod950x8",
    8,
    {"accelerator": "huawei-npu"},
    kind=NPU,
    super_pod=0,
    rack=8,
)
