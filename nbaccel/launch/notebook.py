"""notebook_launcher and debug_launcher: validate, choose, delegate."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import cloudpickle
import torch.distributed as dist

from ..environment import hardware_description, launch_variables, user_thread_count
from ..state.registry import STATE, reset_registry
from .config import LaunchConfig
from .errors import LaunchTimeoutError, build_error, format_fates, root_cause
from .events import RankStateEvent, emit
from .guard import check_fork_safe, cuda_initialized, install_cuda_init_tracer
from .output import OutputRelay, format_prefix
from .processes import WorkerGroup
from .rendezvous import LOOPBACK, C10dRendezvous, StoreHost, join_nodes
from .spec import WorkerSpec

__all__ = ["debug_launcher", "notebook_launcher"]

install_cuda_init_tracer()


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    num_processes: int | None = None,
    mixed_precision: str | None = None,
    use_port: int | str | None = None,
    master_addr: str | None = None,
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
    *,
    start_method: str = "auto",
    timeout: float | None = None,
    rendezvous_timeout: float = 300.0,
    cpu: bool | None = None,
    debug: bool | None = None,
    kwargs: dict[str, Any] | None = None,
    on_event: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run ``function(*args)`` on ``num_processes`` processes of this machine and return
    the list of their return values, indexed by local process index.

    See ``docs/launcher.md`` for every option; new options are keyword-only.

    Raises:
        ValueError / TypeError: a bad argument (nothing was started).
        CudaInitializedError: fork was asked for after CUDA was initialised in this process.
        WorkerError: a rank failed (the original exception is raised where it can be rebuilt,
            with the WorkerError as its cause).
        KeyboardInterrupt: the kernel was interrupted; every worker was stopped first.
    """
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}.")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of arguments, got {type(args).__name__}.")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict or None, got {type(kwargs).__name__}.")
    config = LaunchConfig.build(
        num_processes=num_processes,
        mixed_precision=mixed_precision,
        use_port=use_port,
        master_addr=master_addr,
        node_rank=node_rank,
        num_nodes=num_nodes,
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_conf=rdzv_conf,
        rdzv_id=rdzv_id,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        log_line_prefix_template=log_line_prefix_template,
        start_method=start_method,
        timeout=timeout,
        rendezvous_timeout=rendezvous_timeout,
        cpu=cpu,
        debug=debug,
    )
    _refuse_existing_state()
    call_args, call_kwargs = tuple(args), dict(kwargs or {})
    if config.accelerator == "xla":
        from .xla import launch_xla

        return launch_xla(function, call_args, call_kwargs, config)
    if config.num_processes == 1 and not config.multi_node:
        return _with_restarts(
            lambda attempt: [
                _run_here(function, call_args, call_kwargs, config, attempt, on_event)
            ],
            config,
            restartable=lambda exc: True,
        )
    method = _start_method(config)
    return _with_restarts(
        lambda attempt: _run_attempt(
            function, call_args, call_kwargs, config, method, attempt, on_event
        ),
        config,
        restartable=_is_rank_failure,
    )


def debug_launcher(
    function: Callable[..., Any], args: tuple[Any, ...] = (), num_processes: int = 2
) -> list[Any]:
    """Run ``function(*args)`` on ``num_processes`` CPU processes (for tests and debugging)."""
    return notebook_launcher(function, args, num_processes=num_processes, cpu=True)


# -- helpers ---------------------------------------------------------------------------------


def _with_restarts(
    run_once: Callable[[int], list[Any]],
    config: LaunchConfig,
    restartable: Callable[[BaseException], bool],
) -> list[Any]:
    """Run attempt 0, 1, ... until one succeeds or ``max_restarts`` are used up."""
    for attempt in range(config.max_restarts + 1):
        try:
            return run_once(attempt)
        except Exception as exc:
            if attempt >= config.max_restarts or not restartable(exc):
                raise
            _announce_restart(exc, attempt, config)
    raise AssertionError("unreachable")  # pragma: no cover


def _is_rank_failure(exc: BaseException) -> bool:
    from .errors import WorkerError

    return isinstance(exc.__cause__, WorkerError) or isinstance(exc, WorkerError)


def _announce_restart(exc: BaseException, attempt: int, config: LaunchConfig) -> None:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    print(
        f"nbaccel: attempt {attempt + 1} failed ({type(exc).__name__}: {first}); restarting "
        f"the group ({attempt + 1}/{config.max_restarts} restarts used).",
        file=sys.stderr,
        flush=True,
    )


def _refuse_existing_state() -> None:
    if STATE.accelerator is not None:
        raise ValueError(
            "An Accelerator (or AcceleratorState) already exists in this kernel, so the "
            "launched processes could not set up their own. Create the Accelerator inside the "
            "function you launch, then restart the kernel (or call "
            "nbaccel.testing.reset_state()) and launch again."
        )
    if dist.is_available() and dist.is_initialized():
        raise ValueError(
            "A torch.distributed process group is already initialised in this kernel; the "
            "launched processes must create their own. Restart the kernel and keep "
            "init_process_group (or Accelerator()) inside the launched function."
        )


def _start_method(config: LaunchConfig) -> str:
    if config.start_method == "fork":
        check_fork_safe(config.debug)
        return "fork"
    if config.start_method == "spawn":
        return "spawn"
    if sys.platform.startswith("linux") and not cuda_initialized():
        return "fork"
    return "spawn"


def _banner(config: LaunchConfig, method: str) -> str:
    backend = "gloo" if config.cpu else "nccl"
    where = hardware_description(gpus=not config.cpu)
    nodes = f" on node {config.node_rank} of {config.num_nodes}" if config.multi_node else ""
    precision = (
        f", mixed precision {config.mixed_precision}" if config.mixed_precision != "no" else ""
    )
    count = config.num_processes
    return f"Launching {count} processes on {where}{nodes} with {method} ({backend}){precision}."


@contextlib.contextmanager
def _launch_variables_here(config: LaunchConfig, attempt: int) -> Iterator[None]:
    """For one process run in the kernel: expose the launcher's choices, then restore."""
    saved = dict(os.environ)
    os.environ["NBACCEL_MIXED_PRECISION"] = config.mixed_precision
    os.environ["NBACCEL_USE_CPU"] = "1" if config.cpu else "0"
    os.environ["NBACCEL_RESTART_COUNT"] = str(attempt)
    try:
        yield
    finally:
        STATE.event_sink = None
        os.environ.clear()
        os.environ.update(saved)


def _run_here(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
    attempt: int,
    on_event: Callable[[Any], None] | None,
) -> Any:
    """One process: run in the kernel itself, with the same variables and events as workers."""
    with _launch_variables_here(config, attempt):
        STATE.event_sink, STATE.worker_rank = on_event, 0
        emit(RankStateEvent(rank=0, state="running", restart_count=attempt))
        try:
            result = function(*args, **kwargs)
        except BaseException:
            emit(RankStateEvent(rank=0, state="failed", restart_count=attempt))
            raise
        finally:
            reset_registry()  # the next launch in this kernel starts afresh
        emit(RankStateEvent(rank=0, state="returned", restart_count=attempt))
        STATE.event_sink = None
        return result


def _worker_env(
    config: LaunchConfig, rank: int, local_rank: int, port: int, attempt: int, forked: bool
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
        fork_launched=forked,
        mixed_precision=config.mixed_precision,
        debug=config.debug,
        use_cpu=config.cpu,
    )
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # the launcher hosts the store
    if not config.multi_node:
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def _run_attempt(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
    method: str,
    attempt: int,
    on_event: Callable[[Any], None] | None,
) -> list[Any]:
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
            return _run_group(
                function, args, kwargs, joined, method, attempt, rdzv.master_port, on_event
            )
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
        return _run_group(function, args, kwargs, config, method, attempt, port, on_event)
    finally:
        if host is not None:
            host.close()


def _build_specs(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
    method: str,
    attempt: int,
    port: int,
    ranks: dict[int, int],
    relay: OutputRelay,
) -> list[WorkerSpec]:
    threads = config.threads_per_process(user_thread_count())
    specs = []
    for local_rank, rank in ranks.items():
        out_fd, err_fd = relay.child_fds(local_rank)
        specs.append(
            WorkerSpec(
                function=function,
                args=args,
                kwargs=kwargs,
                rank=rank,
                local_rank=local_rank,
                env=_worker_env(config, rank, local_rank, port, attempt, method == "fork"),
                stdout_fd=out_fd,
                stderr_fd=err_fd,
                result_fd=-1,
                start_method=method,
                parent_pid=os.getpid(),
                num_threads=threads,
                sys_path=list(sys.path),
                cwd=os.getcwd(),
            )
        )
    return specs


def _run_group(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
    method: str,
    attempt: int,
    port: int,
    on_event: Callable[[Any], None] | None,
) -> list[Any]:
    if attempt == 0:
        print(_banner(config, method), flush=True)
    first_rank = config.node_rank * config.num_processes
    ranks = {lr: first_rank + lr for lr in range(config.num_processes)}
    prefixes = {
        lr: format_prefix(
            config.log_line_prefix_template, rank=r, local_rank=lr, node_rank=config.node_rank
        )
        for lr, r in ranks.items()
    }
    relay = OutputRelay(prefixes)
    try:
        specs = _build_specs(function, args, kwargs, config, method, attempt, port, ranks, relay)
        group = WorkerGroup(
            specs, on_event, config.monitor_interval, config.timeout, attempt=attempt
        )
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        group.start()  # fork before the relay's reader thread exists
        relay.close_child_ends()
        relay.start()
        outcome = group.run()
    finally:
        relay.close()
    if outcome.timed_out:
        late = [f.rank for f in outcome.fates if f.state == "timed out"]
        raise LaunchTimeoutError(
            late[0] if late else -1,
            late[0] - first_rank if late else -1,
            "timeout",
            f"rank(s) {late} were still running after timeout={config.timeout}s and were "
            "stopped. Raise timeout=, or look for a rank waiting in a collective that another "
            "rank never reached.",
            "",
            outcome.fates,
        )
    cause = root_cause(outcome.fates)
    if cause is not None:
        raise build_error(cause, outcome.fates)
    missing = [s.rank for s in specs if s.rank not in outcome.results]
    if missing:
        raise RuntimeError(
            f"rank(s) {missing} ended without a result:\n{format_fates(outcome.fates)}"
        )
    return [cloudpickle.loads(outcome.results[s.rank]) for s in specs]
