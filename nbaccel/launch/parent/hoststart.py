"""What a launch and a pool on other machines (``hosts=[...]``) share: the agents, started and
checked before any rank starts, and each remote rank's spec, prefix, task pipe and start.

1. One agent per host over ssh, as a step of the SLURM job, or as a Ray actor's child on each
   node of a placement group (``rayagents.py``), all at once; each says hello
   (``hostlinks.AgentLink``).
2. Every host answered within ``connect_timeout`` and runs this kernel's Python major.minor,
   torch and nbaccel versions (``HostError`` naming the host); the hosts' GPUs decide the
   device (a mix is refused).
3. The ranks meet at the first host: ``MASTER_ADDR`` is the address ssh reached it at,
   ``MASTER_PORT`` the port of the socket its agent bound to that one address, where the
   agent serves torch's store; every key the ranks write there carries a secret prefix
   drawn for this attempt or generation (``NBACCEL_STORE_PREFIX``, in their environment).
4. Each host's ranks travel as one ``Job`` frame when the supervisor starts its first rank
   (:func:`job_starter`); a rank's task-pipe bytes (a pool's tasks, "where are you?") travel
   as ``Task`` frames and the agent writes them into the rank's pipe there (:class:`AgentTasks`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import torch

from ...environment import store_prefix_variables, user_thread_count, variables_for_hosts
from ...version import __version__
from ..agent.wire import Hello, Job, Task
from ..config import LaunchConfig
from ..nodes.peers import MachineLostError
from ..prefix import format_prefix
from ..slurmhosts import srun_argv
from ..spec import WorkerPipes, WorkerSpec
from ..supervision.supervisor import Starter, WorkerLink
from ..wire import dumps_for_worker
from .channels import ProcessChannel
from .hostlinks import AgentLink, Feed, HostError, RemoteLink, ssh_argv
from .localranks import worker_env
from .placement import RankWork
from .watch import where_note
from .wheretable import WhereTable

__all__ = [
    "AGENT_START_S",
    "AgentTasks",
    "HostAgents",
    "check_hello",
    "host_prefixes",
    "host_spec",
    "job_starter",
]

AGENT_START_S = 60.0  # importing torch on a cold host


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


@dataclasses.dataclass
class Started:
    """What one kind of host start made so far (closed by the caller on a failure)."""

    config: LaunchConfig  # with what the start decided (Ray: the nodes it took)
    agents: list[AgentLink] = dataclasses.field(default_factory=list)
    release: Callable[[], None] | None = None  # what else ends with the agents (Ray's group)
    via: str = ""  # "over ssh", "in SLURM job 42", "on the Ray cluster at ..."


def _process_agents(started: Started) -> None:
    """An agent per host as a local process: ``ssh host python -m ...`` or a SLURM step."""
    hosts = started.config.hosts
    assert hosts is not None
    python = hosts.python or sys.executable
    slurm = hosts.slurm_job
    started.via = f"in SLURM job {slurm}" if slurm is not None else "over ssh"
    for index, target in enumerate(hosts.targets):
        if slurm is not None:
            argv = srun_argv(slurm, target.host, python)
        else:
            argv = ssh_argv(target, python, hosts.connect_timeout)
        channel = ProcessChannel(argv, hosts.via)
        started.agents.append(AgentLink(index, target, channel, hosts.connect_timeout))


def _ray_agents(started: Started) -> None:
    """An agent per node of the Ray cluster, in an actor of a placement group."""
    from .rayagents import RayAgents  # imports Ray

    cluster, agents = RayAgents.start(started.config)  # releases what it made on a failure
    started.config, started.release, started.via = (
        cluster.config,
        cluster.release,
        cluster.describe(),
    )
    started.agents.extend(agents)


@dataclasses.dataclass
class HostAgents:
    """The agents of one attempt or pool generation, checked (see the module docstring).

    Attributes:
        config: the settings with the device the hosts decided (``accelerator``).
        agents: one per host, in ``hosts=`` order.
        master: the address of the first host, where the ranks meet.
        port: the port of the store's socket there.
        secret: the prefix of every key the ranks write to the store.
    """

    config: LaunchConfig
    agents: list[AgentLink]
    master: str
    port: int
    secret: str = dataclasses.field(default_factory=lambda: secrets.token_hex(16), repr=False)
    release: Callable[[], None] | None = None  # what else ends with the agents (Ray's group)
    via_text: str = ""

    @classmethod
    def start(cls, config: LaunchConfig) -> HostAgents:
        """Start and check every host's agent; on any failure the started ones are closed."""
        hosts = config.hosts
        assert hosts is not None
        started = Started(config)
        try:
            (_ray_agents if hosts.ray is not None else _process_agents)(started)
            deadline = time.monotonic() + hosts.connect_timeout + AGENT_START_S
            hellos = [agent.wait_hello(deadline) for agent in started.agents]
            for agent, hello in zip(started.agents, hellos, strict=True):
                check_hello(agent.target.entry, hello)
            checked = _with_devices(started.config, started.agents, hellos)
        except BaseException:
            for agent in started.agents:
                agent.close()
            if started.release is not None:
                started.release()
            raise
        master = hellos[0].address or started.agents[0].target.host
        return cls(
            checked,
            started.agents,
            master,
            hellos[0].port,
            release=started.release,
            via_text=started.via,
        )

    def agent_of(self, rank: int) -> AgentLink:
        """The agent that runs global ``rank``."""
        return self.agents[rank // self.config.num_processes]

    def describe(self) -> str:
        """``"4 processes on 2 machines (node1, node2; 2 each) over ssh (gloo)"``."""
        hosts = self.config.hosts
        assert hosts is not None
        names = ", ".join(a.target.entry for a in self.agents)
        backend = "gloo" if self.config.cpu else "nccl"
        return (
            f"{self.config.world_size} processes on {len(self.agents)} machines ({names}; "
            f"{self.config.num_processes} each) {self.via_text} ({backend})"
        )

    def lost_error(
        self, where: WhereTable | None = None, findings: Any = ()
    ) -> MachineLostError | None:
        """``MachineLostError`` naming the first machine lost (and where the ranks were), or
        None while every agent answers."""
        lost = [agent for agent in self.agents if agent.lost]
        if not lost:
            return None
        agent = lost[0]
        message = (
            f"machine {agent.index} ({agent.target.entry}) was lost: {agent.lost}. The "
            "ranks on every other machine were stopped. Check the machine and the network, "
            "then run the cell again."
        )
        if where is not None or findings:
            message += "\n\n" + where_note(where, f"when {agent.target.entry} was lost", findings)
        return MachineLostError(message, agent.index)

    def close(self) -> None:
        """End every agent (each kills what still runs there), then what they ran in."""
        for agent in self.agents:
            with contextlib.suppress(Exception):
                agent.close()
        if self.release is not None:
            with contextlib.suppress(Exception):
                self.release()


def host_prefixes(config: LaunchConfig) -> dict[int, str]:
    """Global rank -> the output prefix of that rank (with its host)."""
    hosts = config.hosts
    assert hosts is not None
    per_host = config.num_processes
    return {
        rank: format_prefix(
            config.log_line_prefix_template,
            rank=rank,
            local_rank=rank % per_host,
            node_rank=rank // per_host,
            host=hosts.host_of(rank, per_host),
        )
        for rank in range(config.world_size)
    }


def host_spec(up: HostAgents, rank: int, attempt: int, display: bool, work: RankWork) -> WorkerSpec:
    """The spec of one remote rank (its descriptors are its agent's to make, there)."""
    config = up.config
    hosts = config.hosts
    assert hosts is not None
    per_host = config.num_processes
    machine = dataclasses.replace(
        config,
        hosts=None,
        node_rank=rank // per_host,
        num_nodes=len(hosts.targets),
        master_addr=up.master,
    )
    env = variables_for_hosts()  # torch's, NCCL's, the trackers' switches of this kernel
    env.update(worker_env(machine, rank, rank % per_host, up.port, attempt, "fork", up.master))
    env.update(hosts.env)
    env.update(store_prefix_variables(up.secret))  # the user's env= cannot replace it
    return WorkerSpec(
        rank=rank,
        local_rank=rank % per_host,
        env=env,
        start_method="fork",  # each host's agent forks its ranks
        num_threads=config.threads_per_process(user_thread_count()),
        sys_path=list(sys.path),
        cwd=hosts.cwd or os.getcwd(),
        display=display,
        **work.spec_fields(),
    )


def job_starter(up: HostAgents, specs: list[WorkerSpec], feed: Feed) -> Starter:
    """The supervisor's ``starter`` for remote ranks: each rank gets a :class:`RemoteLink`
    whose output goes to ``feed`` (the relay's ``feed``); the first start on a host sends that
    host's ranks as one ``Job``, then each start waits until the agent reports the rank
    running."""
    hosts = up.config.hosts
    assert hosts is not None
    for spec in specs:
        agent = up.agent_of(spec.rank)
        agent.links[spec.rank] = RemoteLink(spec, agent, feed)
    sent: set[int] = set()

    def start(spec: WorkerSpec, pipes: WorkerPipes | None, foreign: tuple[int, ...]) -> WorkerLink:
        agent = up.agent_of(spec.rank)
        if agent.index not in sent:
            sent.add(agent.index)
            mine = [s for s in specs if up.agent_of(s.rank) is agent]
            job = Job(
                up.master,
                hosts.cwd or os.getcwd(),
                list(sys.path),
                up.config.node_timeout,
                store_world_size=len(specs) if agent.index == 0 else 0,
                store_timeout=up.config.rendezvous_timeout,
                specs=dumps_for_worker(mine),
            )
            agent.send_job(job)
        link = agent.links[spec.rank]
        link.wait_started(hosts.connect_timeout + AGENT_START_S)
        return link

    return start


class AgentTasks:
    """The task pipes of remote ranks (a ``TaskSender``): each write travels to the rank's
    agent as a :class:`Task` frame and the agent writes it into the rank's pipe there.
    ``up`` may be set after construction (a pool group's agents start with the group)."""

    def __init__(self, up: HostAgents | None) -> None:
        self.up = up

    def _agent(self, rank: int) -> AgentLink | None:
        return self.up.agent_of(rank) if self.up is not None else None

    @property
    def write_fds(self) -> tuple[int, ...]:
        return ()  # nothing local for a forked worker to keep out

    def send(self, data: bytes, ranks: Collection[int]) -> None:
        """Send to each rank (``OSError`` when a rank's machine is lost)."""
        for rank in ranks:
            agent = self._agent(rank)
            if agent is None or agent.lost is not None:
                why = f"was lost: {agent.lost}" if agent is not None else "is not started"
                raise OSError(f"the machine of rank {rank} {why}")
            agent.send(Task(rank, data))

    def send_quietly(self, data: bytes, ranks: Collection[int]) -> None:
        """:meth:`send`, leaving out the ranks whose machine is lost."""
        for rank in ranks:
            agent = self._agent(rank)
            if agent is not None and agent.lost is None:
                agent.send(Task(rank, data))

    def close(self) -> None:
        """Nothing of its own: the pipes end with their agents (``HostAgents.close``)."""


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
