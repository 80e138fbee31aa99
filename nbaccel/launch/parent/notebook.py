"""notebook_launcher and debug_launcher: validate, choose, delegate."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ...environment import choice_variables
from ...state.registry import STATE, reset_registry, set_aside
from ..config import DEFAULT_STALL_TIMEOUT, LaunchConfig
from ..events import EventSink, RankStateEvent, emit
from ..guard import StartMethod, choose_start_method, install_cuda_init_tracer
from ..nodes.peers import MachineLostError, RemoteRankError
from ..states import Fate
from .attempt import LaunchPlan
from .dashboards import Board, open_dashboard
from .errors import LaunchStopped, WorkerError
from .variables import temporary_environment
from .xla import launch_xla

__all__ = ["debug_launcher", "notebook_launcher", "refuse_existing_state"]

install_cuda_init_tracer()


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    num_processes: int | None = None,
    mixed_precision: str | None = None,
    use_port: int | str | None = None,
    master_addr: str | None = None,
    node_rank: int = 0,
    num_nodes: int | None = None,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int | None = None,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
    *,
    start_method: str | None = None,
    timeout: float | None = None,
    rendezvous_timeout: float = 300.0,
    node_timeout: float = 60.0,
    cpu: bool | None = None,
    debug: bool | None = None,
    kwargs: dict[str, Any] | None = None,
    on_event: EventSink | None = None,
    dashboard: bool | Any | None = None,
    display_ranks: int | list[int] | str | None = None,
    hosts: list[str] | str | bool | None = None,
    python: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    connect_timeout: float | None = None,
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
    on_stall: str | None = None,
) -> list[Any]:
    """Run ``function(*args)`` on ``num_processes`` processes of this machine and return
    the list of their return values, indexed by local process index.

    See ``docs/launcher.md`` for every option; new options are keyword-only. Options left
    ``None`` take the config file's value where one is in force (``nbaccel config``, the
    config panel's Save): ``max_restarts`` (else 0) and ``start_method`` (else ``"auto"``)
    among them, and ``hosts`` (else this machine; ``hosts=False``: this machine whatever the
    file says) with ``python``, ``cwd`` and ``connect_timeout``.

    With ``hosts=["node1", "node2"]`` the ranks run on those machines instead, started over
    ssh from this notebook, ``num_processes`` on each; the list holds every rank's value in
    global rank order (docs/launcher.md, "Several machines from one notebook (SSH)").

    About once a second the launcher asks every rank where it is (answered by a thread of the
    rank, so also while it waits inside a collective): ranks in different collectives are
    named at once, and a rank that has waited ``stall_timeout`` seconds in one collective is
    reported with the ranks that never joined it and their lines. ``on_stall="warn"`` (the
    default, or the config file's) shows that and the where table in the cell and lets the run
    go on; ``"raise"`` stops every rank and raises :class:`StallError`. ``stall_timeout=None``
    turns the watch off (docs/troubleshooting.md, "My cell hangs").

    Raises:
        ValueError / TypeError: a bad argument (nothing was started).
        HostError: a host of ``hosts=`` is unreachable or runs other versions (nothing was
            started).
        MachineLostError: a machine stopped answering; the ranks everywhere were stopped.
        CudaInitializedError: fork was asked for after CUDA was initialised in this process.
        WorkerError: a rank failed (the original exception is raised where it can be rebuilt,
            with the WorkerError as its cause).
        StallError: (a ``TimeoutError``) with ``on_stall="raise"``, a collective stalled or
            diverged; every worker was stopped first.
        KeyboardInterrupt: the kernel was interrupted; every worker was stopped first.
        LaunchStopped: (a ``KeyboardInterrupt``) the dashboard's Stop button was pressed;
            every worker was stopped first.
    """
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}.")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of arguments, got {type(args).__name__}.")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict or None, got {type(kwargs).__name__}.")
    if on_event is not None and not callable(on_event):
        raise TypeError(f"on_event must be callable or None, got {type(on_event).__name__}.")
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
        node_timeout=node_timeout,
        cpu=cpu,
        debug=debug,
        display_ranks=display_ranks,
        hosts=hosts,
        python=python,
        cwd=cwd,
        env=env,
        connect_timeout=connect_timeout,
        stall_timeout=stall_timeout,
        on_stall=on_stall,
    )
    refuse_existing_state()
    call_args, call_kwargs = tuple(args), dict(kwargs or {})
    board = open_dashboard(dashboard)
    if board is None:
        return _dispatch(function, call_args, call_kwargs, config, on_event, None)
    shown = board.dashboard
    board.begin(config)
    try:
        results = _dispatch(function, call_args, call_kwargs, config, shown.chain(on_event), board)
    except BaseException as exc:
        shown.end(exc)
        if isinstance(exc, LaunchStopped):  # asked for: the launcher's own frames are noise
            raise exc.with_traceback(None) from None
        raise
    shown.end(None)
    return results


def debug_launcher(
    function: Callable[..., Any], args: tuple[Any, ...] = (), num_processes: int = 2
) -> list[Any]:
    """Run ``function(*args)`` on ``num_processes`` CPU processes (for tests and debugging).

    As Accelerate's, it runs even when this process already holds a state (a test's
    Accelerator): the launched function starts from none, and this process's state is
    unchanged afterwards.
    """
    with set_aside():
        return notebook_launcher(
            function, args, num_processes=num_processes, cpu=True, hosts=False
        )  # this machine's CPUs, whatever hosts the config file names


# -- helpers ---------------------------------------------------------------------------------


def _dispatch(
    function: Callable[..., Any],
    call_args: tuple[Any, ...],
    call_kwargs: dict[str, Any],
    config: LaunchConfig,
    on_event: EventSink | None,
    board: Board | None,
) -> list[Any]:
    """Run the launch on the path the config asks for (TPU, in this process, or workers)."""
    if config.accelerator == "xla":
        return launch_xla(function, call_args, call_kwargs, config)
    remote = config.hosts is not None  # every host's agent forks its ranks
    if config.num_processes == 1 and not config.multi_node and not remote:
        return _with_restarts(
            lambda attempt: [
                _run_here(function, call_args, call_kwargs, config, attempt, on_event)
            ],
            config,
            restartable=lambda exc: True,
        )
    plan = LaunchPlan(
        function,
        call_args,
        call_kwargs,
        config,
        "fork" if remote else _start_method(config),
        on_event,
        line_sink=board.line_sink if board else None,
        stop_requested=board.stop_requested if board else None,
        on_started=board.set_pids if board else None,
        on_wait=board.on_wait if board else None,
    )
    return _with_restarts(plan.run, config, restartable=_is_rank_failure)


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
    if isinstance(exc, (MachineLostError, RemoteRankError)):  # another machine's rank or link
        return True
    return isinstance(exc.__cause__, WorkerError) or isinstance(exc, WorkerError)


def _announce_restart(exc: BaseException, attempt: int, config: LaunchConfig) -> None:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    print(
        f"nbaccel: attempt {attempt + 1} failed ({type(exc).__name__}: {first}); restarting "
        f"the group ({attempt + 1}/{config.max_restarts} restarts used).",
        file=sys.stderr,
        flush=True,
    )


def refuse_existing_state() -> None:
    """Refuse to start workers when this process already holds an Accelerator or a group."""
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


def _start_method(config: LaunchConfig) -> StartMethod:
    return choose_start_method(config.start_method, config.debug)


def _run_here(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
    attempt: int,
    on_event: EventSink | None,
) -> Any:
    """One process: run in the kernel itself, with the same variables and events as workers."""
    changes = choice_variables(
        mixed_precision=config.mixed_precision,
        use_cpu=config.cpu,
        restart_count=attempt,
        precision_warned=config.precision_falls_back,  # LaunchConfig.build warned already
    )
    with temporary_environment(changes):
        STATE.event_sink, STATE.worker_rank = on_event, 0
        emit(RankStateEvent.of(0, Fate.RUNNING, attempt))
        try:
            result = function(*args, **kwargs)
        except BaseException:
            emit(RankStateEvent.of(0, Fate.RAISED, attempt))
            raise
        finally:
            reset_registry()  # the next launch in this kernel starts afresh
            STATE.event_sink = None
        emit(RankStateEvent.of(0, Fate.RETURNED, attempt))
        STATE.event_sink = None
        return result
