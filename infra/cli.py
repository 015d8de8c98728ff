"""What every command line of the project offers: its version, waiting for SIGTERM, and the
checks of its values (addresses, bounded numbers, switches, a listening socket that cannot be
bound), each refusing a bad value in one line that names the flag."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import ipaddress
import logging
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

log = logging.getLogger(__name__)

DISTRIBUTION = "ascend-npu-k8s"


def version() -> str:
    # Imported here: importlib.metadata costs half a MiB that a running agent never needs.
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"{parser.prog} {version()}")
        sys.exit(0)


def add_version(parser: argparse.ArgumentParser, *spellings: str) -> None:
    """``--version`` (and any other ``spellings``) print the version and exit."""
    parser.add_argument("--version", *spellings, action=_Version)


def settle() -> None:
    """Once a daemon has started: what the start-up left behind goes back to the system (the
    garbage of imports and parsing, and the heap's free top), and the long-lived objects are
    kept out of the collector's walks."""
    gc.collect()
    gc.freeze()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(None).malloc_trim(0)


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set (the kubelet's and a user's way to stop a daemon)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop


def wait_until(stop: threading.Event) -> None:
    """Block the main thread until ``stop`` is set, by a signal handler most often.

    With waits of a bounded length: a process-directed signal may land on another thread,
    and a main thread blocked in a wait without a timeout would then never run the handler.
    """
    while not stop.wait(0.5):
        pass


# --- Checks of command-line values, shared by every command (and the settings files). ---
# Each raises argparse.ArgumentTypeError, so argparse prints "argument --flag: <why>" and
# exits 2, and infra.config names the file's key or environment variable instead.


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` a server listens on: ``0.0.0.0:8888``, ``127.0.0.1:0`` (a free port),
    ``:8888`` (every IPv4 interface), ``[::1]:8888`` (IPv6 in brackets, as Go's
    net.SplitHostPort takes it). HOST is an IP address or a host name; PORT is 0–65535.
    Only the form is checked: whether the address can be bound is learnt by binding it
    (``exit_on_bind_error``)."""
    host, colon, port = text.rpartition(":")
    if not colon:
        raise _bad("HOST:PORT (e.g. 0.0.0.0:8888)", text)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not _is_ip(host, version=6):
            raise _bad("an IPv6 address in the brackets", text)
    elif ":" in host:
        raise _bad("HOST:PORT with an IPv6 HOST in brackets ([::1]:8888)", text)
    elif host and not (_is_ip(host, version=4) or _is_host_name(host)):
        raise _bad("HOST:PORT with HOST an IP address or host name", text)
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        raise _bad("HOST:PORT with PORT from 0 to 65535", text)
    return host or "0.0.0.0", int(port)


def name_list(text: str) -> frozenset[str]:
    """A comma-separated list of names (certificate CNs, scheduler names): each non-empty and
    without spaces; "*" is refused (there is no "any": name each one)."""
    names = [n.strip() for n in text.split(",")] if text.strip() else []
    if any(not n or n == "*" or any(c.isspace() for c in n) for n in names):
        raise _bad("comma-separated names (no '*', no spaces, none empty)", text)
    return frozenset(names)


def listen_address_or_off(text: str) -> tuple[str, int] | None:
    """``listen_address``, or None for an empty value (that server is not started)."""
    return listen_address(text) if text else None


def _bad(expected: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens.
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _is_host_name(text: str) -> bool:
    labels = text.removesuffix(".").split(".")
    # An all-digit last label is a mistyped IPv4 address (1.2.3.999), not a name (RFC 1123 2.1).
    return all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=`` for a whole number of at least ``minimum``."""
    return int_between(minimum, None)


def int_between(minimum: int, maximum: int | None) -> Callable[[str], int]:
    """An argparse ``type=`` for a whole number in [minimum, maximum] (no upper bound when
    ``maximum`` is None)."""
    bounds = f"of at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _bad(f"a whole number {bounds}", text) from None
        if value < minimum or (maximum is not None and value > maximum):
            raise _bad(f"a whole number {bounds}", text)
        return value

    return whole_number


def float_at_least(minimum: float) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number of at least ``minimum``."""
    return _bounded_float(lambda value: value >= minimum, f"of at least {minimum:g}")


def float_above(minimum: float) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number greater than ``minimum`` (a period of 0
    would make a loop spin)."""
    return _bounded_float(lambda value: value > minimum, f"greater than {minimum:g}")


def float_between(minimum: float, maximum: float) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number in [minimum, maximum] (a share, say)."""
    return _bounded_float(
        lambda value: minimum <= value <= maximum, f"from {minimum:g} to {maximum:g}"
    )


def _bounded_float(within: Callable[[float], bool], bounds: str) -> Callable[[str], float]:
    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _bad(f"a number {bounds}", text) from None
        # float() takes "nan" and "inf": neither is a time or a size.
        if not math.isfinite(value) or not within(value):
            raise _bad(f"a number {bounds}", text)
        return value

    return number


# A unix socket's path must fit sun_path of struct sockaddr_un: 108 bytes on Linux, the last
# one the terminating NUL (unix(7)); gRPC refuses a longer one when it binds, far from the flag.
UNIX_PATH_MAX = 107


def unix_socket_path(text: str) -> Path:
    """An argparse ``type=`` for the path of a unix socket (served or dialled): at most
    ``UNIX_PATH_MAX`` bytes."""
    return socket_directory("")(text)


def socket_directory(longest_name: str) -> Callable[[str], Path]:
    """An argparse ``type=`` for a directory sockets are made in, the longest of them named
    ``longest_name``: the socket's path must still fit ``UNIX_PATH_MAX`` bytes."""

    def directory(text: str) -> Path:
        if not text:
            raise _bad("a path", text)
        path = Path(text)
        size = len(os.fsencode(path / longest_name if longest_name else path))
        if size > UNIX_PATH_MAX:
            socket = f"its socket {longest_name} would have" if longest_name else "it has"
            raise _bad(f"a socket path of at most {UNIX_PATH_MAX} bytes ({socket} {size})", text)
        return path

    return directory


TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def flag_bool(text: str) -> bool:
    """A switch's value: true/false (1/0, yes/no, on/off), in any case."""
    lowered = text.lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise _bad("true or false", text)


def bool_flag(default: bool | None) -> dict[str, Any]:
    """``add_argument`` keywords of a switch given bare (``--leader-elect``), with ``=`` or
    with a value (``--leader-elect=false``, ``--leader-elect false``), as Go's pflag takes
    a bool flag (kube-scheduler's ``--leader-elect`` among them)."""
    return {
        "type": flag_bool,
        "nargs": "?",
        "const": True,
        "default": default,
        "metavar": "true|false",
    }


def bind_error_message(flag: str, address: tuple[str, int], failed: OSError) -> str:
    """``error: --listen 127.0.0.1:8888: address already in use``: one line naming the flag."""
    host, port = address
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = failed.strerror or str(failed)
    return f"error: {flag} {shown}: {reason[:1].lower()}{reason[1:]}"


@contextlib.contextmanager
def exit_on_bind_error(flags: Mapping[str, tuple[str, int] | None]) -> Iterator[None]:
    """Start the servers listening on ``flags``' addresses (flag → HOST, PORT, None when
    off) inside; an OSError binding one of them prints ``bind_error_message`` naming its flag
    and raises SystemExit(2). The failure is a ``ListenError`` (``infra.http.HttpServer``
    raises one), whose address names the flag; any other error passes through."""
    try:
        yield
    except ListenError as failed:
        named = [flag for flag, at in flags.items() if at == failed.address]
        if not named:
            raise
        print(bind_error_message(named[0], failed.address, failed), file=sys.stderr)
        raise SystemExit(2) from None


class ListenError(OSError):
    """Binding a listening socket failed; ``address`` is the HOST, PORT asked for."""

    def __init__(self, address: tuple[str, int], failed: OSError) -> None:
        super().__init__(failed.errno, failed.strerror or str(failed))
        self.address = address
