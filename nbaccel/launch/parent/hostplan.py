"""One attempt of a launch on other machines (``hosts=[...]``), driven from this notebook.

1. One agent per host over ssh (``hostlinks.AgentLink``), all at once; each says hello.
2. Before any rank starts: every host answered within ``connect_timeout``, and runs this
   kernel's Python major.minor, torch and nbaccel versions (``HostError`` naming the host).
3. The ranks meet at the first host: ``MASTER_ADDR`` is the address ssh reached it at,
   ``MASTER_PORT`` a port its agent found free; rank 0 serves torch's store there. Each
   agent sets ``GLOO_SOCKET_IFNAME`` to its interface towards that address.
4. The launch group runs the ranks through ``RemoteLink``s (the supervisor's ``starter``);
   their output reaches the cell through the relay, prefixed with host and rank.
5. A machine lost mid-run ends the launch with ``MachineLostError`` naming it.
6. "Where are you?" reaches each rank through its agent (``AgentTasks`` below, a
   ``Task`` frame written into the rank's task pipe there); the answers come back with its
   messages, so stalls and the where table cover every host's ranks.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Collection
from typing import Any

import torch

from ...environment import user_thread_count
from ...version import __version__
from ..config import LaunchConfig
from ..nodes.peers import MachineLostError
from ..prefix import format_prefix
from ..slurmhosts import srun_argv
from ..spec import WorkerMode, WorkerSpec
from ..wire import dumps_for_worker
from .attempt import LaunchPlan
from .hostlinks import AgentLink, HostError, RemoteLink, ssh_argv
from .hostwire import Hello, Job, Task
from .launchgroup import LaunchGroup
from .localranks import worker_env
from .relay import OutputRelay
from .render import cell_renderer
from .supervisor import WorkerLink
from .watch import where_note

__all__ = ["HostsPlan", "check_hello"]

_AGENT_START_S = 60.0  # importing torch on a cold host


def check_hello(entry: str, hello: Hello) -> None:
    """Refuse a host whose Python, torch or nbaccel differs from this kernel's."""
    mine = {
        "Python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "torch": str(torch.__version__),
        "nbaccel": __version__,
    }
    theirs = {"Python": hello.python, "torch": hello.torch, "nbaccel": hello.nbaccel}
    wrong = [name for name in mine if mine[name] != theirs[name]]
    if wrong:
        there = ", ".join(f"{name} {theirs[name]}" for name in wrong)
        here = ", ".join(f"{name} {mine[name]}" for name in wrong)
        raise HostError(
            entry,
            f"{entry} runs {there}, but this notebook runs {here}. The ranks exchange pickled "
            "functions and results, so the versions must be the same: install them there, or "
            "name an interpreter that has them with python=.",
        )


@dataclasses.dataclass(frozen=True)
class HostsPlan(LaunchPlan):
    """A :class:`LaunchPlan` whose ranks run on ``config.hosts`` (see the module docstring)."""

    def run(self, attempt: int) -> list[Any]:
        hosts = self.config.hosts
        assert hosts is not None
        python = hosts.python or sys.executable
        agents: list[AgentLink] = []
        try:
            for index, target in enumerate(hosts.targets):
                if hosts.slurm_job is not None:
                    argv = srun_argv(hosts.slurm_job, target.host, python)
                else:
                    argv = ssh_argv(target, python, hosts.connect_timeout)
                agents.append(AgentLink(index, target, argv, hosts.connect_timeout, hosts.via))
            deadline = time.monotonic() + hosts.connect_timeout + _AGENT_START_S
            hellos = [agent.wait_hello(deadline) for agent in agents]
            for agent, hello in zip(agents, hellos, strict=True):
                check_hello(agent.target.entry, hello)
            config = _with_devices(self.config, agents, hellos)
            master = hellos[0].address or agents[0].target.host
            return self._run_hosts(config, attempt, agents, master, hellos[0].port)
        finally:
            for agent in agents:
                agent.close()

    def _run_hosts(
        self,
        config: LaunchConfig,
        attempt: int,
        agents: list[AgentLink],
        master: str,
        port: int,
    ) -> list[Any]:
        hosts = config.hosts
        assert hosts is not None
        per_host = config.num_processes
        if attempt == 0:
            names = ", ".join(a.target.entry for a in agents)
            backend = "gloo" if config.cpu else "nccl"
            via = "over ssh" if hosts.slurm_job is None else f"in SLURM job {hosts.slurm_job}"
            print(
                f"Launching {config.world_size} processes on {len(agents)} machines ({names}; "
                f"{per_host} each) {via} ({backend}); they meet at {master}:{port}.",
                flush=True,
            )
        ranks = {rank: rank for rank in range(config.world_size)}  # the relay's keys: ranks
        prefixes = {
            rank: format_prefix(
                config.log_line_prefix_template,
                rank=rank,
                local_rank=rank % per_host,
                node_rank=rank // per_host,
                host=hosts.host_of(rank, per_host),
            )
            for rank in ranks
        }
        relay = OutputRelay(prefixes, line_sink=self.line_sink)
        renderer = cell_renderer(config.display_ranks, ranks, prefixes, relay.drain)
        on_event = renderer.chain(self.on_event) if renderer is not None else self.on_event
        stop = threading.Event()
        try:
            specs = [
                self._spec(config, rank, master, port, attempt, renderer is not None)
                for rank in ranks
            ]
            for spec in specs:
                agent = agents[spec.rank // per_host]
                out_fd, err_fd = (os.dup(fd) for fd in relay.child_fds(spec.rank))
                agent.links[spec.rank] = RemoteLink(spec, agent, out_fd, err_fd)
            relay.close_child_ends()
            relay.start()
            jobs_sent: set[int] = set()

            def start(spec: WorkerSpec, foreign: tuple[int, ...]) -> WorkerLink:
                index = spec.rank // per_host
                agent = agents[index]
                if index not in jobs_sent:
                    jobs_sent.add(index)
                    mine = [s for s in specs if s.rank // per_host == index]
                    agent.send_job(
                        Job(
                            master,
                            hosts.cwd or os.getcwd(),
                            list(sys.path),
                            config.node_timeout,
                            dumps_for_worker(mine),
                        )
                    )
                link = agent.links[spec.rank]
                link.wait_started(hosts.connect_timeout + _AGENT_START_S)
                return link

            group = LaunchGroup(
                specs,
                on_event,
                config.monitor_interval,
                config.timeout,
                attempt=attempt,
                stop_requested=stop,
                on_wait=lambda: self._on_wait(stop, None),
                starter=start,
                pipes=AgentTasks({s.rank: agents[s.rank // per_host] for s in specs}),
                stall_timeout=config.stall_timeout,
                on_stall=config.on_stall,
            )
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            group.supervisor.start()
            outcome = group.run()
        finally:
            for agent in agents:
                agent.close()
            relay.close()
            if renderer is not None:
                renderer.close()
        for fate in outcome.fates:
            fate.host = hosts.host_of(fate.rank, per_host)
        lost = [agent for agent in agents if agent.lost]
        if lost:
            agent = lost[0]
            message = (
                f"machine {agent.index} ({agent.target.entry}) was lost: {agent.lost}. The "
                "ranks on every other machine were stopped. Check the machine and the network, "
                "then run the cell again."
            )
            if outcome.where is not None or outcome.findings:
                when = f"when {agent.target.entry} was lost"
                message += "\n\n" + where_note(outcome.where, when, outcome.findings)
            raise MachineLostError(message, agent.index)
        return self._results(outcome, specs, 0, None)

    def _spec(
        self,
        config: LaunchConfig,
        rank: int,
        master: str,
        port: int,
        attempt: int,
        display: bool,
    ) -> WorkerSpec:
        hosts = config.hosts
        assert hosts is not None
        per_host = config.num_processes
        machine = dataclasses.replace(
            config,
            hosts=None,
            node_rank=rank // per_host,
            num_nodes=len(hosts.targets),
            master_addr=master,
        )
        env = worker_env(machine, rank, rank % per_host, port, attempt, "fork")
        del env["TORCHELASTIC_USE_AGENT_STORE"]  # rank 0 serves the store on the first host
        del env["GLOO_SOCKET_IFNAME"]  # each agent names its interface towards the master
        env.update(hosts.env)
        spec = WorkerSpec(
            rank=rank,
            local_rank=rank % per_host,
            env=env,
            stdout_fd=-1,
            stderr_fd=-1,
            start_method="fork",
            parent_pid=0,  # the agent's, set there
            num_threads=config.threads_per_process(user_thread_count()),
            sys_path=list(sys.path),
            cwd=hosts.cwd or os.getcwd(),
            display=display,
            mode=WorkerMode.LAUNCH,
        )
        spec.function, spec.args, spec.kwargs = self.function, self.args, self.kwargs
        return spec


class AgentTasks:
    """The task pipes of remote ranks (a ``TaskSender``): each write travels to the rank's
    agent as a :class:`Task` frame and the agent writes it into the rank's pipe there."""

    def __init__(self, agent_of: dict[int, AgentLink]) -> None:
        self.agent_of = agent_of

    @property
    def write_fds(self) -> tuple[int, ...]:
        return ()  # nothing local for a forked worker to keep out

    def send_quietly(self, data: bytes, ranks: Collection[int]) -> None:
        for rank in ranks:
            agent = self.agent_of.get(rank)
            if agent is not None and agent.lost is None:
                agent.send(Task(rank, data))


def _with_devices(
    config: LaunchConfig, agents: list[AgentLink], hellos: list[Hello]
) -> LaunchConfig:
    """CUDA where every host has ``num_processes`` GPUs (and ``cpu=True`` was not passed),
    the CPU where none has any; a mix is refused."""
    hosts = config.hosts
    assert hosts is not None
    if hosts.cpu or all(h.gpus == 0 for h in hellos):
        return dataclasses.replace(config, accelerator="cpu")
    short = [
        a.target.entry for a, h in zip(agents, hellos, strict=True) if h.gpus < config.num_processes
    ]
    if short:
        raise HostError(
            short[0],
            f"num_processes={config.num_processes} per machine, but {', '.join(short)} "
            f"{'has' if len(short) == 1 else 'have'} fewer GPUs; use a smaller num_processes, "
            "or cpu=True to run every rank on the CPU.",
        )
    return dataclasses.replace(config, accelerator="cuda")
