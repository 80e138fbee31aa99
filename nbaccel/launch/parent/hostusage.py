"""The memory of the ranks on other machines (``hosts=``).

The notebook measures its own machine's ranks by pid (``environment.memory``); a pid of
another machine means nothing here. So each host's agent measures its own ranks the same way
every few seconds and sends one :class:`~nbaccel.launch.agent.wire.Usage` frame; the
notebook's reader of that agent keeps only the latest (``AgentLink.memory``: nothing queues up
while a pool sits idle between calls). While a launch or a pool call runs, a
:class:`MemoryTicker` turns each new set of figures into one
:class:`~nbaccel.launch.events.MemoryEvent` per rank, on the thread that hands on every other
event (the dashboard shows them; ``on_event`` receives them); ``WorkerPool.status()`` reads
the latest directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..events import MemoryEvent

__all__ = ["MemoryTicker", "latest"]


class _Measured(Protocol):
    memory: dict[int, tuple[int, int | None]]


def latest(agents: Iterable[_Measured]) -> dict[int, tuple[int, int | None]]:
    """Rank -> (RSS, GPU memory) as the agents measured it last."""
    out: dict[int, tuple[int, int | None]] = {}
    for agent in agents:
        out.update(agent.memory)
    return out


class MemoryTicker:
    """The notebook's side: each agent's new figures as one ``MemoryEvent`` per rank.

    ``tick`` is called before each wait of a launch or a pool call; it hands on only what
    arrived since the last tick (an agent's reader replaces its ``memory`` with each frame),
    so events follow the agents' 2-second rounds without a clock of their own here.
    """

    def __init__(
        self, agents: Callable[[], Iterable[_Measured]], on_event: Callable[[Any], None] | None
    ) -> None:
        self.agents = agents
        self.on_event = on_event
        self.seen: dict[int, object] = {}  # id(agent) -> the figures last handed on

    def tick(self) -> None:
        """Hand on the figures that arrived since the last tick."""
        if self.on_event is None:
            return
        for agent in self.agents():
            memory = agent.memory
            if not memory or self.seen.get(id(agent)) is memory:
                continue
            self.seen[id(agent)] = memory
            for rank, (rss, gpu) in sorted(memory.items()):
                self.on_event(MemoryEvent(rank=rank, rss=rss, gpu_memory=gpu))
