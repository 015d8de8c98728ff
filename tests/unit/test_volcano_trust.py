"""The merge Job's credentials for Volcano: the token in the urlPrefix's userinfo (never in a
log line or an error), the service's CA mounted into Volcano's scheduler and taken out again
exactly; the adapter's vc-scheduler image set and the one before it put back."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.volcano_config import (
    Entry,
    NotTrusted,
    bare,
    check_volcano,
    imaged,
    main,
    merged,
    removed,
    trusting,
    unimaged,
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


HUAWEIS = "volcanosh/vc-scheduler:v1.12.0"  # Huawei's image, built by its build.sh
OURS = "registry.example/ascend-npu-vc-scheduler:v1.12.0-0.1.0"


def huaweis_deployment() -> dict[str, Any]:
    """Huawei's shape (build/volcano-v1.12.0.yaml): an init container of the same image."""
    deployment = copy.deepcopy(DEPLOYMENT)
    spec = deployment["spec"]["template"]["spec"]
    spec["containers"][0]["image"] = HUAWEIS
    spec["initContainers"] = [{"name": "init-log-setup", "image": HUAWEIS}]
    spec["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    return deployment


def images(deployment: dict[str, Any]) -> list[str]:
    spec = deployment["spec"]["template"]["spec"]
    return [c["image"] for c in [*spec["initContainers"], *spec["containers"]]]


def test_the_adapters_image_replaces_the_schedulers_and_the_old_one_comes_back() -> None:
    before = huaweis_deployment()
    ours = imaged(before, "volcano-scheduler", OURS)
    assert images(ours) == [OURS, OURS, "busybox:1.36"], "the scheduler's image, every use"
    assert images(before) == [HUAWEIS, HUAWEIS, "busybox:1.36"], "a copy"
    assert imaged(ours, "volcano-scheduler", OURS) == ours, "merged again: no change"
    # A newer build of ours replaces ours, and remove still goes back to Huawei's.
    newer = imaged(ours, "volcano-scheduler", OURS + "-1")
    assert images(newer) == [OURS + "-1", OURS + "-1", "busybox:1.36"]
    assert unimaged(newer) == before
    assert unimaged(before) == before, "never merged: nothing to put back"


def test_an_image_the_user_set_since_stays_on_remove() -> None:
    ours = imaged(huaweis_deployment(), "volcano-scheduler", OURS)
    ours["spec"]["template"]["spec"]["containers"][0]["image"] = "volcanosh/vc-scheduler:v1.13.0"
    back = unimaged(ours)
    assert images(back) == [HUAWEIS, "volcanosh/vc-scheduler:v1.13.0", "busybox:1.36"]
    assert "annotations" not in back["metadata"]
    # Merged over the user's own image, remove goes back to that one.
    again = unimaged(imaged(ours, "volcano-scheduler", OURS))
    assert images(again)[1] == "volcanosh/vc-scheduler:v1.13.0"


def test_an_unreadable_note_puts_nothing_back() -> None:
    ours = imaged(huaweis_deployment(), "volcano-scheduler", OURS)
    ours["metadata"]["annotations"]["ascend.npu/vc-scheduler-image"] = "{not json"
    assert images(unimaged(ours)) == [OURS, OURS, "busybox:1.36"]


@pytest.mark.parametrize(
    ("action", "name", "url_key"),
    [("merge", "extender", "extender.urlPrefix"), ("remove", "ascend-npu-adapter", "urlPrefix")],
)
def test_the_image_flag_goes_only_with_merging_the_adapters_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str, name: str, url_key: str
) -> None:
    plugin = tmp_path / "extender.yaml"
    plugin.write_text(f"name: {name}\narguments:\n  {url_key}: {URL}\n")
    argv = [action, f"--plugin-file={plugin}", f"--scheduler-image={OURS}"]
    assert main(argv) == 2, "refused before any call (no cluster here)"
    error = capsys.readouterr().err
    assert "--scheduler-image is for merging the ascend-npu-adapter entry" in error
    assert "Traceback" not in error
