"""Configuration from a YAML file and the environment, under the command-line flags.

Keys are a command's long flag names without the dashes (``list-watch-period: 5``);
environment variables are ``<PREFIX><KEY>`` in upper case with underscores
(``ASCEND_AGENT_LIST_WATCH_PERIOD=5``). Precedence: flag > environment > file > default.
Every value is checked by its flag's own type before the command starts, and an error names
where the value came from.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names its source and key."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (an empty or unset one left out, a switch's
    written as it is typed), and descriptions and epilogs as written (the ``place``
    command's example request)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in text
            or default is None
            or default is argparse.SUPPRESS
            or (isinstance(default, (str, frozenset, tuple)) and not default)
        ):
            return text
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser that keeps the options and subcommands it is given, so the
    configuration layer reads them without argparse's private attributes; its help shows
    the defaults, and a bad command line is refused in one line naming the flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: dict[str, argparse.Action] = {}  # long name without dashes → action
        self.commands: dict[str, CommandParser] = {}
        self._subparsers: Any = None  # argparse's subparsers action, made at the first command
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # argparse prints its usage (a screenful for serve) before the error: one line as
        # every other refusal of these commands, "error: --listen: expected HOST:PORT, ...".
        self.exit(2, f"error: {message.removeprefix('argument ')}\n")

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in ("help", "config"):
            self.options[longs[0][2:]] = action
        return action

    def add_command(self, name: str, *, required: bool = False, **kwargs: Any) -> CommandParser:
        """A subcommand (``serve``); ``args.command`` names the one given."""
        if self._subparsers is None:
            self._subparsers = self.add_subparsers(
                dest="command", required=required, parser_class=CommandParser
            )
        command: CommandParser = self._subparsers.add_parser(name, **kwargs)
        self.commands[name] = command
        return command


def _tokens(action: argparse.Action, key: str, value: Any, source: str) -> list[str]:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{source}: {key}: expected one value, got {value!r}")
    try:
        if callable(action.type):
            action.type(text)
        if action.choices is not None and text not in action.choices:
            raise ValueError(f"{text!r} is not one of {', '.join(map(str, action.choices))}")
    except (ValueError, TypeError, argparse.ArgumentTypeError) as bad:
        raise ConfigError(f"{source}: {key}: {bad}") from None
    return [action.option_strings[0], text]


def read_file(path: Path) -> Mapping[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as failed:
        raise ConfigError(f"config {path}: {failed.strerror}") from None
    except yaml.YAMLError as bad:
        raise ConfigError(f"config {path}: not YAML ({bad})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path}: expected a mapping of settings")
    return raw


def arguments(
    parser: CommandParser,
    argv: Sequence[str],
    env_prefix: str,
    environ: Mapping[str, str] = os.environ,
) -> list[str]:
    """``argv`` with the file's and the environment's settings in front (so flags win)."""
    options = parser.options
    config_parser = argparse.ArgumentParser(add_help=False)
    config_parser.add_argument("--config", type=Path)
    known, _ = config_parser.parse_known_args(argv)
    tokens: list[str] = []
    if known.config is not None:
        for key, value in read_file(known.config).items():
            if key not in options:
                known_keys = ", ".join(sorted(options))
                raise ConfigError(
                    f"config {known.config}: unknown key {key!r} (known: {known_keys})"
                )
            tokens += _tokens(options[key], key, value, f"config {known.config}")
    for key, action in sorted(options.items()):
        name = env_prefix + key.upper().replace("-", "_")
        if name in environ:
            tokens += _tokens(action, key, environ[name], f"environment {name}")
    rest = list(argv)
    if "--config" in rest:
        index = rest.index("--config")
        del rest[index : index + 2]
    rest = [a for a in rest if not a.startswith("--config=")]
    return tokens + rest
