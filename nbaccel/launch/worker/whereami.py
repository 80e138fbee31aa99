"""A worker's answer to "where are you?": its main thread's line and the collective it is in.

The answer is built on the task pipe's reader thread (``runner.TaskInbox``) from
``sys._current_frames()``, so it comes while the main thread is blocked in C (a collective,
``time.sleep``) or busy in Python (``while True: pass``).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback

from ..location import RankWhere
from ..states import WorkerPhase
from .collectives import collective_failed, collective_in, forget_failures
from .frames import person_frame, source_line

__all__ = ["Whereabouts"]


class Whereabouts:
    """What the rank is doing (set by its main thread) and where (read from its frames)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.host = socket.gethostname()
        self.phase = WorkerPhase.IDLE
        self.task = ""

    def enter(self, phase: WorkerPhase, task: str = "") -> None:
        """The main thread starts ``task`` (``RUNNING``), or is done with it."""
        if phase is WorkerPhase.RUNNING:
            forget_failures()
        self.phase, self.task = phase, task

    def answer(self, detail: bool = False) -> RankWhere:
        """Where the main thread is now; ``detail`` adds its whole stack."""
        ident = threading.main_thread().ident or 0
        frame = sys._current_frames().get(ident)
        person, _ = person_frame(frame)
        stack = ""
        if detail and frame is not None:
            stack = "".join(traceback.format_stack(frame)).rstrip()
        return RankWhere(
            rank=self.rank,
            host=self.host,
            pid=os.getpid(),
            phase=self.phase,
            task=self.task,
            frame=source_line(person) if person is not None else None,
            collective=collective_in(ident),
            failed=collective_failed(ident),
            stack=stack,
        )
