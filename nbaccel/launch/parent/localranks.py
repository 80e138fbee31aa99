"""The one set-up path of this machine's ranks, for a launch's attempt and a pool's generation.

Both need the same things before a worker starts: each rank's launch variables, its output
prefix, the relay its output flows into, the renderer that draws its rich output in the cell,
and its :class:`WorkerSpec`; then the start itself, in the one order that is safe (fork before
the relay's reader thread exists).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from ...config.deepspeed import DeepSpeedConfig
from ...config.fsdp import FsdpConfig
from ...environment import (
    deepspeed_launch_variables,
    fsdp_launch_variables,
    launch_variables,
    user_thread_count,
)
from ..config import LaunchConfig
from ..nodes.meeting import Meeting, gloo_interface
from ..nodes.rendezvous import LOOPBACK
from ..prefix import format_prefix
from ..spec import WorkerMode, WorkerSpec
from .relay import OutputRelay
from .render import CellRenderer, cell_renderer
from .supervisor import Supervisor

__all__ = ["LocalRanks", "worker_env"]


@dataclass
class LocalRanks:
    """This machine's ranks of one launch attempt or pool generation, before and after start.

    Attributes:
        config: the validated settings.
        method: ``"fork"`` or ``"spawn"``.
        ranks: local rank -> global rank.
        relay: where the ranks' output goes (prefixed, whole lines).
        renderer: draws rank 0's (``display_ranks``') rich output in the cell; None outside a
            Jupyter kernel.
        on_event: the owner's ``on_event`` behind the renderer (display events drawn first).
    """

    config: LaunchConfig
    method: str
    ranks: dict[int, int]
    relay: OutputRelay
    renderer: CellRenderer | None
    on_event: Callable[[Any], None] | None

    @classmethod
    def prepare(
        cls,
        config: LaunchConfig,
        method: str,
        on_event: Callable[[Any], None] | None,
        line_sink: Callable[[int, str, str], None] | None,
        streams: tuple[TextIO, TextIO] | None = None,
    ) -> LocalRanks:
        """The relay and renderer of this machine's ranks (nothing is started yet)."""
        first = config.node_rank * config.num_processes
        ranks = {lr: first + lr for lr in range(config.num_processes)}
        prefixes = {
            lr: format_prefix(
                config.log_line_prefix_template, rank=r, local_rank=lr, node_rank=config.node_rank
            )
            for lr, r in ranks.items()
        }
        out, err = streams if streams is not None else (None, None)
        relay = OutputRelay(prefixes, out, err, line_sink=line_sink)
        renderer = cell_renderer(config.display_ranks, ranks, prefixes, relay.drain)
        chained = renderer.chain(on_event) if renderer is not None else on_event
        return cls(config, method, ranks, relay, renderer, chained)

    def spec(self, local_rank: int, env: dict[str, str], mode: WorkerMode) -> WorkerSpec:
        """The spec of one worker writing into the relay (a launch's caller sets its task)."""
        out_fd, err_fd = self.relay.child_fds(local_rank)
        return WorkerSpec(
            rank=self.ranks[local_rank],
            local_rank=local_rank,
            env=env,
            stdout_fd=out_fd,
            stderr_fd=err_fd,
            start_method=self.method,
            parent_pid=os.getpid(),
            num_threads=self.config.threads_per_process(user_thread_count()),
            sys_path=list(sys.path),
            cwd=os.getcwd(),
            display=self.renderer is not None,
            mode=mode,
        )

    def start(self, supervisor: Supervisor) -> None:
        """Start the workers, then the relay's reader (a fork must not copy its thread)."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        supervisor.start()
        self.relay.close_child_ends()
        self.relay.start()

    def close(self) -> None:
        """Stream what is left and stop drawing."""
        self.relay.close()
        if self.renderer is not None:
            self.renderer.close()


def worker_env(
    config: LaunchConfig,
    rank: int,
    local_rank: int,
    port: int,
    attempt: int,
    method: str,
    meeting: Meeting | None = None,
) -> dict[str, str]:
    """The launch variables of one worker (a launch's or a pool's)."""
    env = launch_variables(
        rank=rank,
        world_size=config.world_size,
        local_rank=local_rank,
        local_world_size=config.num_processes,
        node_rank=config.node_rank,
        master_addr=config.master_addr if config.multi_node else LOOPBACK,
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
    if meeting is None:
        env["GLOO_SOCKET_IFNAME"] = "lo"
    else:  # the interface that reaches the master, or the user's own choice
        env["GLOO_SOCKET_IFNAME"] = gloo_interface(meeting.route)
    return env
