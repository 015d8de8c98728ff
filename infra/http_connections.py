"""The connections of ``infra.http``'s servers: accepted, TLS-wrapped, read and written on one
asyncio event loop per server, so that a connection costs a socket and a few hundred bytes
while it is idle, handshaking or trickling, and a thread only while its handler runs.

A request is read without blocking (its head at most ``max_head`` bytes, its body within the
deadlines) and only then handed, whole, to a bounded pool of threads that runs the
synchronous handler (handlers block: API calls); the pool's answer comes back to the loop to
be written. Deadlines (``Limits``): a new connection has ``head_timeout`` seconds to finish
its TLS handshake and send its first request's head; a connection that completed a request
may then wait ``keep_alive`` seconds for its next one, whose head again has ``head_timeout``
from its first byte; a body or an answer may stall ``timeout`` seconds.

Capacity: at most ``max_connections`` connections, ``max_per_client`` from one address. A
newcomer beyond either is not refused: the connection that matters least is closed instead
(``_Ranks``), first those already closing, then those that never completed a request (oldest
first), then idle ones whose requests were unauthenticated, then idle authenticated ones
(least recently used first), never one whose request is being handled. Within a rank, one
whose caller's bytes already wait unread is passed over for a quiet one: the loop accepts
callers in batches (up to ``BACKLOG`` at once) and reads none of them before all are admitted,
so a probe that arrived with a flood's sockets would otherwise go before it was read. A flood
of idle sockets therefore only ever evicts itself: kube-scheduler's kept-alive connection and
a kubelet's probe, which sends its request as soon as it connects, keep being answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import fcntl
import http
import ipaddress
import itertools
import json
import logging
import math
import queue
import resource
import socket
import ssl
import struct
import termios
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a caller can make a server hold, and for how long."""

    # A POST's body; a larger one is refused with 413 before it is read. kube-scheduler's
    # largest (a pod and every node's name, 10,000 of them) is well under.
    max_body: int = 8 * 1024 * 1024
    # Seconds a body being received, or an answer being delivered, may stall with no byte
    # moving: a slow link still delivers Volcano's session, a stalled peer is let go.
    timeout: float = 30.0
    # Seconds from connecting (the TLS handshake included) to a complete first request head,
    # and from the first byte of a later request to its complete head. Real clients send a
    # head at once (Go gives its own TLS handshake 10 s); a slow loris is cut here.
    head_timeout: float = 10.0
    # Seconds a connection that completed a request may wait for its next one: longer than
    # the 90 s IdleConnTimeout of Go's transport (kube-scheduler's, Volcano's), so the client
    # retires an idle connection first and never writes a POST onto one being closed.
    keep_alive: float = 120.0
    # Bytes of a request line and headers: Go sends ~300 with a token; 431 beyond.
    max_head: int = 64 * 1024
    # Connections held at once. Idle ones cost no thread, so this counts file descriptors:
    # also at most a quarter of RLIMIT_NOFILE (a process runs two or three servers besides
    # its own API connections). Beyond, the least useful connection is closed.
    max_connections: int = 4096
    # Of them from one client address (an IPv6 one by its /64): a host that floods evicts
    # its own connections before anyone else's.
    max_per_client: int = 1024
    # Threads running handlers at once; complete requests beyond wait their turn (at most
    # one per connection). kube-scheduler calls a pod's verbs in turn and binds concurrently.
    workers: int = 32
    # Paths whose body is read and dropped as it arrives, never kept (their caller posts
    # large bodies nobody reads: Volcano's whole session at onSessionOpen), up to this size.
    drained: frozenset[str] = frozenset()
    max_drained: int = 4 * 1024 * 1024 * 1024
    # Paths whose body is read whole up to this larger size, their caller admitted first (the
    # guard decides on the head): Volcano's prioritize carries every node's NodeInfo, ~3 KiB
    # each for a bare Node, so ~16 MiB at 5,000 nodes (measured: 413 past ~2,600 nodes).
    large: frozenset[str] = frozenset()
    max_large: int = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Head:
    """A request's line and headers, as parsed."""

    method: str  # GET or POST (others are answered 405 before a Head reaches anyone)
    target: str  # as sent (a leading "//" made "/", as http.server does)
    headers: dict[str, str]  # names in lower case; a repeated header keeps its last value
    keep_alive: bool  # HTTP/1.1 without "Connection: close"
    certificate: dict[str, Any] | None  # the verified TLS client certificate, if one was shown


# Decides a head on the loop thread, before its body is read: the encoded refusal (the
# connection then closes) or None, and whether the caller authenticated (its connection is
# then the last to be evicted). It must not block: it reads headers and a certificate.
Admit = Callable[[Head], tuple[bytes | None, bool]]
# Answers a complete request on a pool thread: the encoded answer, and whether to close.
Answer = Callable[[Head, bytes], tuple[bytes, bool]]

BACKLOG = 1024  # accepted by the kernel before the loop takes them (callers arrive together)
SSL_SHUTDOWN = 5.0  # seconds a closing TLS connection may wait for the peer's close_notify
MAX_HEADERS = 100  # header lines in a head (http.client's own limit)
WARN_EVERY = 60.0  # seconds between two warnings that connections are being evicted

# Eviction ranks, least useful first; BUSY connections (a request being handled) are in none.
CLOSING, FRESH, IDLE, TRUSTED = range(4)
BUSY = -1
# Connections of a rank, oldest first, checked for unread bytes before its oldest goes anyway:
# one ioctl each, and a flood's own sockets (quiet, or read already) come first.
LOOK = 16
# Phases of a connection.
HANDSHAKE, HEAD, BODY, HANDLING, ENDING, GONE = range(6)

_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}


class _Ranks:
    """Connections by how little they matter: the four ranks, each oldest first."""

    __slots__ = ("count", "ranks")

    def __init__(self) -> None:
        self.count = 0
        self.ranks: tuple[OrderedDict[_Connection, None], ...] = tuple(
            OrderedDict() for _ in range(4)
        )

    def least(self) -> _Connection | None:
        for number, rank in enumerate(self.ranks):
            if not rank:
                continue
            if number != CLOSING:
                for connection in itertools.islice(rank, LOOK):
                    if not connection.waiting():
                        return connection
            return next(iter(rank))
        return None


class _Table:
    """Every open connection of a server, overall and by client, ranked for eviction."""

    def __init__(self, cap: int, per_client: int) -> None:
        self.cap = cap
        self.per_client = per_client
        self.all = _Ranks()
        self.clients: dict[str, _Ranks] = {}
        self.open: set[_Connection] = set()  # the ranked and the busy
        self.evicted = 0

    def admit(self, connection: _Connection) -> bool:
        """Room for a new connection, evicting the least useful if need be; False when every
        connection in the way is being handled (the newcomer is then closed)."""
        own = self.clients.setdefault(connection.client, _Ranks())
        if (own.count >= self.per_client and not self._evict(own)) or (
            self.all.count >= self.cap and not self._evict(self.all)
        ):
            if own.count == 0:
                del self.clients[connection.client]
            return False
        connection.own = own
        self.open.add(connection)
        own.count += 1
        self.all.count += 1
        self.rank(connection, FRESH)
        return True

    def _evict(self, ranks: _Ranks) -> bool:
        victim = ranks.least()
        if victim is None:
            return False
        self.evicted += 1
        victim.abort()
        return True

    def rank(self, connection: _Connection, rank: int) -> None:
        """Move ``connection`` to the newest end of ``rank`` (BUSY: out of every rank)."""
        own = connection.own
        if own is None:
            return
        if connection.rank != BUSY:
            del self.all.ranks[connection.rank][connection]
            del own.ranks[connection.rank][connection]
        if rank != BUSY:
            self.all.ranks[rank][connection] = None
            own.ranks[rank][connection] = None
        connection.rank = rank

    def remove(self, connection: _Connection) -> None:
        own = connection.own
        if own is None:
            return
        self.rank(connection, BUSY)
        connection.own = None
        self.open.discard(connection)
        own.count -= 1
        self.all.count -= 1
        if own.count == 0:
            del self.clients[connection.client]


class _Bad(Exception):
    """A request that cannot be served: answered with ``code`` and closed."""

    def __init__(self, code: int, message: str, headers: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.code = code
        self.message = message
        self.headers = headers


class _Connection(asyncio.Protocol):
    __slots__ = (
        "body",
        "buf",
        "certificate",
        "client",
        "deadline",
        "drain",
        "eof",
        "fd",
        "handshake",
        "head",
        "own",
        "phase",
        "rank",
        "remaining",
        "scanned",
        "served",
        "server",
        "started",
        "timer",
        "transport",
        "trusted",
        "writing_paused",
    )

    def __init__(self, server: Serving) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.fd = -1
        self.client = ""
        self.own: _Ranks | None = None
        self.rank = BUSY
        self.phase = HANDSHAKE
        self.buf = bytearray()
        self.scanned = 0  # bytes of buf searched for the head's end already
        self.served = False  # a request was answered on it
        self.started = False  # the head of a later request has begun
        self.trusted = False  # a guard let one of its requests in
        self.certificate: dict[str, Any] | None = None
        self.head: Head | None = None
        self.body = bytearray()
        self.remaining = 0  # body bytes still to come
        self.drain = False
        self.eof = False
        self.writing_paused = False
        self.deadline = math.inf
        self.timer: asyncio.TimerHandle | None = None
        self.handshake: asyncio.Task[None] | None = None

    # ---- the transport's callbacks ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        server = self.server
        peer = transport.get_extra_info("peername")
        self.client = _client_key(peer[0] if peer else "")
        self.fd = transport.get_extra_info("socket").fileno()
        evicted = server.table.evicted
        if not server.table.admit(self):
            self.phase = GONE
            self.transport.abort()
            server.warn_full()
            return
        if server.table.evicted != evicted:
            server.warn_full()
        self._until(server.loop.time() + server.limits.head_timeout)
        if server.tls is None:
            self.phase = HEAD
            return
        # The ClientHello is for the TLS layer: nothing reaches data_received before it.
        self.transport.pause_reading()
        self.handshake = server.loop.create_task(self._handshake(server.tls))

    async def _handshake(self, context: ssl.SSLContext) -> None:
        raw = self.transport
        assert raw is not None
        try:
            wrapped = await self.server.loop.start_tls(
                raw,
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=self.server.limits.head_timeout,
                ssl_shutdown_timeout=SSL_SHUTDOWN,
            )
        except Exception:  # a failed, timed-out or evicted handshake: the caller's affair
            log.debug("a TLS handshake from %s failed", self.client, exc_info=True)
            self._gone()
            return
        finally:
            self.handshake = None
        if self.phase == GONE or wrapped is None:
            if wrapped is not None:
                wrapped.abort()
            return
        self.transport = wrapped
        self.certificate = wrapped.get_extra_info("peercert") or None
        self.phase = HEAD
        if self.buf:  # decrypted bytes that came with the handshake's end
            self._read_head()

    def data_received(self, data: bytes) -> None:
        phase = self.phase
        if phase == BODY:
            self._read_body(data)
        elif phase in (HEAD, HANDSHAKE, HANDLING):
            self.buf += data
            if phase == HEAD:
                self._read_head()
            elif len(self.buf) > self.server.limits.max_head and self.transport is not None:
                # Pipelined ahead of an answer: wait for the answer before reading more.
                self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        # A request being handled is still answered (the caller half-closed after sending);
        # TLS cannot stay half-open, so there the transport closes either way.
        return self.phase == HANDLING and self.server.tls is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.phase == HEAD:
            self._wait_for_next()

    def waiting(self) -> bool:
        """Bytes from the caller wait in the kernel, not read by the loop yet (a request sent
        at once after connecting, on a connection accepted in the same batch as a flood)."""
        try:
            unread: int = struct.unpack("i", fcntl.ioctl(self.fd, termios.FIONREAD, bytes(4)))[0]
        except OSError:  # closed underneath: nothing more will be read from it
            return False
        return unread > 0

    # ---- reading a request -----------------------------------------------------------------

    def _read_head(self) -> None:
        buf, limits = self.buf, self.server.limits
        if self.scanned == 0:
            # Empty lines before a request line are ignored (RFC 9112 2.2).
            stripped = len(buf) - len(buf.lstrip(b"\r\n"))
            if stripped:
                del buf[:stripped]
            if not buf:
                return
        start = max(0, self.scanned - 3)
        end, size = buf.find(b"\r\n\r\n", start), 4
        bare = buf.find(b"\n\n", start, end if end >= 0 else len(buf))
        if bare >= 0:  # lines ended by a bare LF, as http.server reads them too
            end, size = bare, 2
        if end < 0 or end > limits.max_head:
            if len(buf) > limits.max_head:
                self._fail(431, f"the request head is over {limits.max_head} bytes")
                return
            self.scanned = len(buf)
            if self.served and not self.started:
                # A later request's head has begun: it has head_timeout, not keep_alive.
                self.started = True
                self._until(self.server.loop.time() + limits.head_timeout)
            return
        raw = bytes(buf[:end])
        del buf[: end + size]
        self.scanned = 0
        self.started = False
        try:
            head, length, expects = _parse(raw, self.certificate)
        except _Bad as bad:
            self._fail(bad.code, bad.message, bad.headers)
            return
        self._begin(head, length, expects)

    def _begin(self, head: Head, length: int, expects: bool) -> None:
        """Decide a parsed head, then read (or drain) its body."""
        limits = self.server.limits
        try:
            refusal, trusted = self.server.admit(head)
        except Exception:
            log.exception("%s %s: the guard failed", head.method, head.target)
            self._fail(500, "internal error; the server's log has the details")
            return
        if refusal is not None:
            self._write(refusal)
            self._end()
            return
        self.trusted = self.trusted or trusted
        self.head = head
        self.drain = head.target in limits.drained and length <= limits.max_drained
        most = limits.max_large if head.target in limits.large else limits.max_body
        if not self.drain and length > most:
            self._fail(413, f"the body is {length} bytes (at most {most})")
            return
        if expects and length > len(self.buf):
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.remaining = length
        buf = self.buf
        if len(buf) >= length and not self.drain:  # the whole body came with the head
            body = bytes(buf[:length])
            del buf[:length]
            self._dispatch(body)
            return
        self.phase = BODY
        self._until(self.server.loop.time() + limits.timeout)
        if buf:
            data = bytes(buf)
            buf.clear()
            self._read_body(data)

    def _read_body(self, data: bytes) -> None:
        if not self.drain and not self.body and len(data) == self.remaining:
            self.remaining = 0
            self._dispatch(data)  # the whole body in one read: no copy
            return
        take = min(len(data), self.remaining)
        if not self.drain:
            self.body += data[:take] if take < len(data) else data
        self.remaining -= take
        if take < len(data):
            self.buf += data[take:]  # the next request, pipelined
        if self.remaining > 0:
            # Later, never earlier: the timer rearms itself when it finds the deadline moved.
            self.deadline = self.server.loop.time() + self.server.limits.timeout
            return
        body = b"" if self.drain else bytes(self.body)
        self.body = bytearray()
        self._dispatch(body)

    def _dispatch(self, body: bytes) -> None:
        head = self.head
        assert head is not None
        self.phase = HANDLING
        self.head = None
        self.server.table.rank(self, BUSY)
        self._until(math.inf)
        try:
            self.server.pool.submit(self._handle, head, body)
        except RuntimeError:  # the pool shut down: the server is stopping
            self.abort()

    def _handle(self, head: Head, body: bytes) -> None:
        """On a pool thread: the handler's answer, sent back to the loop to be written."""
        try:
            answer, close = self.server.answer(head, body)
        except BaseException:
            # ``answer`` turns a handler's failure into a 500; this is a bug of ours, and the
            # connection, never evicted while handled, must not stay open for ever.
            with contextlib.suppress(RuntimeError):
                self.server.loop.call_soon_threadsafe(self.abort)
            raise
        with contextlib.suppress(RuntimeError):  # the loop closed: the server stopped
            self.server.loop.call_soon_threadsafe(self._answered, answer, close)

    # ---- answering -------------------------------------------------------------------------

    def _answered(self, answer: bytes, close: bool) -> None:
        if self.phase != HANDLING:
            return  # closed (evicted at shutdown, or the caller hung up) while handled
        self._write(answer)
        if close or self.eof:
            self._end()
            return
        self.served = True
        self.phase = HEAD
        self.server.table.rank(self, TRUSTED if self.trusted else IDLE)
        if self.writing_paused:
            # A slow reader: it has `timeout` to take the answer, and no next request is
            # read (answers would pile up) until it has.
            assert self.transport is not None
            self.transport.pause_reading()
            self._until(self.server.loop.time() + self.server.limits.timeout)
        else:
            self._wait_for_next()

    def _wait_for_next(self) -> None:
        transport = self.transport
        assert transport is not None
        self._until(self.server.loop.time() + self.server.limits.keep_alive)
        if not transport.is_reading():
            transport.resume_reading()
        if self.buf:
            self._read_head()

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _fail(self, code: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        body = json.dumps({"Error": message}).encode()
        self._write(encode(code, body, "application/json", headers, close=True))
        self._end()

    def _end(self) -> None:
        """Close once what was written is sent; until then the connection is the first to go."""
        self.phase = ENDING
        self.server.table.rank(self, CLOSING)
        self._until(self.server.loop.time() + self.server.limits.timeout)
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now, whatever is unsent."""
        transport = self.transport
        self._gone()
        if transport is not None:
            transport.abort()

    def _gone(self) -> None:
        if self.phase == GONE and self.own is None:
            return
        self.phase = GONE
        self.server.table.remove(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # ---- deadlines -------------------------------------------------------------------------

    def _until(self, deadline: float) -> None:
        """The connection closes at ``deadline`` unless it moves on before. One timer per
        connection, rearmed only when a deadline comes earlier than the one it waits for."""
        self.deadline = deadline
        timer = self.timer
        if deadline == math.inf or (timer is not None and timer.when() <= deadline):
            return
        if timer is not None:
            timer.cancel()
        self.timer = self.server.loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self.timer = None
        if self.phase == GONE or self.deadline == math.inf:
            return
        if self.server.loop.time() < self.deadline:
            self.timer = self.server.loop.call_at(self.deadline, self._expire)
            return
        log.debug("closing a connection from %s: its deadline passed", self.client)
        self.abort()


def _parse(raw: bytes, certificate: dict[str, Any] | None) -> tuple[Head, int, bool]:
    """A head, its body's length and whether it expects 100 Continue; _Bad when not served."""
    lines = raw.decode("latin-1").split("\n")
    words = lines[0].rstrip("\r").split(" ")
    if len(words) != 3 or not words[0] or not words[1]:
        raise _Bad(400, "the request line is not METHOD TARGET VERSION")
    method, target, version = words
    if not version.startswith("HTTP/") or len(version) != 8 or version[6] != ".":
        raise _Bad(400, f"{version[:20]!r} is not an HTTP version")
    if version[5] != "1" or version[7] not in "01":
        raise _Bad(505, f"{version} is not served here: HTTP/1.1 is")
    if len(lines) > MAX_HEADERS + 1:
        raise _Bad(431, f"more than {MAX_HEADERS} header lines")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.rstrip("\r").partition(":")
        # No space before the colon, no folded lines: both were ways to smuggle a header.
        if not colon or not name or name[0] in " \t" or name[-1] in " \t":
            raise _Bad(400, "a header line is not NAME: VALUE")
        key, value = name.lower(), value.strip(" \t")
        if key == "content-length" and headers.get(key, value) != value:
            raise _Bad(400, "two different Content-Lengths")
        headers[key] = value
    if method not in ("GET", "POST"):
        raise _Bad(
            405, f"{method[:20]} is not served here: GET and POST are", (("Allow", "GET, POST"),)
        )
    if "transfer-encoding" in headers:
        # A chunked body would be read as the next request; its callers send Content-Length.
        raise _Bad(411, "a chunked body is not read here: send Content-Length")
    text = headers.get("content-length") or "0"
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise _Bad(400, f"Content-Length {text[:20]!r} is not a number")
    if target.startswith("//"):  # as http.server: never read as a scheme-relative URL
        target = "/" + target.lstrip("/")
    connection = headers.get("connection", "").lower()
    keep_alive = version == "HTTP/1.1" and "close" not in connection.replace(" ", "").split(",")
    expects = version == "HTTP/1.1" and headers.get("expect", "").lower() == "100-continue"
    return Head(method, target, headers, keep_alive, certificate), int(text), expects


def encode(
    code: int,
    body: bytes,
    content_type: str,
    headers: tuple[tuple[str, str], ...],
    close: bool,
) -> bytes:
    """An answer as written: status line, headers, body."""
    lines = [
        f"HTTP/1.1 {code} {_PHRASES.get(code, '')}",
        f"Date: {_date()}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if close:
        lines.append("Connection: close")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + body


_dates: tuple[int, str] = (0, "")


def _date() -> str:
    """The Date header's value, made once a second."""
    global _dates  # noqa: PLW0603
    now = int(time.time())
    if _dates[0] != now:
        _dates = (now, email.utils.formatdate(now, usegmt=True))
    return _dates[1]


def _client_key(host: str) -> str:
    """Whose connection it is, for the per-client cap: the address, an IPv6 one by its /64
    (a host is given a /64 and picks addresses in it freely)."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening socket for ``host:port``: no host is every address of either family
    (as Go's ``net.Listen(":port")``, the healthz server's address upstream), a host with a
    colon an IPv6 one. OSError (socket.gaierror too) when it cannot be bound."""
    family = socket.AF_INET
    dual_stack = host == "" and socket.has_dualstack_ipv6()
    if dual_stack:
        host = "::"
    if ":" in host:
        family = socket.AF_INET6
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets whose proto
    # says TCP, and without it an answer written after a small unacknowledged one (the TLS
    # session tickets, a 100 Continue) waits out the caller's delayed ACK (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def descriptors() -> int:
    """The process's limit of open files, raised to its hard limit where it may be."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class _Workers:
    """The threads that run handlers: at most ``size``, each started when a request finds no
    idle one, all fed from one queue (lighter than a ThreadPoolExecutor: no Future per
    request, which is a hop the kept-alive caller waits for)."""

    def __init__(self, name: str, size: int) -> None:
        self._name = name
        self._size = max(1, size)
        self._calls: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # waiting for a call none was queued for
        self._backlog = 0  # calls queued for no idle thread: the next free one takes them
        self._stopped = False

    def submit(self, call: Callable[..., None], *args: Any) -> None:
        """RuntimeError once stopped."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("the workers stopped")
            if self._idle:
                self._idle -= 1
            elif self._threads < self._size:
                self._threads += 1
                name = f"{self._name}_{self._threads - 1}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
            else:
                self._backlog += 1
        self._calls.put((call, args))

    def _work(self) -> None:
        while (item := self._calls.get()) is not None:
            call, args = item
            try:
                call(*args)
            except Exception:  # the call answers its own errors; this is a bug of ours
                log.exception("a handler call failed")
            with self._lock:
                if self._backlog:
                    self._backlog -= 1
                else:
                    self._idle += 1

    def stop(self) -> None:
        """Let every thread end once its call returns; queued calls are dropped."""
        with self._lock:
            self._stopped = True
            threads = self._threads
        while True:  # drop what is queued, then one end-marker per thread
            try:
                self._calls.get_nowait()
            except queue.Empty:
                break
        for _ in range(threads):
            self._calls.put(None)


class Serving:
    """One server's loop thread, connections and handler pool."""

    def __init__(
        self, name: str, limits: Limits, tls: ssl.SSLContext | None, admit: Admit, answer: Answer
    ) -> None:
        self.name = name
        self.limits = limits
        self.tls = tls
        self.admit = admit
        self.answer = answer
        cap = max(1, min(limits.max_connections, descriptors() // 4))
        self.table = _Table(cap, max(1, min(limits.max_per_client, cap)))
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet)
        self.pool = _Workers(name, limits.workers)
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._warned = -math.inf

    def start(self, sock: socket.socket) -> None:
        """Serve ``sock`` (bound and listening) from a thread of the server's own."""
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-loop", daemon=True)
        self._thread.start()
        serve = self.loop.create_server(lambda: _Connection(self), sock=sock, backlog=BACKLOG)
        self._server = asyncio.run_coroutine_threadsafe(serve, self.loop).result()

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    def open_connections(self) -> int:
        return len(self.table.open)

    def warn_full(self) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY:
            self._warned = now
            log.warning(
                "%s: %d connections are open, the most allowed: closing the least useful "
                "(%d so far)",
                self.name,
                self.table.all.count,
                self.table.evicted,
            )

    def stop(self) -> None:
        """Stop accepting, close every connection (a kept-alive caller would otherwise keep
        the process from exiting), and end the loop's thread."""
        if self._thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            self.loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(timeout=10)
        self._thread = None
        self.pool.stop()

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.table.open):
            connection.abort()
        self.loop.call_soon(self.loop.stop)  # after the aborts' own callbacks


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A connection's error (a reset, a failed handshake) is its caller's affair; anything
    else is a bug of ours and logged as one."""
    if isinstance(context.get("exception"), OSError):  # TimeoutError and SSLError too
        log.debug("%s", context.get("message"), exc_info=context.get("exception"))
        return
    loop.default_exception_handler(context)
