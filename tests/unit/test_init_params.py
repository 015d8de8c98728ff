"""Volcano's init-params read as Huawei's plugin reads them (scheduler_core.init_params), and
settled against our own flags at start (scheduler_core.__main__)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from scheduler_core import __main__ as cli
from scheduler_core.init_params import BadLocation, Location, from_arguments, from_configuration

# build/volcano-v1.12.0.yaml's init-params, as Huawei ships them (its lines joined here).
SHIPPED = (
    'actions: "enqueue, allocate, backfill"\n'
    "tiers:\n"
    "- plugins:\n"
    "  - name: gang\n"
    "configurations:\n"
    "  - name: init-params\n"
    '    arguments: {"grace-over-time":"900","presetVirtualDevice":"true","nslb-version":"1.0",'
    '"shared-tor-num":"2",\n'
    '"useClusterInfoManager":"true","self-maintain-available-card":"true","super-pod-size": "48",'
    ' "reserve-nodes": "2",\n'
    '"forceEnqueue": "true", "prefer-previous-node": "true"}\n'
)


def test_huaweis_shipped_configuration() -> None:
    params = from_configuration(SHIPPED)
    assert params.found and params.warnings == ()
    assert params.values == {
        "grace_over_time": 900.0,
        "nslb_version": "1.0",
        "shared_tor_num": 2,
        "super_pod_size": 48,
        "reserve_nodes": 2,
        "cluster_info_manager": True,
        "force_enqueue": True,
        "self_maintain": True,
        "prefer_previous_node": True,
        "presetVirtualDevice": "true",
    }


def test_no_init_params_gives_nothing() -> None:
    assert not from_configuration("actions: allocate\n").found
    assert not from_configuration("").found


@pytest.mark.parametrize(
    ("key", "value", "dest", "read"),
    [
        ("grace-over-time", "1", "grace_over_time", 900.0),
        ("grace-over-time", "3601", "grace_over_time", 900.0),
        ("grace-over-time", "soon", "grace_over_time", 900.0),
        ("nslb-version", "3.0", "nslb_version", "1.0"),
        ("shared-tor-num", "3", "shared_tor_num", 2),
        ("super-pod-size", "-4", "super_pod_size", 48),
        ("reserve-nodes", "0", "reserve_nodes", 2),
        ("reserve-nodes", "48", "reserve_nodes", 2),  # not below super-pod-size
    ],
)
def test_a_bad_value_is_a_warning_and_upstreams_default(
    key: str, value: str, dest: str, read: object
) -> None:
    params = from_arguments({key: value})
    assert params.values[dest] == read
    assert len(params.warnings) == 1 and key in params.warnings[0]


def test_switches_as_go_compares_them() -> None:
    params = from_arguments({"forceEnqueue": "True", "prefer-previous-node": "yes"})
    assert params.values == {"force_enqueue": False, "prefer_previous_node": False}
    assert from_configuration(
        "configurations:\n- name: init-params\n  arguments: {forceEnqueue: true}\n"
    ).values == {"force_enqueue": True}, "YAML's true is Volcano's string 'true'"
    assert (
        from_arguments({"reserve-nodes": "2", "super-pod-size": "2"}).values["reserve_nodes"] == 0
    )
    assert from_arguments({"grace-over-time": "2"}).values["grace_over_time"] == 2.0


@pytest.mark.parametrize("text", ["{", "- a\n- b\n", "configurations: 3\n"])
def test_an_unreadable_configuration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        from_configuration(text)


def test_location() -> None:
    assert Location.parse("volcano-system/volcano-scheduler-configmap") == Location(
        "volcano-system", "volcano-scheduler-configmap", "volcano-scheduler.conf"
    )
    assert Location.parse("v/c:my.conf").key == "my.conf"
    for bad in ("nameonly", "/x", "a/", "a/b/c", "a/b:"):
        with pytest.raises(BadLocation):
            Location.parse(bad)


def args_of(argv: list[str], environ: dict[str, str] | None = None) -> argparse.Namespace:
    parser = cli.build_parser()
    args = parser.parse_args(["serve", *argv])
    args.given = cli._given(parser.commands["serve"], argv, cli.ENV_PREFIX, environ or {})
    return args


def test_a_flag_or_its_variable_wins_init_params_win_over_the_file_and_defaults(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    params = from_configuration(SHIPPED.replace('"900"', '"60"'))
    args = args_of(["--grace-over-time", "30"], {"ASCEND_SCHEDULER_FORCE_ENQUEUE": "false"})
    args.force_enqueue = False  # as the environment's token would set it
    args.volcano_config = Location("volcano-system", "volcano-scheduler-configmap")
    cli._settle(args, params)
    assert args.grace_over_time == 30.0, "the flag wins"
    assert args.force_enqueue is False, "the environment wins"
    assert args.prefer_previous_node is True and args.cluster_info_manager is True
    line = next(r.message for r in caplog.records if "Volcano plugin settings" in r.message)
    assert "grace-over-time 30 (flag)" in line and "prefer-previous-node true (init-params)" in line
    assert "force-enqueue false (flag)" in line
    # The --config file's keys are not "given": the chart writes them all.
    config = tmp_path / "scheduler.yaml"
    config.write_text("grace-over-time: 120\n")
    parser = cli.build_parser()
    assert "grace_over_time" not in cli._given(
        parser.commands["serve"], ["--config", str(config)], cli.ENV_PREFIX, {}
    )


def test_without_init_params_clusterd_is_off_and_upstreams_defaults_stand() -> None:
    args = args_of([])
    cli._settle(args, from_configuration(""))
    assert args.cluster_info_manager is False and args.force_enqueue is True
    assert args.prefer_previous_node is False and args.grace_over_time == 900.0
    args = args_of(["--use-cluster-info-manager=false"])
    cli._settle(args, from_configuration(SHIPPED))
    assert args.cluster_info_manager is False, "the flag wins over init-params' true"
    args = args_of([])
    cli._settle(args, from_arguments({"grace-over-time": "600"}))
    assert args.cluster_info_manager is True, "upstream's default where init-params exist"
