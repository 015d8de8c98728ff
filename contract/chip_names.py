"""Chip names on the wire: the resource name and ``Ascend910-<id>``, one chip or a list.

Chips are physical IDs (ints). Every 910 / 910B product names them ``Ascend910-<id>`` in
annotations and ConfigMaps. Parsing is bounded: a known prefix, ids of at most four ASCII
digits, no chip twice, at most a server's chips, so no text a tenant writes can cost more
than a few hundred bytes of work or make an error message larger than that.
"""

from __future__ import annotations

from collections.abc import Iterable

CHIP_PREFIX = "Ascend910-"
RESOURCE_NAME = "huawei.com/Ascend910"
MAX_ID_DIGITS = 4
MAX_CHIPS = 16  # the largest server (module910bx16)
_MAX_NAME = len(CHIP_PREFIX) + MAX_ID_DIGITS
QUOTED = 60  # characters of a bad value quoted in an error


class InvalidInput(ValueError):
    """A value that breaks the wire contract or the engine's rules; the message names what
    was wrong."""


def quoted(text: str) -> str:
    """``text`` for an error message, cut so a huge value cannot make a huge message."""
    return repr(text) if len(text) <= QUOTED else f"{text[:QUOTED]!r}… ({len(text)} characters)"


def chip_name(chip: int) -> str:
    return f"{CHIP_PREFIX}{chip}"


def parse_chip_name(name: str) -> int:
    """``Ascend910-5`` → 5. Anything else is an InvalidInput naming the text."""
    if not isinstance(name, str) or not name.startswith(CHIP_PREFIX) or len(name) > _MAX_NAME:
        raise InvalidInput(
            f"chip name {quoted(str(name))} is not of the form {CHIP_PREFIX}<id of at most "
            f"{MAX_ID_DIGITS} digits>"
        )
    digits = name[len(CHIP_PREFIX) :]
    if not digits.isascii() or not digits.isdigit():
        raise InvalidInput(f"chip name {quoted(name)} does not end in a decimal chip id")
    return int(digits)


def parse_chip_list(text: str, limit: int = MAX_CHIPS) -> tuple[int, ...]:
    """``Ascend910-4,Ascend910-5`` → (4, 5), in the written order; "" → (). InvalidInput when a
    name is malformed, a chip appears twice or there are more than ``limit``."""
    if not text:
        return ()
    if len(text) > limit * (_MAX_NAME + 1):
        raise InvalidInput(f"chip list {quoted(text)} is longer than {limit} chips")
    names = text.split(",")
    if len(names) > limit:
        raise InvalidInput(f"chip list {quoted(text)} names {len(names)} chips (at most {limit})")
    chips = tuple(parse_chip_name(name.strip()) for name in names)
    if len(set(chips)) != len(chips):
        raise InvalidInput(f"chip list {quoted(text)} names a chip twice")
    return chips


def format_chip_list(chips: Iterable[int]) -> str:
    """The chips as written on a pod, in the given order."""
    return ",".join(chip_name(c) for c in chips)
