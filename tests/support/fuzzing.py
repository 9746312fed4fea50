"""Fuzzing a listener of a running `mainstem serve` from recorded real sessions.

A real client's session is recorded through a loopback proxy (`Recorder`); each fuzz
input is that byte stream mutated (`mutate`): a flipped byte late in the stream keeps the
handshake intact, so inputs reach the states after login, not only the first frame.
`probe` replays one input on a fresh connection and reports how the server answered;
`Fuzzer` runs a seeded series of them and keeps what went wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.campaign_clients import canary

HOST = "127.0.0.1"
QUIET_S = 0.3  # an answer is complete once the server has been quiet this long
PROBE_S = 2.0  # the longest a single input is watched
CONCURRENCY = 8
BOUNDARY_INTS = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


class Recorder:
    """A loopback proxy to `port` that records what each client connection sent, as the
    list of chunks it was read in."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self.sessions: list[list[bytes]] = []
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task] = set()

    async def __aenter__(self) -> Recorder:
        self._server = await asyncio.start_server(self._relay, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._pipes:
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _relay(self, client_reader: asyncio.StreamReader,
                     client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(HOST, self.target)
        sent: list[bytes] = []
        self.sessions.append(sent)
        pipes = [asyncio.ensure_future(_pipe(client_reader, server_writer, sent)),
                 asyncio.ensure_future(_pipe(server_reader, client_writer, None))]
        self._pipes.update(pipes)
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for pipe in pipes:
            pipe.cancel()
        for writer in (client_writer, server_writer):
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                record: list[bytes] | None) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            if record is not None:
                record.append(data)
            writer.write(data)
            await writer.drain()


def mutate(rng: random.Random, session: list[bytes]) -> list[bytes]:
    """One fuzz input from a recorded session: 1-4 mutations, each in a chunk picked at
    random (clients write about a frame at a time, so short late frames such as a queue
    declaration are hit as often as the long handshake), and half the time the stream is
    cut at a chunk boundary."""
    data = bytearray(b"".join(session))
    bounds = [0]
    for chunk in session:
        bounds.append(bounds[-1] + len(chunk))
    for _ in range(rng.randint(1, 4)):
        chunk = rng.randrange(len(session))
        at = min(bounds[chunk] + rng.randrange(len(session[chunk])), len(data) - 1)
        rng.choice(_MUTATIONS)(rng, data, at)
    if rng.random() < 0.5:
        data = data[:max(rng.choice(bounds[1:]), 1)]
    return [bytes(data[i:i + 4096]) for i in range(0, len(data), 4096)]


def _flip(rng: random.Random, data: bytearray, at: int) -> None:
    data[at] = rng.randrange(256)


def _boundary(rng: random.Random, data: bytearray, at: int) -> None:
    """A length or count field set to an edge value."""
    width, order = rng.choice([(1, ">B"), (2, ">H"), (4, ">I"), (2, "<H"), (4, "<I")])
    data[at:at + width] = struct.pack(order, rng.choice(BOUNDARY_INTS) & (256**width - 1))


def _splice(rng: random.Random, data: bytearray, at: int) -> None:
    """Repeat, drop or insert a run of bytes: frames arrive twice, torn, or padded."""
    run = data[at:at + rng.randint(1, 64)]
    choice = rng.randrange(3)
    if choice == 0:
        data[at:at] = run
    elif choice == 1 and len(run) < len(data):
        del data[at:at + len(run)]
    else:
        data[at:at] = rng.randbytes(rng.randint(1, 32))


_MUTATIONS = [_flip, _flip, _boundary, _splice]


@dataclass
class Probe:
    """How the server treated one input."""

    chunks: list[bytes]
    local_port: int = 0
    received: bytes = b""
    closed: bool = False  # the server closed (or reset) the connection
    refused: bool = False  # the connection itself failed

    @property
    def input(self) -> bytes:
        return b"".join(self.chunks)


async def probe(port: int, chunks: list[bytes]) -> Probe:
    """Send `chunks` on a fresh connection; read until the server closes or goes quiet."""
    result = Probe(chunks)
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        result.refused = True
        return result
    result.local_port = writer.get_extra_info("sockname")[1]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PROBE_S
    try:
        for chunk in chunks:
            writer.write(chunk)
        await writer.drain()
        while loop.time() < deadline:
            data = await asyncio.wait_for(reader.read(65536), QUIET_S)
            if not data:
                result.closed = True
                break
            result.received += data
    except TimeoutError:  # before OSError, its base class
        pass  # quiet: the server waits for more (a torn frame) or has answered
    except (ConnectionError, OSError):
        result.closed = True
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    return result


class ServerLog:
    """New lines of a JSON server log since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_entries(self) -> list[dict]:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def unhandled(entry: dict) -> bool:
    """A log line with a traceback: an error no handler expected (a failed connection)."""
    return "traceback" in entry


Check = Callable[[Probe], "str | None"]


@dataclass
class FuzzReport:
    listener: str
    inputs: int = 0
    answered: int = 0
    closed: int = 0
    quiet: int = 0
    failures: list[str] = field(default_factory=list)  # each names its input's bytes


class Fuzzer:
    """Seeded fuzzing of one listener: `inputs` mutations of the recorded sessions, a few
    at a time; `check` judges each answer (None when acceptable); the server log is read
    for unhandled errors, matched to inputs by the client port."""

    def __init__(self, listener: str, port: int, log: ServerLog, sessions: list[list[bytes]],
                 check: Check, alive: Callable[[], bool]) -> None:
        self.listener = listener
        self.port = port
        self.log = log
        self.sessions = [s for s in sessions if s]
        self.check = check
        self.alive = alive

    async def run(self, seed: int, inputs: int) -> FuzzReport:
        report = FuzzReport(self.listener)
        rng = random.Random(seed)
        assert self.sessions, f"no recorded {self.listener} session to mutate"
        self.log.new_entries()  # only what the fuzz inputs cause counts
        for start in range(0, inputs, CONCURRENCY):
            batch = [mutate(rng, rng.choice(self.sessions))
                     for _ in range(min(CONCURRENCY, inputs - start))]
            probes = await asyncio.gather(*(probe(self.port, chunks) for chunks in batch))
            self._judge(report, probes)
            if not self.alive():
                report.failures.append(f"server died after one of {_inputs(probes)}")
                break
        return report

    def _judge(self, report: FuzzReport, probes: list[Probe]) -> None:
        by_port = {p.local_port: p for p in probes}
        for entry in self.log.new_entries():
            if unhandled(entry):
                culprit = by_port.get(_peer_port(entry.get("peer", "")))
                report.failures.append(
                    f"{entry.get('event')} {entry.get('error')!r} after input "
                    f"{culprit.input if culprit else 'unknown'!r}")
        for result in probes:
            report.inputs += 1
            if result.refused:
                report.failures.append(f"connection refused for input {result.input!r}")
                continue
            report.closed += result.closed
            report.answered += bool(result.received) and not result.closed
            report.quiet += not result.received and not result.closed
            problem = self.check(result)
            if problem:
                report.failures.append(f"{problem}; input {result.input!r}; "
                                       f"answer {result.received[-200:]!r}")


def _peer_port(peer: str) -> int:
    return int(peer.rsplit(":", 1)[1]) if ":" in peer else -1


def _inputs(probes: list[Probe]) -> str:
    return ", ".join(repr(p.input) for p in probes)


# -- what each listener must answer -----------------------------------------------------

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
AMQP_FRAME_END = 0xCE
CONNECTION_CLOSE = (10, 50)
CONNECTION_CLOSE_OK = (10, 51)


def amqp_closes_with_connection_close(result: Probe) -> str | None:
    """RabbitMQ never drops an AMQP connection silently: a bad protocol header gets its
    own header back; anything else ends with connection.close (or close-ok, when the
    client asked to close)."""
    if not result.closed:
        return None
    data = result.received
    if data.startswith(b"AMQP"):
        return None if len(data) == 8 else "bytes after the protocol header answer"
    last = _last_amqp_method(data)
    if last in (CONNECTION_CLOSE, CONNECTION_CLOSE_OK):
        return None
    return f"AMQP connection closed without connection.close (last method {last})"


def _last_amqp_method(data: bytes) -> tuple[int, int] | None:
    last, position = None, 0
    while position + 7 <= len(data):
        kind, _channel, size = struct.unpack_from(">BHI", data, position)
        end = position + 7 + size
        if end >= len(data) or data[end] != AMQP_FRAME_END:
            break
        if kind == 1 and size >= 4:
            last = struct.unpack_from(">HH", data, position + 7)
        position = end + 1
    return last


def http_never_500(result: Probe) -> str | None:
    """Bad requests are the client's fault: 4xx, never 5xx."""
    for line in result.received.split(b"\r\n"):
        if line.startswith(b"HTTP/1.") and line[9:10] == b"5":
            return f"HTTP answered {line.decode(errors='replace')}"
    return None


def any_answer(_result: Probe) -> str | None:
    """An answer, a close, or waiting for the rest of a torn frame are all acceptable."""
    return None


CHECKS: dict[str, Check] = {
    "amqp": amqp_closes_with_connection_close,
    "admin": http_never_500,
}


async def fuzz_listener(listener: str, port: int, log: ServerLog, alive: Callable[[], bool],
                        seed: int, inputs: int) -> FuzzReport:
    """The canary publishes and reads through a recording proxy, `inputs` mutations of its
    sessions are replayed, and the canary must work again afterwards."""
    async with Recorder(port) as recorder:
        await canary(listener, recorder.port, f"before-{seed}")
    fuzzer = Fuzzer(listener, port, log, recorder.sessions, CHECKS.get(listener, any_answer),
                    alive)
    report = await fuzzer.run(seed, inputs)
    if alive():
        try:
            await canary(listener, port, f"after-{seed}")
        except Exception as exc:
            report.failures.append(f"the canary failed after fuzzing: {exc!r}")
    return report
