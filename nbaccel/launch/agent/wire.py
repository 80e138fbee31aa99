"""The frames between the notebook and a host's agent, over the ssh process's stdin and stdout.

A frame is a 4-byte big-endian length, one byte of kind and the body. Small frames carry JSON
(so that a hello from an agent of another nbaccel version still reads, and its versions can be
shown); a rank's messages and output travel as the bytes they were. The agent writes
:data:`MAGIC` once before its first frame: whatever a login script prints before it is
skipped (and shown when no agent answers).

Notebook -> agent: :class:`Job`, :class:`Signal`, :class:`Kill`, :class:`Ping`.
Agent -> notebook: :class:`Hello`, :class:`Started`, :class:`Message` (a rank's message as
``protocol.encode`` wrote it), :class:`Output` (empty ``data``: that stream ended),
:class:`Exit`, :class:`Fatal`, :class:`Ping`, :class:`Usage`.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "MAGIC",
    "Exit",
    "Fatal",
    "Frame",
    "FrameReader",
    "Hello",
    "Job",
    "Kill",
    "Message",
    "Output",
    "Ping",
    "Signal",
    "Started",
    "Task",
    "Usage",
    "decode_frame",
    "encode_frame",
]

MAGIC = b"\nNBACCEL-AGENT-1\n"
_HEAD = struct.Struct(">IB")
_RANK = struct.Struct(">IB")  # rank, stream (Output) / rank, unused (Message)
MAX_FRAME = 1 << 31


@dataclass(frozen=True)
class Hello:
    """The agent's first frame: what runs there, and a free port for the rendezvous."""

    python: str
    torch: str
    nbaccel: str
    hostname: str
    address: str  # the address ssh reached the host at ("" where unknown)
    port: int  # a free TCP port on ``address``
    gpus: int
    pid: int


@dataclass(frozen=True)
class Job:
    """The ranks to run: ``specs`` is the cloudpickled list of ``WorkerSpec``s, loaded after
    ``sys_path`` and ``cwd`` were set there (notebook functions travel by value).
    ``store_world_size`` above 0: this host serves the ranks' store (on the socket its hello's
    port is bound to) for that many ranks, its operations waiting ``store_timeout`` s."""

    master_addr: str
    cwd: str
    sys_path: list[str]
    node_timeout: float
    store_world_size: int = 0
    store_timeout: float = 300.0
    specs: bytes = field(repr=False, default=b"")


@dataclass(frozen=True)
class Signal:
    rank: int
    sig: int


@dataclass(frozen=True)
class Kill:
    rank: int


@dataclass(frozen=True)
class Ping:
    """Either side is alive (sent every second while nothing else is)."""


@dataclass(frozen=True)
class Started:
    rank: int
    pid: int


@dataclass(frozen=True)
class Message:
    rank: int
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Output:
    rank: int
    stream: int  # 1 stdout, 2 stderr
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Task:
    """Bytes for a rank's task pipe (the notebook to the agent): "where are you?" today, a
    pool's tasks where a pool runs on hosts."""

    rank: int
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Exit:
    rank: int
    code: int
    collective: dict[str, Any] | None = None  # what its note page names (notes.call_to_json)


@dataclass(frozen=True)
class Usage:
    """The memory the agent's ranks hold, in bytes, measured every few seconds (JSON keys:
    ranks as text; ``gpu`` only for ranks that hold GPU memory)."""

    rss: dict[str, int]
    gpu: dict[str, int] = field(default_factory=dict)

    def by_rank(self) -> dict[int, tuple[int, int | None]]:
        """Rank -> (RSS, GPU memory or None)."""
        return {int(r): (size, self.gpu.get(r)) for r, size in self.rss.items()}


@dataclass(frozen=True)
class Fatal:
    """The agent cannot go on (its text says why); it stops its ranks and ends."""

    text: str


Frame: TypeAlias = (
    Hello | Job | Signal | Kill | Ping | Started | Message | Output | Task | Exit | Fatal | Usage
)

_JSON_KINDS: dict[int, type] = {
    1: Hello,
    3: Signal,
    4: Kill,
    5: Ping,
    6: Started,
    9: Exit,
    12: Usage,
}
_KIND_OF = {cls: kind for kind, cls in _JSON_KINDS.items()}
_JOB, _MESSAGE, _OUTPUT, _FATAL, _TASK = 2, 7, 8, 10, 11


def encode_frame(frame: Frame) -> bytes:
    """One frame as it travels."""
    if isinstance(frame, Job):
        head = json.dumps({k: v for k, v in asdict(frame).items() if k != "specs"}).encode()
        kind, body = _JOB, struct.pack(">I", len(head)) + head + frame.specs
    elif isinstance(frame, Message):
        kind, body = _MESSAGE, _RANK.pack(frame.rank, 0) + frame.data
    elif isinstance(frame, Task):
        kind, body = _TASK, _RANK.pack(frame.rank, 0) + frame.data
    elif isinstance(frame, Output):
        kind, body = _OUTPUT, _RANK.pack(frame.rank, frame.stream) + frame.data
    elif isinstance(frame, Fatal):
        kind, body = _FATAL, frame.text.encode("utf-8", "replace")
    else:
        kind, body = _KIND_OF[type(frame)], json.dumps(asdict(frame)).encode()
    return _HEAD.pack(len(body), kind) + body


def decode_frame(kind: int, body: bytes) -> Frame:
    """Inverse of :func:`encode_frame` (``kind`` and ``body`` as :class:`FrameReader` splits
    them); anything else is a protocol error (``ValueError``)."""
    if kind == _JOB:
        (size,) = struct.unpack_from(">I", body)
        head: dict[str, Any] = json.loads(body[4 : 4 + size])
        return Job(**head, specs=bytes(body[4 + size :]))
    if kind in (_MESSAGE, _OUTPUT, _TASK):
        rank, stream = _RANK.unpack_from(body)
        data = bytes(body[_RANK.size :])
        if kind == _TASK:
            return Task(rank, data)
        return Message(rank, data) if kind == _MESSAGE else Output(rank, stream, data)
    if kind == _FATAL:
        return Fatal(body.decode("utf-8", "replace"))
    cls = _JSON_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown frame kind {kind}")
    frame: Frame = cls(**json.loads(body))
    return frame


class FrameReader:
    """Splits a byte stream into frames; bytes before :data:`MAGIC` are kept as ``preamble``
    when ``expect_magic`` (the notebook's side of an agent's stdout)."""

    def __init__(self, expect_magic: bool = False) -> None:
        self._buf = bytearray()
        self._synced = not expect_magic
        self.preamble = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """Add ``data``; every frame it completed, in order."""
        self._buf.extend(data)
        if not self._synced:
            at = self._buf.find(MAGIC)
            if at < 0:
                keep = len(MAGIC) - 1  # MAGIC may straddle two reads
                cut = max(0, len(self._buf) - keep)
                self.preamble.extend(self._buf[:cut])
                del self._buf[:cut]
                return []
            self.preamble.extend(self._buf[:at])
            del self._buf[: at + len(MAGIC)]
            self._synced = True
        frames: list[Frame] = []
        while len(self._buf) >= _HEAD.size:
            size, kind = _HEAD.unpack_from(self._buf)
            if size > MAX_FRAME:
                raise ValueError(f"a frame of {size} bytes: the stream is not an agent's")
            end = _HEAD.size + size
            if len(self._buf) < end:
                break
            body = bytes(self._buf[_HEAD.size : end])
            del self._buf[:end]
            frames.append(decode_frame(kind, body))
        return frames
