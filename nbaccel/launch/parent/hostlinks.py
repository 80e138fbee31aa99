"""The notebook's side of a host's agent: one channel per host, one link per remote rank.

:class:`AgentLink` speaks to ``python -m nbaccel.launch.agent`` over a ``channels.AgentChannel``
(``ssh ...``; with ``hosts="slurm"``, ``srun ...`` as a step of the job: ``slurmhosts.py``;
with ``hosts="ray"``, a connection to the agent a Ray actor runs: ``rayagents.py``), reads its
frames on one thread (``agent/wire.py``) and beats every second on another. Each remote rank
is a :class:`RemoteLink`, a ``supervisor.WorkerLink``: its ``conn`` is an ``inbox.Inbox``
that the reader thread fills with the rank's messages and ends when the agent reports the
rank's exit (the supervisor then reads the end as a local child's closed pipe, and polls the
exit code), and its output goes to the relay (``OutputRelay.feed``), which cuts and prefixes
it as it does a local child's, so the supervisor, the launch group and the relay treat it as
they treat a local child.
"""

from __future__ import annotations

import math
import shlex
import signal
import threading
import time
from collections.abc import Callable

from ..agent.wire import (
    Exit,
    Fatal,
    Frame,
    FrameReader,
    Hello,
    Job,
    Kill,
    Message,
    Output,
    Ping,
    Signal,
    Started,
    Usage,
    encode_frame,
)
from ..hostargs import HostTarget
from ..location import CollectiveCall
from ..notes import call_from_json
from ..slurmhosts import AGENT_MODULE
from ..spec import WorkerSpec
from ..supervision.processes import close_link
from .channels import AgentChannel
from .errors import HostError
from .inbox import Inbox

__all__ = ["AGENT_MODULE", "AgentLink", "Feed", "HostError", "RemoteLink", "ssh_argv"]

# (global rank, stream 1 or 2, bytes; b"": the stream ended) -> the relay
Feed = Callable[[int, int, bytes], None]

_BEAT_S = 1.0
_KILL_WAIT_S = 10.0
_CLOSE_WAIT_S = 5.0
_LOST_CODE = -int(signal.SIGKILL)
_REACH = {
    "ssh": "`ssh {entry}` works from this machine without a password",
    "srun": "the job's node {entry} is up (sinfo) and the job still runs (squeue)",
    "ray": "the Ray node {entry} is alive (`ray status`) and this machine reaches its address",
}


class RemoteLink:
    """One rank run by a host's agent, as the supervisor sees a worker (``WorkerLink``)."""

    def __init__(self, spec: WorkerSpec, agent: AgentLink, feed: Feed) -> None:
        self.spec = spec
        self.agent = agent
        self.pid = -1
        self.conn = Inbox()
        self.conn_open = True
        self.sentinel = -1  # the inbox's end tells the supervisor to poll the exit code
        self.exit_code: int | None = None
        self._feed = feed  # (rank, stream, bytes) -> the relay; b"": that stream ended
        self._open_streams = {1, 2}
        self._reported: int | None = None
        self.collective: CollectiveCall | None = None  # what it died in (its agent's note)
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._ended = threading.Event()

    # -- from the agent's reader thread ----------------------------------------------------------
    def started(self, pid: int) -> None:
        self.pid = pid
        self._started.set()

    def deliver(self, data: bytes) -> None:
        self.conn.put(data)  # dropped after the end

    def write_output(self, stream: int, data: bytes) -> None:
        """What the rank wrote to ``stream`` (1 or 2); ``b""``: that stream ended."""
        if stream not in self._open_streams:
            return
        if not data:
            self._open_streams.discard(stream)
        self._feed(self.spec.rank, stream, data)

    def close_outputs(self) -> None:
        """End the streams the rank did not end itself (its machine is gone)."""
        for stream in sorted(self._open_streams):
            self.write_output(stream, b"")

    def ended(self, code: int, collective: CollectiveCall | None = None) -> None:
        """The rank ended (or its machine was lost: ``-SIGKILL``), inside ``collective`` if
        its note page named one."""
        with self._lock:
            if self._reported is not None:
                return
            self._reported = code
            self.collective = collective
            self.conn.end()
        self._ended.set()
        self._started.set()

    # -- the supervisor's side ---------------------------------------------------------------
    def wait_started(self, timeout: float) -> None:
        """Wait until the agent started this rank; ``HostError`` where it did not."""
        if not self._started.wait(timeout):
            self.agent.declare_lost(f"it did not start rank {self.spec.rank} within {timeout:.0f}s")
        if self.pid < 0:
            raise HostError(
                self.agent.target.entry,
                f"rank {self.spec.rank} did not start on {self.agent.target.entry}: "
                f"{self.agent.lost or 'no answer'}",
            )

    def poll(self) -> int | None:
        if self.exit_code is None:
            self.agent.check_heard()
            self.exit_code = self._reported
        return self.exit_code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            self.agent.send(Signal(self.spec.rank, int(sig)))

    def kill(self) -> None:
        """Kill the rank and wait for its exit; a machine that does not answer counts as lost
        (its agent kills its ranks when it no longer hears the notebook)."""
        if self.poll() is not None:
            return
        self.agent.send(Kill(self.spec.rank))
        if not self._ended.wait(_KILL_WAIT_S):
            self.agent.declare_lost(f"rank {self.spec.rank} was not reported killed")
        self.poll()

    def close(self) -> None:
        close_link(self)


class AgentLink:
    """One host's agent, reached through ``channel`` (see the module's docstring)."""

    def __init__(
        self, index: int, target: HostTarget, channel: AgentChannel, connect_timeout: float
    ) -> None:
        self.index, self.target = index, target
        self.connect_timeout = connect_timeout
        self.node_timeout = 60.0
        self.channel, self.via = channel, channel.via
        self.links: dict[int, RemoteLink] = {}
        self.hello: Hello | None = None
        self.lost: str | None = None  # why the agent is gone before its ranks ended
        self.fatal: str | None = None
        self.memory: dict[int, tuple[int, int | None]] = {}  # rank -> RSS, GPU memory
        self.heard = time.monotonic()
        self._hello_seen = threading.Event()
        self._send_lock = threading.Lock()
        self._closing = threading.Event()
        self._reader = FrameReader(expect_magic=True)
        self._threads = [
            threading.Thread(target=self._read, name=f"nbaccel-agent-{index}", daemon=True),
            threading.Thread(target=self._beat, name=f"nbaccel-agent-{index}-beat", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # -- hello ---------------------------------------------------------------------------------
    def wait_hello(self, deadline: float) -> Hello:
        """The agent's hello; ``HostError`` naming the host and what ssh or the agent said."""
        self._hello_seen.wait(max(0.0, deadline - time.monotonic()))
        if self.hello is not None:
            return self.hello
        entry = self.target.entry
        code = self.channel.poll()
        said = self.stderr_text() or bytes(self._reader.preamble).decode("utf-8", "replace")
        said = said.strip()[-2000:]
        if code is None:
            reach = _REACH[self.via].format(entry=entry)
            raise HostError(
                entry,
                f"{entry} did not answer within {self.connect_timeout:.0f}s (connect_timeout) "
                f"plus 60s for its agent to start. {self.via} said: {said or 'nothing'}. Check "
                f"that {reach}.",
            )
        if code == 255 and self.via == "ssh":
            raise HostError(
                entry,
                f"could not reach {entry} over ssh within connect_timeout="
                f"{self.connect_timeout:g}s: {said or f'ssh exited with {code}'}. Check the "
                f"name, the network and that `ssh {entry}` works without a password "
                "(keys or an agent; ~/.ssh/config is read).",
            )
        raise HostError(
            entry,
            f"the nbaccel agent did not start on {entry} (exit code {code}): {said}. The "
            f"command was `{self.channel.command()}`; install nbaccel and torch for that "
            "interpreter there, or name another with python=.",
        )

    # -- frames ----------------------------------------------------------------------------------
    def send(self, frame: Frame) -> None:
        """Send one frame; a broken connection marks the agent lost."""
        data = encode_frame(frame)
        try:
            with self._send_lock:
                self.channel.write(data)
        except (OSError, ValueError):
            self.declare_lost(f"the {self.via} connection to it closed")

    def send_job(self, job: Job) -> None:
        self.node_timeout = job.node_timeout
        self.heard = time.monotonic()
        self.send(job)

    def _read(self) -> None:
        try:
            while True:
                data = self.channel.read()
                if not data:
                    break
                self.heard = time.monotonic()
                for frame in self._reader.feed(data):
                    self._dispatch(frame)
        except (OSError, ValueError) as exc:
            self.declare_lost(f"its stream could not be read ({exc})")
        code = self.channel.wait(_CLOSE_WAIT_S)
        self._hello_seen.set()
        if any(link._reported is None for link in self.links.values()) and self.links:
            tail = self.stderr_text().strip().splitlines()[-3:]
            said = f": {' / '.join(tail)}" if tail else ""
            self.declare_lost(
                self.fatal or f"the {self.via} connection ended (exit code {code}){said}"
            )
        self._close_outputs()

    def _dispatch(self, frame: Frame) -> None:
        if isinstance(frame, Hello):
            self.hello = frame
            self._hello_seen.set()
        elif isinstance(frame, Message) and frame.rank in self.links:
            self.links[frame.rank].deliver(frame.data)
        elif isinstance(frame, Output) and frame.rank in self.links:
            self.links[frame.rank].write_output(frame.stream, frame.data)
        elif isinstance(frame, Started) and frame.rank in self.links:
            self.links[frame.rank].started(frame.pid)
        elif isinstance(frame, Exit) and frame.rank in self.links:
            self.links[frame.rank].ended(frame.code, call_from_json(frame.collective))
        elif isinstance(frame, Usage):  # only the latest is kept (hostusage.py)
            self.memory = frame.by_rank()
        elif isinstance(frame, Fatal):
            self.fatal = f"its agent failed: {frame.text.strip()}"
            self.declare_lost(self.fatal, end_ssh=False)  # the agent ends by itself

    def stderr_text(self) -> str:
        return self.channel.said()

    def _beat(self) -> None:
        while not self._closing.wait(_BEAT_S):
            if self.channel.poll() is not None:
                return
            self.send(Ping())

    # -- loss and the end ------------------------------------------------------------------------
    def check_heard(self) -> None:
        """Declare the agent lost once it was silent for ``node_timeout`` (it beats every
        second), so a cut network ends the launch instead of hanging it."""
        if self.lost is None and self.links and not self._closing.is_set():
            silent = time.monotonic() - self.heard
            if silent > self.node_timeout:
                self.declare_lost(f"nothing was heard from it for {silent:.0f}s (node_timeout)")

    def declare_lost(self, reason: str, end_ssh: bool = True) -> None:
        """The machine is gone: its unfinished ranks count as killed, the ssh process ends
        (unless ``end_ssh`` is False: :meth:`close` then waits for the agent to end)."""
        if self._closing.is_set():
            reason = ""  # our own close: not a loss
        pending = [link for link in self.links.values() if link._reported is None]
        if self.lost is None and reason and pending:
            self.lost = reason
        for link in pending:
            link.ended(_LOST_CODE)
        if end_ssh and pending and self.channel.poll() is None:
            self.channel.end()

    def _close_outputs(self) -> None:
        for link in self.links.values():
            link.close_outputs()

    def close(self) -> None:
        """End the agent (the end of its input makes it kill what still runs) and its
        channel; join the threads; close the relay ends held for its ranks."""
        self._closing.set()
        with self._send_lock:
            self.channel.close_input()
        if self.channel.wait(_CLOSE_WAIT_S) is None:
            self.channel.end()
            self.channel.wait(_CLOSE_WAIT_S)
        for thread in self._threads:
            thread.join(_CLOSE_WAIT_S)
        self._close_outputs()
        for link in self.links.values():
            link.ended(_LOST_CODE)  # no-op for a rank whose exit was reported
        self.channel.release()


def ssh_argv(target: HostTarget, python: str, connect_timeout: float) -> list[str]:
    """The ssh command that starts ``target``'s agent (ssh reads ``~/.ssh/config`` itself)."""
    return [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={max(1, math.ceil(connect_timeout))}",
        *target.ssh_options(),
        "--",
        target.destination,
        shlex.join([python, "-m", AGENT_MODULE]),
    ]
