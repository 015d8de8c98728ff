"""Settings from a file and the environment, under the flags, checked before starting."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.__main__ import build_parser
from infra import config
from scheduler_core.__main__ import build_parser as build_scheduler_parser

ROOT = Path(__file__).parents[2]


def agent_serve(argv: list[str], environ: dict[str, str]) -> object:
    parser = build_parser()
    tokens = config.arguments(parser.commands["serve"], argv, "ASCEND_AGENT_", environ)
    return parser.parse_args(["serve", *tokens])


def test_flags_beat_the_environment_which_beats_the_file_which_beats_defaults(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "agent.yaml"
    settings.write_text("list-watch-period: 10\nplugin-dir: /from/file\nvolcano-type: true\n")
    args = agent_serve(
        ["--config", str(settings), "--plugin-dir", "/from/flag"],
        {"ASCEND_AGENT_LIST_WATCH_PERIOD": "20"},
    )
    assert (args.period, args.plugin_dir, args.volcano_type) == (20, Path("/from/flag"), True)  # type: ignore[attr-defined]
    defaults = agent_serve([], {})
    assert (defaults.period, defaults.volcano_type) == (5, False)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("list-watch-period: 2\n", "list-watch-period: expected a whole number from 3 to 1800"),
        ("driver: magic\n", "driver: 'magic' is not one of fake, npu-smi"),
        ("no-such-flag: 1\n", "unknown key 'no-such-flag'"),
        ("- a list\n", "expected a mapping of settings"),
        ("plugin-dir: [a, b]\n", "plugin-dir: expected one value"),
        ("volcano-type: maybe\n", "volcano-type: expected true or false"),
    ],
)
def test_a_bad_setting_names_its_file_and_key(tmp_path: Path, text: str, error: str) -> None:
    settings = tmp_path / "agent.yaml"
    settings.write_text(text)
    with pytest.raises(config.ConfigError) as raised:
        agent_serve(["--config", str(settings)], {})
    assert str(raised.value).startswith(f"config {settings}")
    assert error in str(raised.value)


def test_a_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(config.ConfigError, match="environment ASCEND_AGENT_KUBE: kube"):
        agent_serve([], {"ASCEND_AGENT_KUBE": "sometimes"})


def test_the_shipped_example_files_load_with_every_key_valid() -> None:
    agent = agent_serve(["--config", str(ROOT / "config" / "agent.yaml")], {})
    assert (agent.kube, agent.volcano_type, agent.metrics_listen) == (  # type: ignore[attr-defined]
        "in-cluster",
        True,
        ("0.0.0.0", 9100),
    )
    parser = build_scheduler_parser()
    tokens = config.arguments(
        parser.commands["serve"],
        ["--config", str(ROOT / "config" / "scheduler.yaml")],
        "ASCEND_SCHEDULER_",
        {},
    )
    scheduler = parser.parse_args(["serve", *tokens])
    assert (scheduler.listen, scheduler.policy, scheduler.hold_limit) == (
        ("0.0.0.0", 8888),
        "huawei",
        600.0,
    )
    assert (scheduler.nslb_version, scheduler.shared_tor_num, scheduler.reserve_nodes) == (
        "1.0",
        2,
        2,
    )


def test_a_shared_tor_limit_other_than_1_or_2_is_refused_by_name() -> None:
    parser = build_scheduler_parser()
    with pytest.raises(config.ConfigError, match="shared-tor-num: '3' must be 1 or 2"):
        config.arguments(
            parser.commands["serve"],
            [],
            "ASCEND_SCHEDULER_",
            {"ASCEND_SCHEDULER_SHARED_TOR_NUM": "3"},
        )
