"""Structured logs: one JSON object a line, with the record's extra fields (pod, node, chips)."""

from __future__ import annotations

import argparse
import json
import logging
from datetime import UTC, datetime
from pathlib import Path

from infra.cli import int_between

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


LEVELS = ("debug", "info", "warning", "error", "critical")
# Huawei's -logLevel: -1 debug, 0 info, 1 warning, 2 error, 3 critical.
HUAWEI_LEVELS = {"-1": "debug", "0": "info", "1": "warning", "2": "error", "3": "critical"}
LOG_FILE_BYTES = 20 * 1024 * 1024  # Huawei's device plugin rotates at 20 MB


def log_level(text: str) -> str:
    """A level name (any case) or Huawei's number, as an argparse type."""
    level = HUAWEI_LEVELS.get(text.strip(), text.strip().lower())
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of {', '.join(LEVELS)} (or Huawei's -1..3)"
        )
    return level


def configure(level: str, json_lines: bool, file: Path | None = None, backups: int = 30) -> None:
    """Logs to stderr, or to ``file`` rotated at 20 MB keeping ``backups`` old files."""
    handler: logging.Handler = logging.StreamHandler()
    if file is not None:
        from logging.handlers import RotatingFileHandler  # noqa: PLC0415 (only with a file)

        handler = RotatingFileHandler(file, maxBytes=LOG_FILE_BYTES, backupCount=backups)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def add_log_options(parser: argparse.ArgumentParser, *, huawei_spellings: bool = False) -> None:
    """The node daemons' log flags (the agent's and the DRA driver's): level, format, file
    and rotated files kept; with ``huawei_spellings``, also as Huawei's device plugin spells
    them (``-logLevel``, ``-logFile``, ``-maxBackups`` within its 1..30, main.go)."""

    def spelled(long: str, huawei: str) -> list[str]:
        return [long, huawei] if huawei_spellings else [long]

    parser.add_argument(
        *spelled("--log-level", "-logLevel"),
        type=log_level,
        default="info",
        help="debug, info, warning, error, critical (or Huawei's -1..3)",
    )
    parser.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="log line format"
    )
    parser.add_argument(
        *spelled("--log-file", "-logFile"),
        type=Path,
        help="log there, rotated at 20 MB (default: stderr)",
    )
    parser.add_argument(
        *spelled("--log-backups", "-maxBackups"),
        type=int_between(1, 30),
        default=30,
        help="rotated log files kept",
    )
