"""One generation of a pool whose ranks run on other machines (``WorkerPool(hosts=[...])``).

The same :class:`PoolGroup` as on one machine (tasks, replies, interrupts, ``where``, the end),
with three things of a launch on hosts (``hoststart.py``): the agents are started and checked
first, each rank is a ``RemoteLink`` started through its host's agent, and its task-pipe bytes
travel as ``Task`` frames. A machine lost between or during calls breaks the generation with
``MachineLostError`` naming it; ``restart()`` starts new agents.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO, cast

from ..spec import WorkerMode
from .hoststart import AgentTasks, HostAgents, host_prefixes, host_spec, job_starter
from .hostusage import MemoryTicker, latest
from .localranks import LocalRanks
from .poolerrors import RankDied
from .poolgroup import CurrentStream, PoolGroup
from .relay import OutputRelay
from .render import cell_renderer
from .supervisor import Supervisor
from .taskpipes import TaskSender

__all__ = ["HostsPoolGroup"]


class HostsPoolGroup(PoolGroup):
    """A :class:`PoolGroup` over ``config.hosts`` (see the module docstring)."""

    up: HostAgents | None = None
    ticker: MemoryTicker | None = None

    def _task_pipes(self) -> TaskSender:
        return AgentTasks(None)  # its agents come with start()

    def host_of(self, rank: int) -> str:
        hosts = self.config.hosts
        assert hosts is not None
        return hosts.host_of(rank, self.config.num_processes)

    def start(self, timeout: float) -> None:
        """Start every host's agent, then the ranks, and wait (up to ``timeout`` s from now)
        until each has joined the group."""
        deadline = time.monotonic() + timeout
        self.up = up = HostAgents.start(self.config)
        self.config = up.config  # the device the hosts decided
        assert isinstance(self.pipes, AgentTasks)
        self.pipes.up = up
        if self.generation == 0:
            print(
                f"Starting a pool of {up.describe()}; they meet at {up.master}:{up.port}.",
                flush=True,
            )
        prefixes = host_prefixes(up.config)
        ranks = {rank: rank for rank in prefixes}
        streams = (cast(TextIO, CurrentStream("stdout")), cast(TextIO, CurrentStream("stderr")))
        relay = OutputRelay(prefixes, *streams, line_sink=self.line_sink)
        renderer = cell_renderer(up.config.display_ranks, ranks, prefixes, relay.drain)
        chained = renderer.chain(self.user_on_event) if renderer is not None else None
        self.on_event = chained or self.user_on_event
        self.local = LocalRanks(up.config, "fork", ranks, relay, renderer, self.on_event)
        specs = [
            host_spec(up, rank, self.generation, renderer is not None, WorkerMode.POOL)
            for rank in self.ranks
        ]
        starter = job_starter(up, specs, relay.child_fds)
        relay.close_child_ends()
        relay.start()
        self.supervisor = Supervisor(specs, self._on_message, starter=starter)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.supervisor.start()
        self._wait_ready(timeout, deadline)

    def before_wait(self) -> None:
        """The ranks' memory, as their agents measured it, reaches the dashboard."""
        if self.ticker is None:
            self.ticker = MemoryTicker(lambda: self.up.agents if self.up else [], self.on_event)
        self.ticker.tick()

    def memory_elsewhere(self) -> dict[int, int]:
        """Rank -> RSS, as each host's agent measured it last."""
        agents = self.up.agents if self.up is not None else []
        return {rank: rss for rank, (rss, _) in latest(agents).items()}

    def check_alive(self) -> None:
        """As on one machine; a lost machine is named (``MachineLostError``)."""
        try:
            super().check_alive()
        except RankDied as died:
            lost = self.up.lost_error() if self.up is not None else None
            if lost is None:
                raise
            raise RankDied(lost, died.fates) from None

    def _release(self) -> None:
        try:
            super()._release()
        finally:
            if self.up is not None:
                self.up.close()
