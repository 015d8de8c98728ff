"""Every flag of Huawei's current device plugin parses as Go's flag package reads it, with
upstream's ranges (Ascend/mind-cluster 22bb3d98 component/ascend-device-plugin/main.go l.61-103
and checkParam; component/ascend-common/common-utils/healthz/healthz.go RegisterFlags and
validateConfig)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from agent.__main__ import build_parser, go_spellings, main

# Every flag upstream's main.go and healthz.RegisterFlags register, with a value other than
# its default and the attribute it lands in here.
UPSTREAM_FLAGS: tuple[tuple[str, str, str, object], ...] = (
    ("fdFlag", "true", "fd_flag", True),
    ("volcanoType", "true", "volcano_type", True),
    ("edgeLogFile", "/tmp/edge.log", "edge_log_file", "/tmp/edge.log"),
    ("listWatchPeriod", "30", "period", 30),
    ("autoStowing", "false", "auto_stowing", False),
    ("logLevel", "-1", "log_level", "debug"),
    ("maxAge", "14", "log_max_age", 14),
    ("logFile", "/tmp/dp.log", "log_file", None),  # a Path, compared below
    ("maxBackups", "5", "log_backups", 5),
    ("presetVirtualDevice", "false", "preset_virtual_device", False),
    ("use310PMixedInsert", "true", "use_310p_mixed_insert", True),
    ("hotReset", "2", "hot_reset", 2),
    ("shareDevCount", "4", "share_dev_count", 4),
    ("linkdownTimeout", "10", "linkdown_timeout", 10),
    ("dealWatchHandler", "true", "deal_watch_handler", True),
    ("checkCachedPods", "false", "check_cached_pods", False),
    ("enableSlowNode", "true", "enable_slow_node", True),
    ("thirdPartyScanDelay", "60", "third_party_scan_delay", 60),
    ("deviceResetTimeout", "150", "device_reset_timeout", 150),
    ("softShareDevConfigDir", "/etc/soft", "soft_share_dev_config_dir", "/etc/soft"),
    ("useSingleDieMode", "true", "use_single_die_mode", True),
    ("getPodFromKubelet", "true", "get_pod_from_kubelet", True),
    ("enable-healthz", "true", "enable_healthz", True),
    ("healthz-address", "12000", "healthz_address", 12000),
    ("tls-cert-file", "/c.pem", "tls_cert_file", None),
    ("tls-private-key-file", "/k.pem", "tls_private_key_file", None),
)


Spelling = Callable[[str, str], list[str]]


def _parse(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    serve = parser.commands["serve"]
    options = {o for action in serve._actions for o in action.option_strings}
    return parser.parse_args(["serve", *go_spellings(argv, options)])


SPELLINGS: tuple[Spelling, ...] = (
    lambda flag, value: [f"-{flag}={value}"],
    lambda flag, value: [f"-{flag}", value],
    lambda flag, value: [f"--{flag}={value}"],
    lambda flag, value: [f"--{flag}", value],
)


@pytest.mark.parametrize("spelled", SPELLINGS)
@pytest.mark.parametrize(("flag", "value", "attribute", "expected"), UPSTREAM_FLAGS)
def test_every_upstream_flag_parses_in_gos_spellings(
    flag: str, value: str, attribute: str, expected: object, spelled: Spelling
) -> None:
    parsed = getattr(_parse(*spelled(flag, value)), attribute)
    assert (str(parsed) if expected is None else parsed) == (
        value if expected is None else expected
    )


@pytest.mark.parametrize(
    ("flag", "attribute"),
    [
        (f, a)
        for f, v, a, _ in UPSTREAM_FLAGS
        if v in ("true", "false") and f not in ("autoStowing", "presetVirtualDevice")
    ],
)
def test_a_bare_bool_flag_is_true(flag: str, attribute: str) -> None:
    assert getattr(_parse(f"-{flag}"), attribute) is True


def test_defaults_are_upstreams() -> None:
    parsed = _parse()
    assert parsed.hot_reset == -1
    assert parsed.third_party_scan_delay == 300
    assert parsed.device_reset_timeout == 600  # the code's default; the docs say 60
    assert (parsed.enable_healthz, parsed.healthz_address) == (False, 11251)
    assert parsed.check_cached_pods is True and parsed.get_pod_from_kubelet is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["-hotReset=1"],
            "error: --hot-reset/-hotReset: -hotReset=1 (online reset) was removed upstream "
            "(Ascend/mind-cluster commit 40bc27dd); use 0 (inference) or 2 (training, offline)\n",
        ),
        (
            ["-hotReset=3"],
            "error: --hot-reset/-hotReset: expected a whole number from -1 to 2, got '3'\n",
        ),
        (
            ["-deviceResetTimeout=9"],
            "error: --device-reset-timeout/-deviceResetTimeout: expected a whole number from "
            "10 to 600, got '9'\n",
        ),
        (
            ["-thirdPartyScanDelay=-1"],
            "error: --third-party-scan-delay/-thirdPartyScanDelay: expected a whole number of "
            "at least 0, got '-1'\n",
        ),
        (
            ["--healthz-address=80"],
            "error: --healthz-address: expected a whole number from 1025 to 65535, got '80'\n",
        ),
        (
            ["--healthz-address=:11251"],
            "error: --healthz-address: expected a whole number from 1025 to 65535, got ':11251'\n",
        ),
        (
            ["--shareDevCount=101"],
            "error: --share-dev-count/-shareDevCount: expected a whole number from 1 to 100, "
            "got '101'\n",
        ),
    ],
)
def test_an_out_of_range_value_exits_2_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == message


def test_healthz_tls_needs_both_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--enable-healthz", "--tls-cert-file=/c.pem", "--driver", "fake"]) == 2
    assert capsys.readouterr().err == (
        "error: --tls-cert-file and --tls-private-key-file must be both set or both empty\n"
    )


def test_go_spellings_rewrites_only_huaweis_names() -> None:
    options = {"-volcanoType", "--volcano-type", "--enable-healthz", "--plugin-dir"}
    assert go_spellings(
        ["--volcanoType=true", "-enable-healthz", "-plugin-dir", "x", "--volcano-type", "-1"],
        options,
    ) == ["-volcanoType=true", "--enable-healthz", "-plugin-dir", "x", "--volcano-type", "-1"]
