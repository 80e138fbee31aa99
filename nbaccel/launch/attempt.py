"""One attempt of a multi-process launch: rendezvous, start the group, collect the results."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import cloudpickle

from ..environment import (
    fsdp_launch_variables,
    hardware_description,
    launch_variables,
    user_thread_count,
)
from .config import LaunchConfig
from .errors import LaunchTimeoutError, build_error, format_fates, root_cause
from .output import OutputRelay, format_prefix
from .processes import GroupOutcome, WorkerGroup
from .render import cell_renderer
from .rendezvous import LOOPBACK, C10dRendezvous, StoreHost, join_nodes
from .spec import WorkerSpec

__all__ = ["LaunchPlan", "banner"]


def banner(config: LaunchConfig, method: str) -> str:
    """The line printed before the workers start: how many, on what hardware, how."""
    backend = "gloo" if config.cpu else "nccl"
    where = hardware_description(gpus=not config.cpu)
    nodes = f" on node {config.node_rank} of {config.num_nodes}" if config.multi_node else ""
    precision = ""
    if config.mixed_precision != "no":
        precision = f", mixed precision {config.mixed_precision}"
    count = config.num_processes
    if config.fsdp_config is not None:
        from ..config.fsdp import FsdpConfig

        precision += f", FSDP ({FsdpConfig(config.fsdp_config).describe(config.cpu)})"
    return f"Launching {count} processes on {where}{nodes} with {method} ({backend}){precision}."


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """What to run and how; :meth:`run` carries out one attempt.

    Attributes:
        function: the function every worker runs.
        args: its positional arguments.
        kwargs: its keyword arguments.
        config: the validated launcher settings.
        method: ``"fork"`` or ``"spawn"``.
        on_event: receives worker events in the launcher's process.
        line_sink: also receives every whole output line as ``(local_rank, stream, line)``
            (see :class:`OutputRelay`).
        stop_requested: set it to stop every rank (see :class:`WorkerGroup`).
        on_started: receives ``{global rank: pid}`` once the workers of an attempt started.
        on_wait: called between the supervisor's waits (see :class:`WorkerGroup`).
    """

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    config: LaunchConfig
    method: str
    on_event: Callable[[Any], None] | None = None
    line_sink: Callable[[int, str, str], None] | None = None
    stop_requested: threading.Event | None = None
    on_started: Callable[[dict[int, int]], None] | None = None
    on_wait: Callable[[], None] | None = None

    def run(self, attempt: int) -> list[Any]:
        """Meet the other machines (if any), run the group, return the local results."""
        config = self.config
        wait_for = timedelta(seconds=config.rendezvous_timeout)
        if config.multi_node and config.rdzv_backend == "c10d":
            endpoint = config.rdzv_endpoint or (config.master_addr, int(config.use_port or 0))
            rdzv = C10dRendezvous(
                endpoint, config.rdzv_id, config.num_nodes, config.rdzv_conf, wait_for
            )
            try:
                joined = dataclasses.replace(
                    config, node_rank=rdzv.node_rank, master_addr=rdzv.master_addr
                )
                return self._run_group(joined, attempt, rdzv.master_port)
            finally:
                rdzv.close()
        host: StoreHost | None = None
        if config.node_rank == 0:
            bind = LOOPBACK if not config.multi_node else "0.0.0.0"
            host = StoreHost(bind, config.use_port or 0, config.world_size, wait_for)
        port = host.port if host is not None else int(config.use_port or 0)
        try:
            if config.multi_node:
                join_nodes(
                    config.master_addr, port, config.node_rank, config.num_nodes, wait_for, attempt
                )
            return self._run_group(config, attempt, port)
        finally:
            if host is not None:
                host.close()

    def _run_group(self, config: LaunchConfig, attempt: int, port: int) -> list[Any]:
        if attempt == 0:
            print(banner(config, self.method), flush=True)
        first_rank = config.node_rank * config.num_processes
        ranks = {lr: first_rank + lr for lr in range(config.num_processes)}
        prefixes = {
            lr: format_prefix(
                config.log_line_prefix_template, rank=r, local_rank=lr, node_rank=config.node_rank
            )
            for lr, r in ranks.items()
        }
        relay = OutputRelay(prefixes, line_sink=self.line_sink)
        renderer = cell_renderer(config.display_ranks, ranks, prefixes, relay.drain)
        on_event = renderer.chain(self.on_event) if renderer is not None else self.on_event
        try:
            specs = [self._spec(config, attempt, port, r, lr, relay) for lr, r in ranks.items()]
            for spec in specs:
                spec.display = renderer is not None
            group = WorkerGroup(
                specs,
                on_event,
                config.monitor_interval,
                config.timeout,
                attempt=attempt,
                stop_requested=self.stop_requested,
                on_started=self.on_started,
                on_wait=self.on_wait,
            )
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            group.start()  # fork before the relay's reader thread exists
            relay.close_child_ends()
            relay.start()
            outcome = group.run()
        finally:
            relay.close()
            if renderer is not None:
                renderer.close()
        return self._results(outcome, specs, first_rank)

    def _results(self, outcome: GroupOutcome, specs: list[WorkerSpec], first: int) -> list[Any]:
        if outcome.timed_out:
            late = [f.rank for f in outcome.fates if f.state == "timed out"]
            raise LaunchTimeoutError(
                late[0] if late else -1,
                late[0] - first if late else -1,
                "timeout",
                f"rank(s) {late} were still running after timeout={self.config.timeout}s and "
                "were stopped. Raise timeout=, or look for a rank waiting in a collective that "
                "another rank never reached.",
                "",
                outcome.fates,
            )
        cause = root_cause(outcome.fates)
        if cause is not None:
            raise build_error(cause, outcome.fates)
        missing = [s.rank for s in specs if s.rank not in outcome.results]
        if missing:
            table = format_fates(outcome.fates)
            raise RuntimeError(f"rank(s) {missing} ended without a result:\n{table}")
        return [cloudpickle.loads(outcome.results[s.rank]) for s in specs]

    def _spec(
        self,
        config: LaunchConfig,
        attempt: int,
        port: int,
        rank: int,
        local_rank: int,
        relay: OutputRelay,
    ) -> WorkerSpec:
        out_fd, err_fd = relay.child_fds(local_rank)
        return WorkerSpec(
            function=self.function,
            args=self.args,
            kwargs=self.kwargs,
            rank=rank,
            local_rank=local_rank,
            env=self._env(config, rank, local_rank, port, attempt),
            stdout_fd=out_fd,
            stderr_fd=err_fd,
            result_fd=-1,
            start_method=self.method,
            parent_pid=os.getpid(),
            num_threads=config.threads_per_process(user_thread_count()),
            sys_path=list(sys.path),
            cwd=os.getcwd(),
        )

    def _env(
        self, config: LaunchConfig, rank: int, local_rank: int, port: int, attempt: int
    ) -> dict[str, str]:
        env = launch_variables(
            rank=rank,
            world_size=config.world_size,
            local_rank=local_rank,
            local_world_size=config.num_processes,
            node_rank=config.node_rank,
            master_addr=config.master_addr if config.multi_node else LOOPBACK,
            master_port=port,
            restart_count=attempt,
            fork_launched=self.method == "fork",
            mixed_precision=config.mixed_precision,
            debug=config.debug,
            use_cpu=config.cpu,
        )
        if config.fsdp_config is not None:  # the config file in force asks for FSDP
            from ..config.fsdp import FsdpConfig

            fsdp = FsdpConfig(config.fsdp_config).for_processes(config.cpu)
            env.update(fsdp_launch_variables(fsdp))
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # the launcher hosts the store
        if not config.multi_node:
            env["GLOO_SOCKET_IFNAME"] = "lo"
        return env
