"""The chart's monitoring objects on the real API server: with the Prometheus Operator's own
PodMonitor and PrometheusRule CRDs installed (vendored in tests/real/data, v0.82.0), the
PodMonitors, the PrometheusRule and the dashboard ConfigMap the chart renders, and the ones
``daemonset/monitoring`` holds, are stored under strict field validation with nothing pruned.
tests/deploy/test_monitoring.py checks what they say (promtool, the series exposed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.control_plane import ControlPlane, wait_until
from testbed.manifests import MANIFESTS, helm_template, kustomize
from testbed.rest import Obj, Rest, RestError

DATA = Path(__file__).parent / "data"
CRDS = ("podmonitors", "prometheusrules")
MONITORING = {"PodMonitor", "PrometheusRule"}


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[Rest]:
    rest = control_plane.rest()
    for name in CRDS:
        crd = next(
            d
            for d in yaml.safe_load_all((DATA / f"monitoring.coreos.com_{name}.yaml").read_text())
            if d
        )
        rest.apply(crd)
        path = (
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}.monitoring.coreos.com"
        )

        def established(path: str = path) -> bool:
            conditions = (rest.get(path).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_until(established, 60, f"the {name} CRD is established")
    yield rest


def strictly_applied(rest: Rest, document: Obj) -> Obj:
    """Server-side apply refusing any field the CRD's schema does not know."""
    meta = document["metadata"]
    path = rest.path(document["apiVersion"], document["kind"], meta["name"], meta["namespace"])
    return rest.request(
        "PATCH",
        path,
        document,
        query={"fieldManager": "testbed", "force": "true", "fieldValidation": "Strict"},
        content_type="application/apply-patch+yaml",
    )


def monitoring_objects(documents: list[dict[str, Any]]) -> list[Obj]:
    return [
        d
        for d in documents
        if d["kind"] in MONITORING
        or (d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {}))
    ]


def kept(stored: Any, sent: Any) -> bool:
    """Whether everything sent was stored (the CRD's defaults may add fields, never drop)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            k in stored and kept(stored[k], v) for k, v in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(sent)
            and all(kept(a, b) for a, b in zip(stored, sent, strict=True))
        )
    return bool(stored == sent)


def check_stored(admin: Rest, documents: list[Obj]) -> None:
    kinds = {d["kind"] for d in documents}
    assert MONITORING | {"ConfigMap"} <= kinds, kinds
    for document in documents:
        stored = strictly_applied(admin, document)
        field = "data" if document["kind"] == "ConfigMap" else "spec"
        assert kept(stored[field], document[field]), f"{document['metadata']['name']}: pruned"


def test_the_charts_monitoring_objects_are_stored_as_the_operators_crds_define_them(
    admin: Rest,
) -> None:
    rendered = helm_template(
        "monitoring.podMonitors=true",
        "monitoring.prometheusRule=true",
        "monitoring.grafanaDashboard=true",
        "monitoring.labels.release=kps",
        "dra.enabled=true",
    )
    documents = monitoring_objects([d for d in yaml.safe_load_all(rendered) if d])
    assert sum(d["kind"] == "PodMonitor" for d in documents) >= 3, "agent, scheduler, DRA"
    check_stored(admin, documents)


def test_the_kustomize_monitoring_folder_is_stored_too(admin: Rest) -> None:
    check_stored(admin, monitoring_objects(kustomize(MANIFESTS / "monitoring")))


def test_a_field_the_crd_does_not_know_is_refused(admin: Rest) -> None:
    # The control: strict validation is in force, so the tests above would see a wrong field.
    # (The API server answers a server-side apply its schema cannot type with 500.)
    rendered = helm_template("monitoring.podMonitors=true")
    monitor = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["scrapeEvery"] = "30s"
    with pytest.raises(RestError) as refused:
        strictly_applied(admin, monitor)
    assert refused.value.status in (400, 422, 500)
    assert "scrapeEvery: field not declared in schema" in refused.value.message
