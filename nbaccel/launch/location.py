"""Where a rank is: the answer a worker gives to ``protocol.AskWhere``, in plain data.

A worker's reader thread builds a :class:`RankWhere` from its main thread's frames and the
collective that thread is in (``worker/whereami.py``, ``worker/collectives.py``); the notebook's
side turns the answers into the where table and looks for stalled or diverged collectives
(``parent/wheretable.py``, ``parent/stalls.py``). Nothing here imports either side.
"""

from __future__ import annotations

from dataclasses import dataclass

from .states import WorkerPhase

__all__ = ["CollectiveCall", "RankWhere", "SourceLine"]


@dataclass(frozen=True)
class SourceLine:
    """One frame: the file (a notebook cell's pseudo-file too), line, function and its text
    (empty where the worker cannot read the file; the notebook's side fills it in then)."""

    filename: str
    lineno: int
    function: str
    text: str = ""


@dataclass(frozen=True)
class CollectiveCall:
    """A ``torch.distributed`` collective a rank is in (or was in when it failed).

    Attributes:
        op: the function called (``all_reduce``, ``all_gather``, ``barrier``, ...).
        seq: its number among the collectives this rank called on ``group`` (1 is the first);
            the same collective has the same number on every rank of the group.
        group: the process group: ``"world"`` or the ranks of a subgroup (``"ranks 0,2"``).
        group_ranks: the global ranks of the group.
        site: the person's own line that called it (None when only library code did).
        via: the function of nbaccel or torch the person called, when it is not ``op``
            itself (``wait_for_everyone``, ``gather``, ...).
        shapes: the shape of each tensor it sends (empty for objects and barriers).
        dtypes: the dtype of each of those tensors (``"float32"``...).
        seconds: how long the rank had been in it when it answered.
        group_id: the group's name as torch knows it (alike on every rank; two groups of the
            same ranks differ).
        queued: the call returned its ``Work`` (``async_op=True``) and that work has not
            completed: the rank goes on, or waits for it in ``work.wait()``.
    """

    op: str
    seq: int
    group: str
    group_ranks: tuple[int, ...]
    site: SourceLine | None
    via: str = ""
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    seconds: float = 0.0
    group_id: str = ""
    queued: bool = False

    @property
    def tensors(self) -> str:
        """``float32[4, 3]`` for each tensor, or empty."""
        return ", ".join(
            f"{dtype}[{', '.join(map(str, shape))}]"
            for dtype, shape in zip(self.dtypes, self.shapes, strict=False)
        )


@dataclass(frozen=True)
class RankWhere:
    """Where one rank's main thread is now.

    Attributes:
        rank: the global rank.
        host: the machine's name.
        pid: the worker's process id.
        phase: what its main thread does (running, idle, returned, failed).
        task: the running task (a pool's cell label or function name, the launched
            function's name), or empty.
        frame: the person's innermost frame (None when only library code runs: an idle pool
            rank).
        collective: the collective it is in, if any.
        failed: the last collective that raised in the running task (the rank may be on its
            way out of it: a peer died inside it).
        stack: the main thread's whole stack, formatted (only when asked for in detail).
    """

    rank: int
    host: str
    pid: int
    phase: WorkerPhase
    task: str = ""
    frame: SourceLine | None = None
    collective: CollectiveCall | None = None
    failed: CollectiveCall | None = None
    stack: str = ""
