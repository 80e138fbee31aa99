"""Copying tensor bytes between memory and files in large pieces, several at once.

``os.pwrite`` and ``os.preadv`` release the GIL, so a few threads copy between the tensors'
memory and the page cache on several cores at once. Every piece names one range of one file
and the memory it is copied from or into; nothing is copied through an intermediate ``bytes``
object. Writes go to several files at a time (see :func:`interleave`); a file is read as a few
contiguous spans at once, each in order through its own descriptor (see :func:`read_spans`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CHUNK",
    "Pending",
    "Piece",
    "interleave",
    "io_threads",
    "pieces_of",
    "read_spans",
    "start",
]

CHUNK = 32 * 2**20  # large enough for few system calls, small enough to share the work


@dataclasses.dataclass(frozen=True)
class Piece:
    """``memory`` is copied to (write) or from (read) ``fd`` at ``offset``; ``path`` is the
    file's name for error messages."""

    fd: int
    offset: int
    memory: memoryview
    path: Path


def io_threads() -> int:
    """Threads that copy at once: one per usable core, at most 4 (more only contend)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def pieces_of(fd: int, offset: int, memory: memoryview, path: Path) -> list[Piece]:
    """``memory`` (at ``offset`` in the file) in pieces of at most :data:`CHUNK` bytes."""
    return [
        Piece(fd, offset + start, memory[start : start + CHUNK], path)
        for start in range(0, len(memory), CHUNK)
    ]


def interleave(per_file: list[list[Piece]]) -> list[Piece]:
    """The pieces of several files taken in turn, the largest file first: writes into one
    file take its lock (ext4, tmpfs, ...), so threads that copy at the same time should copy
    into different files."""
    ordered = sorted(per_file, key=lambda pieces: -sum(len(p.memory) for p in pieces))
    return [
        piece for turn in itertools.zip_longest(*ordered) for piece in turn if piece is not None
    ]


def _write(piece: Piece) -> None:
    memory, offset = piece.memory, piece.offset
    while len(memory):
        try:
            written = os.pwrite(piece.fd, memory, offset)
        except OSError as error:
            raise OSError(
                error.errno, f"Could not write checkpoint file {piece.path}: {error.strerror}"
            ) from error
        memory, offset = memory[written:], offset + written


def _read(piece: Piece) -> None:
    memory, offset = piece.memory, piece.offset
    while len(memory):
        count = os.preadv(piece.fd, [memory], offset)
        if not count:
            raise ValueError("the file ends early")
        memory, offset = memory[count:], offset + count


class Pending:
    """Pieces being copied by a pool of threads; :meth:`wait` joins them."""

    def __init__(self, pieces: list[Piece], write: bool, threads: int | None = None) -> None:
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future[None]] = []
        if not pieces:
            return
        copy = _write if write else _read
        count = min(threads or io_threads(), len(pieces))
        self._pool = concurrent.futures.ThreadPoolExecutor(count, "nbaccel-io")
        self._futures = [self._pool.submit(copy, piece) for piece in pieces]  # in file order

    def wait(self) -> None:
        """Block until every piece is copied; the first failure cancels the rest and raises."""
        if self._pool is None:
            return
        try:
            for future in self._futures:
                future.result()
        except BaseException:
            for future in self._futures:
                future.cancel()
            raise
        finally:
            self._pool.shutdown(wait=True)
            self._pool = None


def start(pieces: Iterable[Piece], write: bool) -> Pending:
    """Start copying ``pieces`` in the background (call ``wait()`` on the result)."""
    return Pending(list(pieces), write)


def _read_span(span: list[Piece]) -> None:
    """Read ``span`` in order through a descriptor of its own (its own readahead state)."""
    fd = os.open(span[0].path, os.O_RDONLY)
    try:
        for piece in span:
            _read(dataclasses.replace(piece, fd=fd))
    finally:
        os.close(fd)


def read_spans(pieces: list[Piece], threads: int | None = None) -> None:
    """Read the pieces of one file as ``threads`` contiguous spans of about equal size, each
    in order by its own thread through its own descriptor: every stream stays sequential for
    the kernel's readahead, and a stream whose thread waits does not leave the disk idle."""
    count = min(threads or io_threads(), len(pieces))
    total = sum(len(piece.memory) for piece in pieces)
    if count <= 1 or not total:
        for piece in pieces:
            _read(piece)
        return
    spans: list[list[Piece]] = [[] for _ in range(count)]
    done = 0
    for piece in pieces:
        spans[min(count - 1, done * count // total)].append(piece)
        done += len(piece.memory)
    with concurrent.futures.ThreadPoolExecutor(count, "nbaccel-io") as pool:
        for future in [pool.submit(_read_span, span) for span in spans if span]:
            future.result()
