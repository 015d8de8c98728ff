"""What every command line of the project offers: its version."""

from __future__ import annotations

import argparse
from importlib import metadata

DISTRIBUTION = "ascend-npu-k8s"


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def add_version(parser: argparse.ArgumentParser, *spellings: str) -> None:
    """``--version`` (and any other ``spellings``) print the version and exit."""
    parser.add_argument("--version", *spellings, action="version", version=f"%(prog)s {version()}")
