"""WorkerPool: warm workers that keep their process group and a namespace per rank between tasks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from ..config import DEFAULT_STALL_TIMEOUT, LaunchConfig, positive_seconds
from ..events import EventSink, TaskEvent
from ..guard import StartMethod, choose_start_method
from ..protocol import TaskReply
from ..tasks import CallTask, CellTask, PullTask, PushTask, encode_task
from .dashboards import open_dashboard
from .notebook import refuse_existing_state
from .poolerrors import (
    PoolBrokenError,
    PoolClosedError,
    RankDied,
    RanksStuck,
    StuckReason,
    TaskTimeoutError,
    died_error,
    interrupted_error,
    quiet,
    raise_first_error,
    stuck_error,
    stuck_message,
    task_states,
)
from .poollife import PoolLife, finalize_with
from .poolstatus import select_ranks, values_of
from .watch import stall_error
from .wheretable import WhereTable

__all__ = ["PoolBrokenError", "PoolClosedError", "TaskTimeoutError", "WorkerPool"]


class WorkerPool:
    """Warm workers for a notebook: the process group is joined once, and each rank keeps its
    own namespace (and its ``Accelerator``/``PartialState``) from one task to the next.

    ``notebook_launcher`` and the pool share one supervisor: the same workers (fork or spawn,
    the same CUDA guard), output relay, display channel and error path. A launch is a worker
    that runs one task and ends; a pool worker runs a sequence of tasks read from a pipe.

    Args:
        num_processes: ranks on this machine (default: the GPUs, else 1).
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``.
        start_method: ``"auto"``, ``"fork"`` or ``"spawn"`` (fork is refused once CUDA was
            initialised in this process; spawn always works).
        cpu: run on the CPU (gloo) even where GPUs are present.
        timeout: seconds a task may run before the pool stops it (None: no limit); the ranks
            still running are reported with the line they were on, and the group restarts.
        grace_period: seconds the ranks of a task get to finish after one of them failed or
            after an interrupt; ranks still running then (waiting in a collective for a peer
            that failed, or stuck in C code) are reported with their line, and the pool
            restarts its group: every namespace is lost, and the error says so.
        start_timeout: seconds the workers get to start and join the group.
        use_port: the port of the group's store (default: a free one).
        log_line_prefix_template: the prefix of every output line (``"[rank${rank}]: "``).
        display_ranks: ranks whose rich output is drawn in the cell (default rank 0; "all").
        debug: name the line that initialised CUDA in full when fork is refused.
        dashboard: ``True`` shows the pool in a dashboard (per-rank state, current cell, RSS).
        on_event: receives every event (``TaskEvent``, ``PoolStateEvent``, progress, ...).
        stall_timeout: seconds in one collective before a stall is reported (default 300, or
            the config file's; None: no watch); see ``notebook_launcher``.
        on_stall: ``"warn"`` (the call goes on) or ``"raise"`` (:class:`StallError`; the
            group restarts, every namespace is lost).

    On other machines (``docs/multihost.md``): ``hosts=["node1", "node2"]`` (or ``"slurm"``, or
    ``"ray"`` with ``num_nodes`` of a Ray cluster's nodes, default all that fit) runs
    ``num_processes`` ranks on each, started over ssh, as steps of the SLURM job or by Ray
    actors, as ``notebook_launcher(hosts=...)`` does; ``python=``, ``cwd=``, ``env=`` and
    ``connect_timeout=`` mean what they mean there, and ``node_timeout=`` (default 60) is the
    seconds of silence after which a machine counts as lost (``MachineLostError``; the pool
    is broken until ``restart()``). Every call reaches every rank of every host.
    """

    def __init__(
        self,
        num_processes: int | None = None,
        mixed_precision: str | None = None,
        start_method: str | None = "auto",
        cpu: bool | None = None,
        timeout: float | None = None,
        *,
        grace_period: float = 10.0,
        start_timeout: float = 120.0,
        use_port: int | str | None = None,
        log_line_prefix_template: str | None = None,
        display_ranks: int | list[int] | str | None = None,
        debug: bool | None = None,
        dashboard: bool | Any = False,
        on_event: EventSink | None = None,
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
        on_stall: str | None = None,
        hosts: list[str] | str | bool | None = None,
        python: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        connect_timeout: float | None = None,
        node_timeout: float = 60.0,
        num_nodes: int | None = None,
    ) -> None:
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event must be callable or None, got {type(on_event).__name__}.")
        self.grace_period = float(positive_seconds("grace_period", grace_period) or 0.0)
        self.start_timeout = float(positive_seconds("start_timeout", start_timeout) or 0.0)
        self.config = LaunchConfig.build(
            num_processes=num_processes,
            mixed_precision=mixed_precision,
            start_method=start_method,
            cpu=cpu,
            timeout=timeout,
            use_port=use_port,
            log_line_prefix_template=log_line_prefix_template,
            display_ranks=display_ranks,
            debug=debug,
            rendezvous_timeout=self.start_timeout,
            stall_timeout=stall_timeout,
            on_stall=on_stall,
            # a pool takes hosts only as an argument, never from the config file
            **({"hosts": hosts} if hosts is not None else {}),
            python=python,
            cwd=cwd,
            env=env,
            connect_timeout=connect_timeout,
            node_timeout=node_timeout,
            num_nodes=num_nodes,
        )
        if num_nodes is not None and (self.config.hosts is None or self.config.hosts.ray is None):
            raise ValueError(
                f'num_nodes={num_nodes!r} applies to a pool only with hosts="ray" (how many of the '
                "cluster's nodes); with hosts=[...] each named machine is a node, and a pool "
                "without hosts runs on this machine only."
            )
        if self.config.accelerator == "xla":
            raise ValueError(
                "WorkerPool runs on CPUs and GPUs; on a TPU use notebook_launcher, or pass "
                "cpu=True for a pool of CPU processes."
            )
        refuse_existing_state()
        remote = self.config.hosts is not None  # each host's agent forks its ranks
        self.method: StartMethod = (
            "fork" if remote else choose_start_method(self.config.start_method, self.config.debug)
        )
        board = open_dashboard(dashboard)
        self._life = PoolLife(
            self.config, self.method, self.start_timeout, self.grace_period, board, on_event
        )
        self._finalizer = finalize_with(self, self._life)
        self._task_id = 0
        if board is not None:
            board.begin(self.config)
        try:
            self._life.start()
        except BaseException as exc:
            if board is not None:
                with contextlib.suppress(Exception):
                    board.dashboard.end(exc)
            raise

    # -- the public calls --------------------------------------------------------------------
    @property
    def num_processes(self) -> int:
        """Ranks on each machine (on this one, without ``hosts=``)."""
        return self.config.num_processes

    @property
    def world_size(self) -> int:
        """Ranks of the pool, over every machine."""
        return self.config.world_size

    @property
    def hosts(self) -> list[str] | None:
        """The machines of ``hosts=`` in order (None: the ranks run on this machine)."""
        hosts = self.config.hosts
        return [t.entry for t in hosts.targets] if hosts is not None else None

    @property
    def dashboard(self) -> Any:
        """The dashboard that shows the pool (``dashboard=True`` or one given), else None."""
        return self._life.board.dashboard if self._life.board is not None else None

    @property
    def state(self) -> str:
        """``ready``, ``running``, ``broken`` (call :meth:`restart`) or ``closed``."""
        self._life.notice_death()
        return str(self._life.state)

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``function(*args, **kwargs)`` on every rank; returns one result per rank.

        ``notebook_launcher``'s semantics on warm workers: the function travels with
        cloudpickle (notebook functions, lambdas and closures work with fork and spawn); a
        rank's exception is raised here with its own type, rank and remote traceback.
        """
        if not callable(function):
            raise TypeError(f"function must be callable, got {type(function).__name__}.")
        label = getattr(function, "__name__", type(function).__name__)
        task = CallTask(self._next_id(), function, tuple(args), dict(kwargs), label)
        return values_of(self._submit(task, None))

    def execute(
        self, source: str, ranks: int | Iterable[int] | None = None, label: str | None = None
    ) -> list[Any]:
        """Run a cell's ``source`` in each rank's persistent namespace.

        Returns one value per rank in ``ranks`` (all ranks by default; in rank order): the
        value of the cell's last expression, as IPython's ``Out`` shows it (None for a
        statement or a trailing ``;``); a value that cannot be pickled comes back as a
        ``RemoteRepr`` showing the rank's ``repr``. Identical values are *not* merged here:
        :func:`nbaccel.launch.tasks.group_values` groups them for a caller that shows each once.
        ``label`` names the cell in ``status()`` and tracebacks (e.g. ``"In [5]"``).
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be a str of Python code, got {type(source).__name__}.")
        compile(source, "<cell>", "exec")  # a syntax error is raised here, before any rank runs
        task_id = self._next_id()
        task = CellTask(task_id, source, label or f"task {task_id}")
        return values_of(self._submit(task, ranks))

    def push(self, values: dict[str, Any], ranks: int | Iterable[int] | None = None) -> None:
        """Set ``name = value`` for each item of ``values`` in the ranks' namespaces."""
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and k.isidentifier() for k in values
        ):
            raise TypeError("push takes a dict whose keys are variable names, e.g. {'lr': 3e-4}.")
        self._submit(PushTask(self._next_id(), dict(values)), ranks)

    def pull(self, name: str, ranks: int | Iterable[int] | None = None) -> list[Any]:
        """The value of ``name`` in each rank's namespace (``NameError`` where it is unset)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"pull takes a variable name, got {name!r}.")
        return values_of(self._submit(PullTask(self._next_id(), name), ranks))

    def status(self) -> list[dict[str, Any]]:
        """One dict per rank: ``rank``, ``pid``, ``state`` (``idle``, ``running``, ``dead``,
        ``stopped``, ``closed``), ``cell`` (the task running now, else None), ``last_cell``,
        ``rss`` (bytes), ``device``; ``error`` says why when the pool is broken."""
        self._life.notice_death()
        return self._life.rows()

    def where(self) -> WhereTable:
        """Where every rank is now: one dict per rank (docs/pool.md), shown as a table; also
        while a call runs, asked from another thread (a console on this kernel)."""
        return self._life.usable().where()

    def restart(self) -> None:
        """Stop every worker and start new ones (a new group; every namespace is lost)."""
        self._life.close_group()
        print(f"nbaccel: restarting the pool's {self.world_size} processes.", flush=True)
        self._life.start()

    def shutdown(self) -> None:
        """Stop every worker and release everything the pool holds (idempotent)."""
        self._life.close()
        self._finalizer.detach()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        on = f", hosts={self.hosts}" if self.hosts is not None else ""
        return (
            f"WorkerPool(num_processes={self.num_processes}{on}, state={str(self._life.state)!r})"
        )

    # -- one task ----------------------------------------------------------------------------
    def _next_id(self) -> int:
        self._task_id += 1
        return self._task_id

    def _submit(self, task: Any, ranks: int | Iterable[int] | None) -> dict[int, TaskReply]:
        chosen = select_ranks(ranks, self.world_size)
        message = encode_task(task)
        life = self._life
        group = life.usable()
        stop = life.begin_call(task, chosen)
        try:
            try:
                group.send(message, chosen)
            except KeyboardInterrupt:  # part of the ranks may have the task: start afresh
                life.restart_after("the call was interrupted while sending the task")
                raise
            except OSError:
                group.check_alive()  # a rank died: its pipe is closed
                raise
            on_wait = life.board.on_wait if life.board is not None else None
            replies, interrupted = group.collect(
                task.task_id, chosen, self.grace_period, self.config.timeout, stop, on_wait
            )
        except RankDied as died:
            left = group.left_behind(died.fates)
            life.break_down(died)
            raise died_error(died.error, life.problem, *left)  # noqa: B904 - cause: WorkerError
        except RanksStuck as stuck:
            raise quiet(self._stuck(stuck, task.label))  # noqa: B904 - as above
        finally:
            life.end_call()
        for rank, state in task_states(replies, interrupted).items():
            life.emit(TaskEvent(rank=rank, state=state, label=task.label, task_id=task.task_id))
        if interrupted:
            raise interrupted_error(task.label, stop)
        raise_first_error(replies, life.book.hosts)
        return replies

    def _stuck(self, stuck: RanksStuck, label: str) -> BaseException:
        """The error of a task whose ranks did not finish; the group is restarted first."""
        if stuck.stalled is not None:  # on_stall="raise"
            return stall_error(stuck.stalled, self._life.restart_after("a collective stalled"))
        where = self._life.group.where() if self._life.group is not None else WhereTable()
        limit = self.config.timeout if stuck.reason is StuckReason.TIMEOUT else self.grace_period
        text = stuck_message(stuck.ranks, label, limit, stuck.reason, where)
        text += self._life.restart_after(f"rank(s) {stuck.ranks} were stuck")
        return stuck_error(stuck.reason, text, stuck.replies, self._life.book.hosts)
