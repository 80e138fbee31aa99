"""One attempt of a launch on other machines (``hosts=[...]``), driven from this notebook.

The agents are started and checked, and the remote ranks built, as ``hoststart.py`` says;
here the attempt runs them: an unchanged :class:`LaunchGroup` whose supervisor starts each rank
through its host's agent, their output reaching the cell through the relay, prefixed with
host and rank. A machine lost mid-run ends the launch with ``MachineLostError`` naming it.
"Where are you?" reaches each rank through its agent (``AgentTasks``); the answers come back
with its messages, so stalls and the where table cover every host's ranks.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any

from ..spec import WorkerMode
from .attempt import LaunchPlan
from .hoststart import AgentTasks, HostAgents, host_prefixes, host_spec, job_starter
from .hostusage import MemoryTicker
from .launchgroup import LaunchGroup
from .relay import OutputRelay
from .render import cell_renderer

__all__ = ["HostsPlan"]


@dataclasses.dataclass(frozen=True)
class HostsPlan(LaunchPlan):
    """A :class:`LaunchPlan` whose ranks run on ``config.hosts`` (see the module docstring)."""

    def run(self, attempt: int) -> list[Any]:
        up = HostAgents.start(self.config)
        try:
            return self._run_hosts(up, attempt)
        finally:
            up.close()

    def _run_hosts(self, up: HostAgents, attempt: int) -> list[Any]:
        config = up.config
        hosts = config.hosts
        assert hosts is not None
        per_host = config.num_processes
        if attempt == 0:
            print(f"Launching {up.describe()}; they meet at {up.master}:{up.port}.", flush=True)
        prefixes = host_prefixes(config)
        ranks = {rank: rank for rank in prefixes}  # the relay's keys: ranks
        relay = OutputRelay(prefixes, line_sink=self.line_sink)
        renderer = cell_renderer(config.display_ranks, ranks, prefixes, relay.drain)
        on_event = renderer.chain(self.on_event) if renderer is not None else self.on_event
        stop = threading.Event()
        ticker = MemoryTicker(lambda: up.agents, on_event)

        def waiting() -> None:
            ticker.tick()  # the ranks' memory, as their agents measured it
            self._on_wait(stop, None)

        try:
            specs = []
            for rank in ranks:
                spec = host_spec(up, rank, attempt, renderer is not None, WorkerMode.LAUNCH)
                spec.function, spec.args, spec.kwargs = self.function, self.args, self.kwargs
                specs.append(spec)
            starter = job_starter(up, specs, relay.child_fds)
            relay.close_child_ends()
            relay.start()
            group = LaunchGroup(
                specs,
                on_event,
                config.monitor_interval,
                config.timeout,
                attempt=attempt,
                stop_requested=stop,
                on_wait=waiting,
                starter=starter,
                pipes=AgentTasks(up),
                stall_timeout=config.stall_timeout,
                on_stall=config.on_stall,
            )
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            group.supervisor.start()
            outcome = group.run()
        finally:
            up.close()
            relay.close()
            if renderer is not None:
                renderer.close()
        for fate in outcome.fates:
            fate.host = hosts.host_of(fate.rank, per_host)
        lost = up.lost_error(outcome.where, outcome.findings)
        if lost is not None:
            raise lost
        return self._results(outcome, specs, 0, None)
