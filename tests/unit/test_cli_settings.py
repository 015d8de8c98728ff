"""Every command-line setting checked before a command starts (issue 35): addresses, ranges,
switches, the settings file, the ``place`` input's keys, and ``--help`` showing defaults."""

from __future__ import annotations

import argparse
import io
import json
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.__main__ import build_parser as build_agent_parser
from infra.cli import (
    ListenError,
    bool_flag,
    exit_on_bind_error,
    float_above,
    float_at_least,
    int_at_least,
    int_between,
    listen_address,
    listen_address_or_off,
    unix_socket_path,
)
from infra.config import CommandParser
from infra.http import HttpServer, Response
from scheduler_core.__main__ import PLACE_HELP
from scheduler_core.__main__ import build_parser as build_scheduler_parser
from scheduler_core.__main__ import main as scheduler_main


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("0.0.0.0:8888", ("0.0.0.0", 8888)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        (":9395", ("0.0.0.0", 9395)),
        ("[::1]:8888", ("::1", 8888)),
        ("scheduler.kube-system.svc:443", ("scheduler.kube-system.svc", 443)),
    ],
)
def test_an_address_is_host_and_port(text: str, address: tuple[str, int]) -> None:
    assert listen_address(text) == address


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("nonsense", "expected HOST:PORT (e.g. 0.0.0.0:8888), got 'nonsense'"),
        ("8888", "expected HOST:PORT (e.g. 0.0.0.0:8888), got '8888'"),
        ("127.0.0.1:", "PORT from 0 to 65535"),
        ("127.0.0.1:65536", "PORT from 0 to 65535"),
        ("127.0.0.1:-1", "PORT from 0 to 65535"),
        ("127.0.0.1:http", "PORT from 0 to 65535"),
        ("::1:8888", "IPv6 HOST in brackets"),
        ("[nonsense]:8888", "an IPv6 address in the brackets"),
        ("1.2.3.999:8888", "HOST an IP address or host name"),
        ("bad_host:8888", "HOST an IP address or host name"),
    ],
)
def test_a_malformed_address_is_refused_saying_what_was_expected(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(why)):
        listen_address(text)


def test_an_empty_address_turns_an_optional_server_off() -> None:
    assert listen_address_or_off("") is None
    assert listen_address_or_off("127.0.0.1:9") == ("127.0.0.1", 9)


@pytest.mark.parametrize(
    ("check", "text", "why"),
    [
        (int_at_least(0), "-3", "expected a whole number of at least 0, got '-3'"),
        (int_at_least(1), "2.5", "expected a whole number of at least 1, got '2.5'"),
        (int_between(3, 1800), "1801", "expected a whole number from 3 to 1800, got '1801'"),
        (float_at_least(0), "-1", "expected a number of at least 0, got '-1'"),
        (float_at_least(1), "nan", "expected a number of at least 1, got 'nan'"),
        (float_at_least(1), "inf", "expected a number of at least 1, got 'inf'"),
        (float_above(0), "0", "expected a number greater than 0, got '0'"),
        (float_above(0), "soon", "expected a number greater than 0, got 'soon'"),
        (unix_socket_path, "/" + "s" * 107, "at most 107 bytes (it has 108)"),
    ],
)
def test_a_number_out_of_its_range_is_refused(check: Any, text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        check(text)
    assert why in str(raised.value)


def test_a_switch_is_taken_bare_with_a_value_or_not_at_all() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leader-elect", **bool_flag(False))
    parser.add_argument("--other")
    assert parser.parse_args([]).leader_elect is False
    assert parser.parse_args(["--leader-elect"]).leader_elect is True
    assert parser.parse_args(["--leader-elect", "--other", "x"]).leader_elect is True
    assert parser.parse_args(["--leader-elect=true"]).leader_elect is True
    assert parser.parse_args(["--leader-elect=false"]).leader_elect is False
    assert parser.parse_args(["--leader-elect", "false"]).leader_elect is False


def serve_args(argv: list[str]) -> argparse.Namespace:
    return build_scheduler_parser().parse_args(["serve", *argv])


def test_the_scheduler_takes_leader_elect_as_kube_scheduler_does() -> None:
    assert serve_args(["--leader-elect"]).leader_elect is True
    assert serve_args(["--leader-elect=false"]).leader_elect is False
    assert serve_args(["--leader-elect=true"]).leader_elect is True
    assert serve_args(["--self-maintain-available-card"]).self_maintain is True


# (command, arguments before the value, flag, a value out of range)
BAD_VALUES = [
    ("scheduler", ["serve"], "--listen", "nonsense"),
    ("scheduler", ["serve"], "--metrics-listen", "127.0.0.1:99999"),
    ("scheduler", ["serve"], "--refresh-period", "-1"),
    ("scheduler", ["serve"], "--refresh-period", "0"),
    ("scheduler", ["serve"], "--gang-ttl", "-5"),
    ("scheduler", ["serve"], "--hold-limit", "-1"),
    ("scheduler", ["serve"], "--hold-share-per-namespace", "1.5"),
    ("scheduler", ["serve"], "--hold-share-per-namespace", "-0.1"),
    ("scheduler", ["serve"], "--reserve-nodes", "-3"),
    ("scheduler", ["serve"], "--super-pod-size", "0"),
    ("scheduler", ["serve"], "--grace-over-time", "-1"),
    ("scheduler", ["serve"], "--leader-elect-lease-duration", "nan"),
    ("scheduler", ["serve"], "--leader-elect-renew-deadline", "0.5"),
    ("scheduler", ["serve"], "--leader-elect-retry-period", "-2"),
    ("scheduler", ["serve"], "--leader-elect", "maybe"),
    ("agent", ["serve"], "--metrics-listen", "nonsense"),
    ("agent", ["serve"], "--list-watch-period", "2"),
    ("agent", ["serve"], "--deviceinfo-heartbeat", "300"),
    ("agent", ["serve"], "--hot-reset", "3"),
    ("agent", ["serve"], "--log-backups", "0"),
    ("agent", ["serve"], "-maxAge", "3"),
    ("agent", ["serve"], "-shareDevCount", "101"),
    ("agent", ["serve"], "-linkdownTimeout", "0"),
    ("agent", ["serve"], "--plugin-dir", "/" + "d" * 80),
    ("agent", ["serve"], "--pod-resources-socket", "/" + "s" * 120),
    ("agent", ["deviceinfo", "--node", "n"], "--update-time", "-1"),
]


@pytest.mark.parametrize(("command", "before", "flag", "value"), BAD_VALUES)
def test_every_value_out_of_range_exits_2_with_one_line_naming_the_flag(
    command: str, before: list[str], flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_scheduler_parser() if command == "scheduler" else build_agent_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([*before, f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert flag in err and repr(value) in err


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("refresh-period", "-1", "expected a number greater than 0, got '-1'"),
        ("gang-ttl", "-5", "expected a number greater than 0, got '-5'"),
        ("hold-limit", "-1", "expected a number of at least 0, got '-1'"),
        ("hold-share-per-namespace", "2", "expected a number from 0 to 1, got '2'"),
        ("reserve-nodes", "-3", "expected a whole number of at least 1, got '-3'"),
        ("listen", "nonsense", "expected HOST:PORT (e.g. 0.0.0.0:8888), got 'nonsense'"),
        ("leader-elect", "maybe", "expected true or false, got 'maybe'"),
    ],
)
def test_a_value_out_of_range_in_the_settings_file_is_refused_naming_the_key(
    tmp_path: Path, key: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "scheduler.yaml"
    settings.write_text(f"{key}: {value}\n")
    assert scheduler_main(["serve", "--config", str(settings)]) == 2
    assert capsys.readouterr().err == f"error: config {settings}: {key}: {why}\n"


def test_both_servers_on_one_address_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = scheduler_main(
        ["serve", "--listen", "127.0.0.1:8888", "--metrics-listen", "127.0.0.1:8888"]
    )
    assert code == 2
    assert capsys.readouterr().err == (
        "error: --metrics-listen 127.0.0.1:8888 is --listen's address too\n"
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_port_in_use_is_a_listen_error_naming_the_address(taken_port: int) -> None:
    server = HttpServer("taken", lambda path: Response.text(200, "ok\n"))
    with pytest.raises(ListenError) as raised:
        server.start("127.0.0.1", taken_port)
    assert raised.value.address == ("127.0.0.1", taken_port)
    assert raised.value.strerror == "Address already in use"


def test_a_bind_error_exits_2_with_one_line_naming_the_flag(
    taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = {"--listen": ("127.0.0.1", 0), "--metrics-listen": ("127.0.0.1", taken_port)}
    with pytest.raises(SystemExit) as exited, exit_on_bind_error(flags):
        HttpServer("listen", lambda path: Response.text(200, "ok\n")).start("127.0.0.1", 0)
        HttpServer("metrics", lambda path: Response.text(200, "ok\n")).start(
            "127.0.0.1", taken_port
        )
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"error: --metrics-listen 127.0.0.1:{taken_port}: address already in use\n"
    )


def test_a_server_listens_on_an_ipv6_address() -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    server = HttpServer("v6", lambda path: Response.text(200, "ok\n"))
    url = server.start(*listen_address("[::1]:0"))
    try:
        assert url.startswith("http://[::1]:")
    finally:
        server.stop()


def place(request: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    code = scheduler_main(["place"])
    out, err = capsys.readouterr()
    return code, out, err


def example_request() -> Any:
    """The request ``place --help`` shows."""
    text = PLACE_HELP.split("one request:\n", 1)[1].split("\n  keys", 1)[0]
    return json.loads(text)


def test_the_help_example_is_a_request_place_answers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = place(example_request(), monkeypatch, capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["placements"][0]["chips"] == ["Ascend910-4", "Ascend910-5"]


@pytest.mark.parametrize(
    ("where", "key", "error"),
    [
        (
            "node",
            "unhealty",
            "nodes[0]: unknown key 'unhealty' (allowed: name, product, allocatable, free, "
            "unhealthy, network_unhealthy, card_sub_healthy, switch_sub_healthy)",
        ),
        (
            "job",
            "priority",
            "job: unknown key 'priority' (allowed: name, product, resource, selector, tasks, "
            "namespace, labels, annotations)",
        ),
        ("task", "npus", "job.tasks[0]: unknown key 'npus' (allowed: name, npu)"),
        ("request", "node", "request: unknown key 'node' (allowed: nodes, job)"),
    ],
)
def test_an_unknown_key_is_refused_naming_it_and_the_keys_allowed(
    where: str,
    key: str,
    error: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    request = example_request()
    target = {
        "request": request,
        "node": request["nodes"][0],
        "job": request["job"],
        "task": request["job"]["tasks"][0],
    }[where]
    target[key] = ["Ascend910-4"]
    assert place(request, monkeypatch, capsys) == (2, "", f"error: {error}\n")


def test_nothing_fits_prints_the_answer_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    request = example_request()
    request["job"]["tasks"][0]["npu"] = 8
    code, out, err = place(request, monkeypatch, capsys)
    assert (code, err) == (1, "")
    assert json.loads(out)["feasible"] is False


def test_place_help_shows_the_input_format_and_the_exit_codes() -> None:
    text = build_scheduler_parser().commands["place"].format_help()
    assert '"nodes": [{"name": "n1", "product": "module910x8"' in text
    assert "exit codes:" in text
    assert "  1  nothing fits: the decision is printed with the reason" in text


def shown_defaults(parser: CommandParser) -> Iterator[tuple[str, str, argparse.Action]]:
    """(subcommand, its help, an option of it whose default the help should show)."""
    for name, command in parser.commands.items():
        text = " ".join(command.format_help().split())
        for action in command.options.values():
            default = action.default
            if (
                action.option_strings
                and action.help not in (None, argparse.SUPPRESS)
                and default not in (None, "", argparse.SUPPRESS, frozenset())
            ):
                yield name, text, action


def test_every_subcommand_help_shows_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: a default is found in one piece
    checked = 0
    for parser in (build_scheduler_parser(), build_agent_parser()):
        for command, text, action in shown_defaults(parser):
            default = action.default
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            said = f"(default: {shown})" in text or "default" in (action.help or "")
            assert said, f"{command} {action.option_strings[0]}: no default in its help"
            checked += 1
    assert checked >= 40  # the options of every subcommand of both commands
    scheduler_serve = build_scheduler_parser().commands["serve"].format_help()
    assert "(default: false)" in " ".join(scheduler_serve.split())  # --leader-elect
