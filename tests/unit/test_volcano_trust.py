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
    merged,
    removed,
    trusting,
    untrusting,
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
