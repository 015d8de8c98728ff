"""The merge Job's credentials for Volcano: the token in the urlPrefix's userinfo (never in a
log line or an error), the service's CA mounted into Volcano's scheduler and taken out again
exactly."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler_core.volcano_config import (
    Entry,
    NotTrusted,
    bare,
    check_volcano,
    merged,
    removed,
    trusting,
    untrusting,
    volcano_version,
)

URL = "https://ascend-npu-scheduler.kube-system.svc:8888/volcano"
DEPLOYMENT: dict[str, Any] = {
    "metadata": {"name": "volcano-scheduler", "namespace": "volcano-system"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "volcano-scheduler", "image": "volcanosh/vc-scheduler:v1.13.0"}
                ],
                "volumes": [{"name": "scheduler-config", "configMap": {"name": "conf"}}],
            }
        }
    },
}


def entry() -> Entry:
    return Entry({"extender.urlPrefix": URL, "extender.predicateVerb": "predicate"})


def test_the_token_goes_into_the_userinfo_and_names_nothing() -> None:
    withheld = entry().with_token("a/b+c=")
    assert (
        withheld.url
        == "https://volcano:a%2Fb%2Bc%3D@ascend-npu-scheduler.kube-system.svc:8888/volcano"
    )
    assert bare(withheld.url) == URL
    conf = merged("", withheld)
    assert withheld.url in conf
    # A new token replaces ours in place; removing finds it whatever its token.
    assert merged(conf, entry().with_token("new")).count("extender.urlPrefix") == 1
    assert "new@" in merged(conf, entry().with_token("new"))
    assert "extender" not in removed(conf, URL)


def test_someone_elses_extender_is_named_without_its_credentials() -> None:
    theirs = Entry({"extender.urlPrefix": "https://u:their-secret@other.svc/volcano"})
    with pytest.raises(ValueError) as refused:
        merged(merged("", theirs), entry().with_token("ours"))
    assert "their-secret" not in str(refused.value) and "ours" not in str(refused.value)
    assert "'https://other.svc/volcano'" in str(refused.value)


def test_the_ca_is_mounted_and_taken_out_exactly() -> None:
    trusted = trusting(DEPLOYMENT, "volcano-scheduler", "ascend-npu-scheduler-ca")
    spec = trusted["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["env"] == [
        {"name": "SSL_CERT_DIR", "value": "/etc/ssl/certs:/etc/ascend-npu-ca"}
    ]
    assert container["volumeMounts"] == [
        {"name": "ascend-npu-scheduler-ca", "mountPath": "/etc/ascend-npu-ca", "readOnly": True}
    ]
    assert {
        "name": "ascend-npu-scheduler-ca",
        "configMap": {"name": "ascend-npu-scheduler-ca"},
    } in spec["volumes"]
    assert trusting(trusted, "volcano-scheduler", "ascend-npu-scheduler-ca") == trusted, "once"
    assert untrusting(trusted, "volcano-scheduler") == DEPLOYMENT
    assert DEPLOYMENT["spec"]["template"]["spec"]["containers"][0].keys() == {"name", "image"}


def test_a_users_own_cert_dir_is_kept() -> None:
    own = copy.deepcopy(DEPLOYMENT)
    own["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "SSL_CERT_DIR", "value": "/etc/corp-ca"}
    ]
    trusted = trusting(own, "volcano-scheduler", "ascend-npu-scheduler-ca")
    (container,) = trusted["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {"name": "SSL_CERT_DIR", "value": "/etc/corp-ca:/etc/ascend-npu-ca"}
    ]
    assert untrusting(trusted, "volcano-scheduler") == own


def test_a_deployment_without_the_container_is_refused_naming_it() -> None:
    with pytest.raises(NotTrusted, match="no container 'scheduler' \\(--scheduler-container\\)"):
        trusting(DEPLOYMENT, "scheduler", "ascend-npu-scheduler-ca")


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("volcanosh/vc-scheduler:v1.12.0", (1, 12, 0)),
        ("registry:5000/volcanosh/vc-scheduler:v1.15.1@sha256:abc", (1, 15, 1)),
        ("vc-scheduler:1.13", (1, 13, 0)),
        ("v1.9.0", (1, 9, 0)),
        ("registry:5000/volcanosh/vc-scheduler", None),
        ("volcanosh/vc-scheduler:latest", None),
        ("volcanosh/vc-scheduler@sha256:abc", None),
    ],
)
def test_the_volcano_version_is_read_from_the_image_tag(
    text: str, version: tuple[int, int, int] | None
) -> None:
    assert volcano_version(text) == version


def with_image(image: str) -> dict[str, Any]:
    deployment = copy.deepcopy(DEPLOYMENT)
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return deployment


def test_merge_refuses_a_volcano_whose_extender_plugin_cannot_give_chips() -> None:
    # Volcano v1.12's extender plugin ignores allocateFuncVerb: its pods would bind chipless.
    with pytest.raises(NotTrusted) as refused:
        check_volcano(with_image("volcanosh/vc-scheduler:v1.12.0"), "volcano-scheduler", None)
    said = str(refused.value)
    assert "volcano-system/volcano-scheduler runs Volcano v1.12.0" in said
    assert "allocateFuncVerb" in said and "without their chips" in said
    check_volcano(with_image("volcanosh/vc-scheduler:v1.13.0"), "volcano-scheduler", None)


def test_an_image_without_a_version_needs_the_version_declared() -> None:
    latest = with_image("volcanosh/vc-scheduler:latest")
    with pytest.raises(NotTrusted, match="does not say which Volcano runs; set --volcano-version"):
        check_volcano(latest, "volcano-scheduler", None)
    check_volcano(latest, "volcano-scheduler", "v1.15.0")
    with pytest.raises(NotTrusted, match=r"runs Volcano v1\.9\.0"):
        check_volcano(with_image("volcanosh/vc-scheduler:v1.15.0"), "volcano-scheduler", "1.9.0")
