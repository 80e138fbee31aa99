"""The placement of ranks on this machine: child processes of the notebook, forked or spawned.

Before a worker starts it needs its launch variables (:func:`worker_env`), its output prefix,
the relay its output flows into, the renderer that draws its rich output in the cell, its task
pipe and its ``WorkerSpec``; the ranks meet at a store this placement hosts on loopback, or,
with ``num_nodes > 1``, at the store of the machines' meeting. The start runs in the one order
that is safe: fork before the relay's reader thread exists.
"""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import timedelta

from ...config.deepspeed import DeepSpeedConfig
from ...config.fsdp import FsdpConfig
from ...environment import (
    deepspeed_launch_variables,
    fsdp_launch_variables,
    launch_variables,
    user_thread_count,
)
from ..config import LaunchConfig
from ..location import CollectiveCall
from ..nodes.meeting import Meeting, gloo_interface
from ..nodes.rendezvous import LOOPBACK, StoreHost
from ..notes import NotePage
from ..prefix import format_prefix
from ..spec import WorkerPipes, WorkerSpec
from ..supervision.supervisor import Supervisor
from .banner import banner
from .placement import Placement, PlaceRequest
from .preloads import preload_for_fork
from .relay import OutputRelay
from .render import cell_renderer
from .taskpipes import TaskPipes

__all__ = ["ThisMachine", "worker_env"]


class ThisMachine(Placement):
    """This machine's ranks of one launch attempt or pool generation.

    Args:
        request: what to place (``placement.PlaceRequest``).
        meeting: the machines' meeting of a ``num_nodes > 1`` launch (None: this placement
            hosts the store on loopback).
    """

    def __init__(self, request: PlaceRequest, meeting: Meeting | None = None) -> None:
        self.method = method = request.method
        self.store: StoreHost | None = None
        self.notes: dict[int, NotePage] = {}  # rank -> the page it notes its collectives in
        config = request.config
        if meeting is None:
            wait_for = timedelta(seconds=config.rendezvous_timeout)
            self.store = StoreHost(LOOPBACK, config.use_port or 0, config.world_size, wait_for)
            port = self.store.port
        else:
            config, port = meeting.config, meeting.port
        try:
            first = config.node_rank * config.num_processes
            ranks = {lr: first + lr for lr in range(config.num_processes)}
            prefixes = {
                lr: format_prefix(
                    config.log_line_prefix_template,
                    rank=r,
                    local_rank=lr,
                    node_rank=config.node_rank,
                )
                for lr, r in ranks.items()
            }
            out, err = request.streams if request.streams is not None else (None, None)
            relay = OutputRelay(prefixes, out, err, line_sink=request.line_sink)
            renderer = cell_renderer(config.display_ranks, ranks, prefixes, relay.drain)
            on_event = request.on_event
            chained = renderer.chain(on_event) if renderer is not None else on_event
            pipes = TaskPipes(ranks.values())
        except BaseException:
            if self.store is not None:
                self.store.close()
            raise
        # gloo's interface: loopback, or the one that reaches the master (or the user's own)
        interface = "lo" if meeting is None else gloo_interface(meeting.route)
        specs, fds = [], {}
        for lr, rank in ranks.items():
            env = worker_env(config, rank, lr, port, request.attempt, method)
            env["GLOO_SOCKET_IFNAME"] = interface
            specs.append(
                WorkerSpec(
                    rank=rank,
                    local_rank=lr,
                    env=env,
                    start_method=method,
                    num_threads=config.threads_per_process(user_thread_count()),
                    sys_path=list(sys.path),
                    cwd=os.getcwd(),
                    display=renderer is not None,
                    **request.work.spec_fields(),
                )
            )
            out_fd, err_fd = relay.child_fds(lr)
            self.notes[rank] = note = NotePage.create()
            task_fd = pipes.read_fd(rank)
            fds[rank] = WorkerPipes(out_fd, err_fd, os.getpid(), task_fd, note_fd=note.fd)
        super().__init__(config, specs, relay, renderer, chained, pipes, fds)
        self._task_pipes = pipes

    def announce(self, verb: str) -> str:
        return banner(self.config, self.method, verb)

    def start(self, supervisor: Supervisor) -> None:
        """Start the workers, then the relay's reader (a fork must not copy its thread)."""
        self._flush()
        if self.method == "fork":  # what every rank would import for itself, once here
            preload_for_fork(display=any(spec.display for spec in self.specs))
        try:
            supervisor.start()
            self.relay.close_child_ends()
            self.relay.start()
        finally:
            self._task_pipes.close_child_ends()
            for note in self.notes.values():  # each worker has its own; the map stays here
                note.close_fd()

    def collective_of(self, rank: int) -> CollectiveCall | None:
        note = self.notes.get(rank)
        return note.read() if note is not None else None

    def close(self) -> None:
        """Close the task pipes, stream what output is left, stop drawing, end the store."""
        try:
            self.pipes.close()
            self.relay.close()
            if self.renderer is not None:
                self.renderer.close()
        finally:
            for note in self.notes.values():
                note.close()
            if self.store is not None:
                with contextlib.suppress(Exception):
                    self.store.close()


def worker_env(
    config: LaunchConfig,
    rank: int,
    local_rank: int,
    port: int,
    attempt: int,
    method: str,
    master_addr: str | None = None,
) -> dict[str, str]:
    """The launch variables of one worker (a launch's or a pool's, here or on a host; gloo's
    interface is the placement's to add). The ranks meet at ``master_addr`` where given (the
    first host, however many there are), else at the config's for several machines, else on
    the loopback."""
    if master_addr is None:
        master_addr = config.master_addr if config.multi_node else LOOPBACK
    env = launch_variables(
        rank=rank,
        world_size=config.world_size,
        local_rank=local_rank,
        local_world_size=config.num_processes,
        node_rank=config.node_rank,
        master_addr=master_addr,
        master_port=port,
        restart_count=attempt,
        fork_launched=method == "fork",
        mixed_precision=config.mixed_precision,
        debug=config.debug,
        use_cpu=config.cpu,
        precision_warned=config.precision_falls_back,  # LaunchConfig.build warned already
    )
    if config.fsdp_config is not None:  # the config file in force asks for FSDP
        fsdp = FsdpConfig(config.fsdp_config).for_processes(config.cpu)
        env.update(fsdp_launch_variables(fsdp))
    if config.deepspeed_config is not None:  # the config file in force asks for DeepSpeed
        settings = DeepSpeedConfig(config.deepspeed_config).launch_settings()
        env.update(deepspeed_launch_variables(settings))
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # the launcher hosts the store
    return env
