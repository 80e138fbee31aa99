"""The machines of a multi-node launch watch each other while their workers run.

Each machine's launcher beats through the launch's store (hosted by machine 0) every second
or so. A machine that stops beating (its network is down, it was switched off) or a main
machine that stops answering is reported after ``node_timeout`` seconds, naming the machine,
and the local workers are stopped instead of waiting in a collective for ever. A machine whose
rank failed publishes that failure, so the other machines' cells say which machine and rank
failed rather than showing their own ranks' "connection closed" symptoms.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

__all__ = ["MachineLostError", "NodeWatch", "RemoteRankError", "watch_interval", "watch_timeout"]


def watch_interval(node_timeout: float) -> float:
    """Seconds between two heartbeats."""
    return max(0.2, min(1.0, node_timeout / 5))


def watch_timeout(node_timeout: float) -> timedelta:
    """How long one store operation of the watch may take."""
    return timedelta(seconds=max(1.0, 2 * watch_interval(node_timeout)))


class MachineLostError(RuntimeError):
    """Another machine of the launch stopped answering; this machine's ranks were stopped.

    Attributes:
        node_rank: the machine that was lost.
    """

    def __init__(self, message: str, node_rank: int) -> None:
        super().__init__(message)
        self.node_rank = node_rank

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.node_rank))


class RemoteRankError(RuntimeError):
    """A rank on another machine failed; that machine's cell shows its traceback.

    Attributes:
        node_rank: the machine whose rank failed.
        rank: the global rank that failed.
        summary: ``"Type: message"`` of the rank's error.
    """

    def __init__(self, node_rank: int, rank: int, summary: str) -> None:
        self.node_rank, self.rank, self.summary = node_rank, rank, summary
        super().__init__(
            f"rank {rank} on machine {node_rank} (node_rank={node_rank}) failed: {summary}\n"
            f"Its traceback and output are in machine {node_rank}'s own cell. The ranks on this "
            "machine were stopped."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.node_rank, self.rank, self.summary))


class NodeWatch:
    """Heartbeats between the machines of one attempt, through the launch's store.

    Args:
        store: a store every machine reaches, opened with :func:`watch_timeout` as its
            timeout (a store op on a dead link must give up quickly).
        node_rank: this machine.
        num_nodes: machines in the launch.
        attempt: the restart count (keys of different attempts never mix).
        timeout: seconds without news from a machine before it is reported lost.
        address: this machine's address as the others reach it (named in their messages).
        store_node: the machine that hosts ``store`` (None: not known); when the store answers,
            that machine is alive.
        store_address: machine 0's address where it is known (``master_addr``).
        on_problem: called once (from the watch's thread) when a machine is lost or reports a
            failed rank; the launcher stops its workers there.
    """

    def __init__(
        self,
        store: Any,
        node_rank: int,
        num_nodes: int,
        attempt: int,
        timeout: float,
        address: str,
        store_node: int | None,
        on_problem: Callable[[], None],
        store_address: str | None = None,
    ) -> None:
        self.store, self.node_rank, self.num_nodes = store, node_rank, num_nodes
        self.timeout, self.address, self.on_problem = timeout, address, on_problem
        self.store_node, self.store_address = store_node, store_address
        self._addresses: dict[int, str] = {}
        self._seen = {other: time.monotonic() for other in self._others()}
        self.prefix = f"nbaccel/attempt{attempt}/watch"
        self.interval = watch_interval(timeout)
        self.problem: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbaccel-node-watch", daemon=True)

    def start(self) -> NodeWatch:
        """Begin beating and watching."""
        with contextlib.suppress(Exception):
            self.store.set(f"{self.prefix}/addr{self.node_rank}", self.address)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop beating (the workers of this machine have ended)."""
        self._done.set()
        # a beat stuck on a dead link ends when the link returns or its socket gives up
        self._thread.join(timeout=self.interval if self.problem else 5 * self.interval + 5)

    def release(self) -> None:
        """Drop the store (one hosted here must not outlive the attempt)."""
        self.store = None

    # -- what this machine tells the others ------------------------------------------------------
    def publish_failure(self, rank: int, summary: str) -> None:
        """Tell the other machines that ``rank`` (of this machine) failed first."""
        with contextlib.suppress(Exception):
            self.store.set(f"{self.prefix}/fail{self.node_rank}", f"{rank}\n{summary}")

    def announce_left(self) -> None:
        """Tell the other machines that this machine's workers have ended."""
        with contextlib.suppress(Exception):
            self.store.set(f"{self.prefix}/left{self.node_rank}", "1")

    def alive(self) -> list[int]:
        """The other machines heard from lately (a dead machine will publish nothing more)."""
        recent = time.monotonic() - max(3 * self.interval, 2.0)
        return [other for other, last in self._seen.items() if last >= recent]

    def linger(self, seconds: float) -> None:
        """The store's host: keep the store up until the machines still alive have read what
        they need (and said they are done)."""
        keys = [f"{self.prefix}/left{n}" for n in self.alive()]
        if keys:
            with contextlib.suppress(Exception):
                self.store.wait(keys, timedelta(seconds=seconds))

    def remote_failure(self, within: float) -> RemoteRankError | None:
        """A failure another machine published (waiting up to ``within`` s for one)."""
        if isinstance(self.problem, RemoteRankError):
            return self.problem
        deadline = time.monotonic() + within
        while True:
            found = self._published_failure()
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    # -- the watch -------------------------------------------------------------------------------
    def _published_failure(self) -> RemoteRankError | None:
        for other in self._others():
            key = f"{self.prefix}/fail{other}"
            with contextlib.suppress(Exception):
                if self.store.check([key]):
                    rank, _, summary = self.store.get(key).decode().partition("\n")
                    return RemoteRankError(other, int(rank), summary)
        return None

    def _others(self) -> list[int]:
        return [n for n in range(self.num_nodes) if n != self.node_rank]

    def check(self) -> None:
        """Report a machine not heard from for ``timeout`` seconds (called by the launcher
        between its waits, so that a beat stuck on a dead link cannot delay the verdict)."""
        if self.problem is None and not self._done.is_set():
            lost = self._lost(self._seen)
            if lost is not None:
                self.problem = lost
                self.on_problem()

    def _loop(self) -> None:
        beats: dict[int, bytes] = {}
        count = 0
        while not self._done.wait(self.interval):
            count += 1
            try:
                self._beat(count, self._seen, beats)
            except Exception:
                pass  # the store did not answer: the last news stays as it was
            failure = self._published_failure()
            if failure is not None and self.problem is None and not self._done.is_set():
                self.problem = failure
                self.on_problem()
                return

    def _beat(self, count: int, seen: dict[int, float], beats: dict[int, bytes]) -> None:
        self.store.set(f"{self.prefix}/beat{self.node_rank}", str(count))
        now = time.monotonic()
        if self.store_node is not None and self.store_node != self.node_rank:
            seen[self.store_node] = now  # the store (on that machine) answered
        for other in self._others():
            if other not in self._addresses and self.store.check([f"{self.prefix}/addr{other}"]):
                self._addresses[other] = self.store.get(f"{self.prefix}/addr{other}").decode()
            if self.store.check([f"{self.prefix}/left{other}"]):
                seen[other] = float("inf")  # it ended: nothing more to hear from it
                continue
            key = f"{self.prefix}/beat{other}"
            if other != self.store_node and self.store.check([key]):
                value = self.store.get(key)
                if value != beats.get(other):
                    beats[other], seen[other] = value, now

    def where(self, node: int) -> str:
        """``"machine 1 (192.0.2.2)"``: a machine as the messages name it."""
        address = self._addresses.get(node) or (self.store_address if node == 0 else None)
        return f"machine {node} ({address})" if address else f"machine {node}"

    def _lost(self, seen: dict[int, float]) -> MachineLostError | None:
        now = time.monotonic()
        for other, last in seen.items():
            if now - last > self.timeout:
                return MachineLostError(
                    f"{self.where(other)} has not been heard from for {self.timeout:g}s "
                    f"(node_timeout): it is unreachable from machine {self.node_rank}, or it "
                    "stopped. The ranks on this machine were stopped. Check the network between "
                    "the machines (and that every machine runs the cell), then run the cell "
                    "again on every machine; max_restarts= retries by itself.",
                    other,
                )
        return None
