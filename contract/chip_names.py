"""Chip names on the wire: the resource name and ``<Kind>-<id>``, one chip or a list.

Chips are physical IDs (ints). Each chip kind has its resource and its names: every 910 /
910B product names them ``Ascend910-<id>``, the inference chips ``Ascend310-<id>`` and
``Ascend310P-<id>``. Parsing is bounded: a known prefix, ids of at most four ASCII digits,
no chip twice, at most a server's chips, so no text a tenant writes can cost more than a
few hundred bytes of work or make an error message larger than that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RESOURCE_DOMAIN = "huawei.com/"
MAX_ID_DIGITS = 4
QUOTED = 60  # characters of a bad value quoted in an error


@dataclass(frozen=True, slots=True)
class ChipKind:
    """A chip type of the device plugin (``ascend-protocol.md`` §1.2): its device type, whose
    resource is ``huawei.com/<name>`` and whose chips are ``<name>-<id>``."""

    name: str
    max_chips: int  # the most chips one server names

    @property
    def resource(self) -> str:
        return RESOURCE_DOMAIN + self.name

    @property
    def prefix(self) -> str:
        return self.name + "-"

    @property
    def max_name(self) -> int:
        return len(self.prefix) + MAX_ID_DIGITS


ASCEND910 = ChipKind("Ascend910", 16)  # the largest server: module910bx16
ASCEND310 = ChipKind("Ascend310", 64)  # Volcano's 310 handlers: 64 chips per node
ASCEND310P = ChipKind("Ascend310P", 64)
# Ascend 950 / 850 / 350 ("A5"): Huawei's device plugin names them ``huawei.com/npu`` and
# ``npu-<NPU id>`` (MindCluster ``docs/*/api/k8s.md``, resource table).
NPU = ChipKind("npu", 16)
KINDS = {k.name: k for k in (ASCEND910, ASCEND310, ASCEND310P, NPU)}
KIND_OF_RESOURCE = {k.resource: k for k in KINDS.values()}

CHIP_PREFIX = ASCEND910.prefix
RESOURCE_NAME = ASCEND910.resource
MAX_CHIPS = ASCEND910.max_chips


class InvalidInput(ValueError):
    """A value that breaks the wire contract or the engine's rules; the message names what
    was wrong."""


def quoted(text: str) -> str:
    """``text`` for an error message, cut so a huge value cannot make a huge message."""
    return repr(text) if len(text) <= QUOTED else f"{text[:QUOTED]!r}… ({len(text)} characters)"


def chip_name(chip: int, kind: ChipKind = ASCEND910) -> str:
    return f"{kind.prefix}{chip}"


def parse_chip_name(name: str, kind: ChipKind = ASCEND910) -> int:
    """``Ascend910-5`` → 5. Anything else is an InvalidInput naming the text."""
    prefix = kind.prefix
    if not isinstance(name, str) or not name.startswith(prefix) or len(name) > kind.max_name:
        raise InvalidInput(
            f"chip name {quoted(str(name))} is not of the form {prefix}<id of at most "
            f"{MAX_ID_DIGITS} digits>"
        )
    digits = name[len(prefix) :]
    if not digits.isascii() or not digits.isdigit():
        raise InvalidInput(f"chip name {quoted(name)} does not end in a decimal chip id")
    return int(digits)


def parse_chip_list(
    text: str, limit: int | None = None, kind: ChipKind = ASCEND910
) -> tuple[int, ...]:
    """``Ascend910-4,Ascend910-5`` → (4, 5), in the written order; "" → (). InvalidInput when a
    name is malformed, a chip appears twice or there are more than ``limit`` (the kind's
    largest server when not given)."""
    if not text:
        return ()
    limit = kind.max_chips if limit is None else limit
    if len(text) > limit * (kind.max_name + 1):
        raise InvalidInput(f"chip list {quoted(text)} is longer than {limit} chips")
    names = text.split(",")
    if len(names) > limit:
        raise InvalidInput(f"chip list {quoted(text)} names {len(names)} chips (at most {limit})")
    chips = tuple(parse_chip_name(name.strip(), kind) for name in names)
    if len(set(chips)) != len(chips):
        raise InvalidInput(f"chip list {quoted(text)} names a chip twice")
    return chips


def format_chip_list(chips: Iterable[int], kind: ChipKind = ASCEND910) -> str:
    """The chips as written on a pod, in the given order."""
    return ",".join(chip_name(c, kind) for c in chips)
