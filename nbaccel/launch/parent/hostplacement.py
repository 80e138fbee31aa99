"""The placement of ranks on other machines (``hosts=[...]``, ``hosts="slurm"``), for a launch's
attempt and a pool's generation alike.

The agents are started and checked first, as ``hoststart.py`` says (a failure there closes
the agents already started and raises before any rank exists). Each rank is then a
``RemoteLink`` started through its host's agent (:func:`hoststart.job_starter`); its output
reaches the cell through the relay, prefixed with host and rank; its task-pipe bytes travel as
``Task`` frames (:class:`hoststart.AgentTasks`). Before each wait the ranks' memory, as the
agents measured it, reaches the dashboard; a machine that goes silent or whose connection
closes is named by :meth:`OnHosts.lost` as ``MachineLostError``.
"""

from __future__ import annotations

import contextlib

from ..location import CollectiveCall
from ..nodes.peers import MachineLostError
from ..supervision.supervisor import Starter, Supervisor
from .hoststart import AgentTasks, HostAgents, host_prefixes, host_spec, job_starter
from .hostusage import MemoryTicker, latest
from .placement import Placement, PlaceRequest
from .relay import OutputRelay
from .render import cell_renderer
from .stalls import Finding
from .wheretable import WhereTable

__all__ = ["OnHosts"]


class OnHosts(Placement):
    """The ranks of one attempt or generation on ``config.hosts`` (see the module docstring);
    ``request`` says what to place (``placement.PlaceRequest``)."""

    remote = True

    def __init__(self, request: PlaceRequest) -> None:
        self.up = up = HostAgents.start(request.config)
        try:
            config = up.config  # with the device the hosts decided
            prefixes = host_prefixes(config)
            out, err = request.streams if request.streams is not None else (None, None)
            relay = OutputRelay(prefixes, out, err, line_sink=request.line_sink, fed=True)
            ranks = {rank: rank for rank in prefixes}  # the relay's keys: global ranks
            renderer = cell_renderer(config.display_ranks, ranks, prefixes, relay.drain)
            on_event = request.on_event
            chained = renderer.chain(on_event) if renderer is not None else on_event
            display = renderer is not None
            specs = [host_spec(up, r, request.attempt, display, request.work) for r in ranks]
            self._starter = job_starter(up, specs, relay.feed)
        except BaseException:
            up.close()
            raise
        super().__init__(config, specs, relay, renderer, chained, AgentTasks(up))
        self.ticker = MemoryTicker(lambda: up.agents, chained)

    @property
    def starter(self) -> Starter:
        return self._starter

    def announce(self, verb: str) -> str:
        return f"{verb} {self.up.describe()}; they meet at {self.up.master}:{self.up.port}."

    def start(self, supervisor: Supervisor) -> None:
        """Start each rank via its agent (the relay has no pipes: the agents' readers feed it)."""
        self._flush()
        supervisor.start()

    def before_wait(self) -> None:
        """The ranks' memory, as their agents measured it, reaches the dashboard."""
        self.ticker.tick()

    def lost(
        self, where: WhereTable | None = None, findings: list[Finding] | tuple[()] = ()
    ) -> MachineLostError | None:
        return self.up.lost_error(where, findings)

    def collective_of(self, rank: int) -> CollectiveCall | None:
        """What the rank's agent read from its note page when it ended."""
        link = self.up.agent_of(rank).links.get(rank)
        return link.collective if link is not None else None

    def host_of(self, rank: int) -> str:
        hosts = self.config.hosts
        assert hosts is not None
        return hosts.host_of(rank, self.config.num_processes)

    def memory_elsewhere(self) -> dict[int, int]:
        """Rank -> RSS, as each host's agent measured it last."""
        return {rank: rss for rank, (rss, _) in latest(self.up.agents).items()}

    def close(self) -> None:
        """End every agent (each kills what still runs there), then the relay and renderer."""
        try:
            self.up.close()
        finally:
            with contextlib.suppress(Exception):
                self.relay.close()
            if self.renderer is not None:
                self.renderer.close()
