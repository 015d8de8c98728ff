"""Chip names on the wire: the resource name and ``Ascend910-<id>``, both ways.

Chips are physical IDs (ints). Every 910 / 910B product names them ``Ascend910-<id>`` in
annotations and ConfigMaps.
"""

from __future__ import annotations

CHIP_PREFIX = "Ascend910-"
RESOURCE_NAME = "huawei.com/Ascend910"


class InvalidInput(ValueError):
    """A value handed to the engine is malformed; the message names what was wrong."""


def chip_name(chip: int) -> str:
    return f"{CHIP_PREFIX}{chip}"


def parse_chip_name(name: str) -> int:
    """``Ascend910-5`` → 5. Anything else is an InvalidInput naming the text."""
    if not isinstance(name, str) or not name.startswith(CHIP_PREFIX):
        raise InvalidInput(f"chip name {name!r} is not of the form {CHIP_PREFIX}<id>")
    digits = name[len(CHIP_PREFIX) :]
    if not digits.isdigit() or not digits.isascii():
        raise InvalidInput(f"chip name {name!r} does not end in a decimal chip id")
    return int(digits)
