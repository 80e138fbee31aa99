"""The agent on a host of ``hosts=[...]``: ``python -m nbaccel.launch.agent``.

The notebook starts one per host over ssh (or as a SLURM job step) and talks to it over that
process's stdin and stdout only (``wire.py``'s frames); nothing listens for the notebook. The
agent says hello (versions, host name, the address ssh reached, the port of a socket it bound
there), receives its ranks' ``WorkerSpec``s (the first host's agent also serves the ranks'
store on that socket, bound to that one address), and runs them under the same
``Supervisor`` as a local launch (forked by ``processes.start_worker``, ``worker/``); its own
waits add the channel and the ranks' output to the supervisor's, it forwards each rank's
messages (as bytes), output and exit, and passes on signals. When the notebook goes away (its
stdin ends, or nothing is heard for ``node_timeout``), the agent kills its ranks and ends;
they also die with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch

from ...environment import cuda_device_count, ssh_server_address
from ...version import __version__
from ..nodes.netif import route_to
from ..nodes.rendezvous import StoreHost
from ..notes import NotePage, call_to_json
from ..spec import WorkerPipes, WorkerSpec, merge_sys_path
from ..supervision.supervisor import Supervisor, WorkerLink
from . import wire
from .usage import UsageClock

__all__ = ["leave", "main"]

_BEAT_S = 1.0
_JOB_WAIT_S = 900.0  # the notebook checks every host before sending the job
_OUTPUT_GRACE_S = 5.0  # a rank's grandchildren may hold its output open this long


class _Gone(Exception):
    """The notebook is gone or silent: stop the ranks and end."""


class _Rank:
    def __init__(self, handle: WorkerLink, out_fd: int, err_fd: int, tasks: Connection) -> None:
        self.handle = handle
        self.outputs = {out_fd: 1, err_fd: 2}
        self.tasks = tasks  # the write end of its task pipe ("where are you?")
        self.exit_sent = False
        self.exited_at = 0.0


class Agent:
    """One host's agent: ``read_fd`` and ``write_fd`` are the ends of the ssh channel."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.listener: socket.socket | None = None  # bound at hello; the store's, if asked
        self.store: StoreHost | None = None
        self.store_fd = -1
        self.reader = wire.FrameReader()
        self.supervisor: Supervisor | None = None
        self.ranks: dict[int, _Rank] = {}
        self.notes: dict[int, NotePage] = {}  # rank -> the page it notes its collectives in
        self.heard = time.monotonic()
        self.sent = 0.0
        self.node_timeout = 60.0
        self.usage: UsageClock | None = None  # the ranks' memory, sent every few seconds

    # -- the channel ---------------------------------------------------------------------------
    def send(self, frame: wire.Frame) -> None:
        data = memoryview(wire.encode_frame(frame))
        while data:
            try:
                done = os.write(self.write_fd, data)
            except OSError as exc:  # the ssh session ended
                raise _Gone(f"the notebook's connection closed ({exc})") from None
            data = data[done:]
        self.sent = time.monotonic()

    def _incoming(self) -> list[wire.Frame]:
        try:
            data = os.read(self.read_fd, 1 << 16)
        except OSError as exc:
            raise _Gone(f"the notebook's connection failed ({exc})") from None
        if not data:
            raise _Gone("the notebook closed the connection")
        self.heard = time.monotonic()
        return self.reader.feed(data)

    def _beat(self) -> None:
        now = time.monotonic()
        if now - self.sent >= _BEAT_S:
            self.send(wire.Ping())
        if now - self.heard > self.node_timeout:
            raise _Gone(f"nothing heard from the notebook for {self.node_timeout:.0f}s")

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> int:
        os.write(self.write_fd, wire.MAGIC)
        hello, self.listener = _hello(self.read_fd)
        self.send(hello)
        self.usage = UsageClock(hello.gpus)
        job = self._wait_for_job()
        try:
            specs = _load(job)
            self._serve_store(hello.address, job)
        except BaseException as exc:
            self.send(wire.Fatal(f"{type(exc).__name__}: {exc}"))
            return 1
        self.node_timeout = job.node_timeout
        self._start(specs)
        while not self._done():
            self._step()
        return 0

    def _wait_for_job(self) -> wire.Job:
        deadline = time.monotonic() + _JOB_WAIT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.read_fd], [], [], _BEAT_S)
            if ready:
                for frame in self._incoming():
                    if isinstance(frame, wire.Job):
                        return frame
            if time.monotonic() - self.sent >= _BEAT_S:
                self.send(wire.Ping())
        raise _Gone(f"no job arrived within {_JOB_WAIT_S:.0f}s")

    def _serve_store(self, address: str, job: wire.Job) -> None:
        """Serve the ranks' store on the hello's socket where the job asks this host to."""
        listener, self.listener = self.listener, None
        assert listener is not None
        if job.store_world_size <= 0:
            listener.close()
            return
        self.store_fd = listener.fileno()
        wait = timedelta(seconds=job.store_timeout)
        self.store = StoreHost(address, 0, job.store_world_size, wait, listener=listener)

    def _start(self, specs: list[WorkerSpec]) -> None:
        """Give each rank its output and task pipes here, then start them all under one
        supervisor (no rank keeps this agent's or another rank's descriptors)."""
        pipes = {s.rank: (os.pipe(), os.pipe(), os.pipe()) for s in specs}
        mine = [out_r for (out_r, _), _, _ in pipes.values()]
        mine += [err_r for _, (err_r, _), _ in pipes.values()]
        mine += [task_w for _, _, (_, task_w) in pipes.values()]
        channel = [fd for fd in (self.read_fd, self.write_fd, self.store_fd) if fd >= 0]
        fds = {}
        for spec in specs:
            (_, out_w), (_, err_w), (task_r, _) = pipes[spec.rank]
            self.notes[spec.rank] = note = NotePage.create()
            fds[spec.rank] = WorkerPipes(out_w, err_w, os.getpid(), task_r, note_fd=note.fd)
        self.supervisor = Supervisor(
            specs,
            fds,
            None,
            keep_out=tuple(mine + channel),
            on_started=self._started,
            on_bytes=self._forward_message,
        )
        try:
            self.supervisor.start()
        finally:
            for (_, out_w), (_, err_w), (task_r, _) in pipes.values():
                for fd in (out_w, err_w, task_r):
                    os.close(fd)
            for note in self.notes.values():  # each rank has its own; the map stays here
                note.close_fd()
        for handle in self.supervisor.handles:
            (out_r, _), (err_r, _), (_, task_w) = pipes[handle.spec.rank]
            self.ranks[handle.spec.rank] = _Rank(
                handle, out_r, err_r, Connection(task_w, readable=False)
            )
            os.set_blocking(out_r, False)
            os.set_blocking(err_r, False)

    def _started(self, pids: dict[int, int]) -> None:
        for rank, pid in pids.items():
            self.send(wire.Started(rank, pid))

    def _step(self) -> None:
        assert self.supervisor is not None
        also: dict[int, Callable[[], object]] = {self.read_fd: self._obey_all}
        for number, rank in self.ranks.items():
            for fd in rank.outputs:
                also[fd] = functools.partial(self._forward_output, number, rank, fd)
        self.supervisor.pump(_BEAT_S / 2, also)
        for number, rank in self.ranks.items():
            handle = rank.handle
            if handle.sentinel < 0:
                handle.poll()
            if not rank.exit_sent and handle.exit_code is not None and not handle.conn_open:
                rank.exit_sent = True
                rank.exited_at = time.monotonic()
                note = self.notes.get(number)
                call = note.read() if note is not None else None
                self.send(wire.Exit(number, handle.exit_code, call_to_json(call)))
        self._send_usage()
        self._beat()

    def _obey_all(self) -> None:
        for frame in self._incoming():
            self._obey(frame)

    def _send_usage(self) -> None:
        if self.usage is None or not self.usage.due():
            return
        live = {n: r.handle.pid for n, r in self.ranks.items() if r.handle.exit_code is None}
        self.send(self.usage.measure(live))

    def _obey(self, frame: wire.Frame) -> None:
        if isinstance(frame, wire.Task) and frame.rank in self.ranks:
            with contextlib.suppress(OSError):  # a rank that ended reads no more
                self.ranks[frame.rank].tasks.send_bytes(frame.data)
        elif isinstance(frame, wire.Signal) and frame.rank in self.ranks:
            self.ranks[frame.rank].handle.send_signal(frame.sig)
        elif isinstance(frame, wire.Kill) and frame.rank in self.ranks:
            self.ranks[frame.rank].handle.kill()

    def _forward_message(self, handle: WorkerLink, data: bytes) -> None:
        number = handle.spec.rank
        rank = self.ranks[number]  # messages come only through pump(), after _start
        # what the rank wrote before this message goes first: a reply must not reach the
        # notebook before the output of its task (the cell would end without its last lines)
        for fd in list(rank.outputs):
            while self._forward_output(number, rank, fd):
                pass
        self.send(wire.Message(number, data))

    def _forward_output(self, number: int, rank: _Rank, fd: int) -> bool:
        """Forward one read of ``fd``; True when there may be more to read now."""
        stream = rank.outputs.get(fd)
        if stream is None:  # closed earlier in this round
            return False
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        self.send(wire.Output(number, stream, data))
        if not data:
            del rank.outputs[fd]
            os.close(fd)
        return bool(data)

    def _done(self) -> bool:
        if not all(rank.exit_sent for rank in self.ranks.values()):
            return False
        now = time.monotonic()
        for number, rank in self.ranks.items():
            if rank.outputs and now - rank.exited_at > _OUTPUT_GRACE_S:
                for fd, stream in list(rank.outputs.items()):
                    self.send(wire.Output(number, stream, b""))
                    os.close(fd)
                rank.outputs.clear()
        return not any(rank.outputs for rank in self.ranks.values())

    def stop_all(self) -> None:
        """Kill every rank still running, reap it, and close what this agent holds of it."""
        if self.supervisor is None:
            return
        with contextlib.suppress(OSError):
            self.supervisor.kill_all(grace=0.0)
        self.supervisor.release()


def _hello(channel_fd: int) -> tuple[wire.Hello, socket.socket]:
    """The hello, and the socket its port is bound to (listening on that one address)."""
    address = _own_address(channel_fd)
    try:
        listener = _listener(address)
    except OSError:  # a name that resolves to an address of no interface here
        address = ""
        listener = _listener(address)
    port = int(listener.getsockname()[1])
    hello = wire.Hello(
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        torch=str(torch.__version__),
        nbaccel=__version__,
        hostname=socket.gethostname(),
        address=address,
        port=port,
        gpus=cuda_device_count(),
        pid=os.getpid(),
    )
    return hello, listener


def _listener(address: str) -> socket.socket:
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, 0))
        listener.listen(1024)
    except OSError:
        listener.close()
        raise
    return listener


def _own_address(channel_fd: int) -> str:
    """The address the other hosts reach this one at: the one the notebook's connection
    reached (its socket's own address on a Ray node, ssh's), else (a SLURM step) the address
    its host name resolves to; "" (every interface) where none is known."""
    address = _socket_address(channel_fd) or ssh_server_address()
    if address:
        return address
    with contextlib.suppress(OSError):
        resolved = socket.gethostbyname(socket.gethostname())
        if not resolved.startswith("127."):
            return resolved
    return ""


def _socket_address(fd: int) -> str | None:
    """This end's address where ``fd`` is a TCP connection (a Ray node's agent), else None."""
    copy = os.dup(fd)
    try:
        probe = socket.socket(fileno=copy)
    except OSError:  # not a socket: ssh's or srun's pipe
        os.close(copy)
        return None
    with probe:
        if probe.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        return str(probe.getsockname()[0])


def _load(job: wire.Job) -> list[WorkerSpec]:
    """The job's specs, loaded where the notebook's paths are set, with gloo's interface."""
    if job.cwd:
        try:
            os.chdir(job.cwd)
        except OSError as exc:
            raise FileNotFoundError(
                f"the working directory {job.cwd!r} does not exist on {socket.gethostname()} "
                f"({exc.strerror}); pass cwd= naming a directory there"
            ) from None
    merge_sys_path(job.sys_path)
    route = route_to(job.master_addr)
    specs = []
    for spec in cloudpickle.loads(job.specs):
        env = dict(spec.env)
        if not env.get("GLOO_SOCKET_IFNAME") and route.interface:
            env["GLOO_SOCKET_IFNAME"] = route.interface
        specs.append(dataclasses.replace(spec, env=env, cwd=job.cwd))
    return specs


def main() -> int:
    """Take the ssh channel off fds 0 and 1 (a rank's prints must never reach it), then run."""
    read_fd, write_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the notebook decides when ranks stop

    def leave(signum: int, frame: Any) -> None:
        raise _Gone(f"the agent received {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, leave)  # a rank sets its own SIGTERM back to the default
    agent = Agent(read_fd, write_fd)
    try:
        return agent.run()
    except _Gone as gone:
        print(f"nbaccel agent on {socket.gethostname()}: {gone}", file=sys.stderr, flush=True)
        return 1
    except BaseException as exc:
        with contextlib.suppress(_Gone):
            agent.send(wire.Fatal("".join(traceback.format_exception(exc))))
        return 1
    finally:
        agent.stop_all()


def leave(code: int) -> None:
    """End the agent now that its ranks are reaped: without the interpreter's teardown (which
    takes a second with torch loaded), so that the notebook's launch ends sooner."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
