"""DRA names shared by the DRA driver and the agent (which must not serve a node's chips the
DRA driver publishes): the driver's default name, the API's resources, the node label that
gives a node to the DRA driver."""

from __future__ import annotations

DEFAULT_DRIVER = "npu.ascend.example.com"  # a placeholder domain: deploy under your own
SLICE_KIND = "resourceslices.resource.k8s.io/v1"
CLAIM_KIND = "resourceclaims.resource.k8s.io/v1"
DRA_NODE_LABEL = "ascend.npu/dra"  # "true": the DRA driver serves the node's chips


def slice_name(node: str, driver: str) -> str:
    """The one ResourceSlice the DRA driver publishes for a node."""
    return f"{node}-{driver}"
