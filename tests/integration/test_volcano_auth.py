"""Volcano's path with the verbs authenticated: its extender plugin has no TLS or header
settings, so the merge Job writes ``https://volcano:<token>@<service>:8888/volcano`` as its
urlPrefix and makes the service's CA trusted; the stand-in calls as Go's client would (the
userinfo as HTTP Basic, the server verified against that CA) and places pods."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.http import tls_context
from scheduler_core.certs import CLIENT_NAME, issue
from scheduler_core.service.access import Access
from simulation.cluster import SimulatedCluster, simulated_cluster
from simulation.kube_scheduler import ExtenderError
from simulation.volcano import VolcanoConfig, VolcanoScheduler, go_post
from tests.e2e.helpers import submit


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("volcano-tls")
    made = issue(
        ["127.0.0.1"], CLIENT_NAME, datetime.datetime.now(datetime.UTC), datetime.timedelta(days=1)
    )
    written = {}
    for name, content in (
        ("ca.crt", made.ca),
        ("tls.crt", made.server.cert),
        ("tls.key", made.server.key),
        ("token", made.token.encode()),
    ):
        written[name] = directory / name
        written[name].write_bytes(content)
    return written


@pytest.fixture(scope="module")
def cluster(files: dict[str, Path]) -> Iterator[SimulatedCluster]:
    tls = tls_context(files["tls.crt"], files["tls.key"], files["ca.crt"])
    token = files["token"].read_text()
    with simulated_cluster(1, access=Access(tls, frozenset({CLIENT_NAME}), token)) as cluster:
        yield cluster


def prefix(cluster: SimulatedCluster, token: str) -> str:
    return cluster.url.replace("https://", f"https://volcano:{token}@") + "/volcano"


def test_volcano_places_a_pod_through_the_token_over_tls(
    cluster: SimulatedCluster, files: dict[str, Path]
) -> None:
    assert cluster.url.startswith("https://")
    token = files["token"].read_text()
    volcano = VolcanoScheduler(
        cluster, VolcanoConfig(prefix(cluster, token), ca_file=files["ca.crt"])
    )
    submit(cluster, "v", 2, scheduler="volcano")
    cluster.service.refresh()
    report = volcano.session()
    assert report.extender_used and report.bound == 1
    notes = cluster.store.get_pod("ns", "v")["metadata"]["annotations"]
    assert len(notes["huawei.com/Ascend910"].split(",")) == 2, "the extender chose its chips"


def test_a_wrong_token_or_an_untrusted_server_gets_no_verb(
    cluster: SimulatedCluster, files: dict[str, Path]
) -> None:
    with pytest.raises(ExtenderError, match="onSessionClose: HTTP 401"):
        go_post(f"{prefix(cluster, 'guess')}/onSessionClose", {}, 5, files["ca.crt"])
    # Without the CA among its roots, Go's client refuses the server (and sends nothing).
    with pytest.raises(ExtenderError, match="CERTIFICATE_VERIFY_FAILED"):
        go_post(f"{prefix(cluster, files['token'].read_text())}/onSessionClose", {}, 5, None)
