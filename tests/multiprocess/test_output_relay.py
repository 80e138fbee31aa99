"""The output relay (launch/parent/relay.py) and its worker side (launch/worker/redirect.py):
real children, real pipes, whole prefixed lines."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable

import pytest

from nbaccel.launch.parent.relay import OutputRelay
from nbaccel.launch.prefix import DEFAULT_PREFIX_TEMPLATE, format_prefix, validate_prefix_template

pytestmark = pytest.mark.timeout(60)

P0 = "[rank0]: "
P1 = "[rank1]: "
LINE = 64 * 1024

# Run in the child, whether forked (exec) or spawned (python -c): every way of writing output.
KINDS_SRC = r"""
import ctypes, os, sys
print("py-out")
print("py-err", file=sys.stderr)
os.write(1, b"fd-out\n")
os.write(2, b"fd-err\n")
libc = ctypes.CDLL(None)
libc.printf(b"c-out %d\n", 7)
libc.fflush(None)
print("unicode-\u00e9\u4e2d")
print(f"dunder={sys.__stdout__ is sys.stdout and sys.__stderr__ is sys.stderr}")
sys.stdout.write("no-newline")
"""
KINDS_OUT = ["py-out", "fd-out", "c-out 7", "unicode-\u00e9\u4e2d", "dunder=True", "no-newline"]
KINDS_ERR = ["py-err", "fd-err"]

SPAWN_PRELUDE = (
    "import sys\n"
    "from nbaccel.launch.worker.redirect import redirect_child_output\n"
    "redirect_child_output(int(sys.argv[1]), int(sys.argv[2]))\n"
)

# The child blocks until the test has seen its first line arrive in the parent's stream.
CAUSAL_SRC = r"""
import os, select, sys
go = int(sys.argv[3])
print("first line")
ready, _, _ = select.select([go], [], [], 10.0)
print("second line" if ready else "no go within 10 s")
"""


class Recorder(io.StringIO):
    """The parent's destination stream: records every write() with a timestamp."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []
        self._cond = threading.Condition()

    def write(self, s: str) -> int:
        with self._cond:
            self.writes.append((time.monotonic(), s))
            self._cond.notify_all()  # waiters wake once the lock is released
            return super().write(s)

    def wait_for(self, text: str, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: text in self.getvalue(), timeout)

    def lines(self) -> list[str]:
        with self._cond:
            return self.getvalue().splitlines()


def fork_child(body: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            body()
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return pid


def reap(pid: int, timeout: float = 15.0) -> int:  # kills the child and fails on timeout
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"child {pid} did not exit within {timeout} s")


def spawn(relay: OutputRelay, src: str, *extra_fds: int) -> subprocess.Popen[bytes]:
    fds = relay.child_fds(0)
    argv = [sys.executable, "-c", SPAWN_PRELUDE + src, *map(str, fds + extra_fds)]
    return subprocess.Popen(argv, pass_fds=fds + extra_fds, stdin=subprocess.DEVNULL)


def is_open(fd: int) -> bool:
    try:
        return os.fstat(fd) is not None
    except OSError:
        return False


def _mp_target(relay: OutputRelay, local_rank: int, src: str) -> None:
    relay.redirect_forked_child(local_rank)
    exec(src, {})


@pytest.mark.multiprocess
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_line_arrives_while_child_still_runs(method: str) -> None:
    out, err = Recorder(), Recorder()
    relay = OutputRelay({0: P0}, stdout=out, stderr=err)
    go_r, go_w = os.pipe()
    proc = None
    try:
        if method == "fork":

            def body() -> None:
                relay.redirect_forked_child(0)
                sys.argv = ["-c", "", "", str(go_r)]
                exec(CAUSAL_SRC, {})

            pid = fork_child(body)
            alive: Callable[[], bool] = lambda: os.waitpid(pid, os.WNOHANG)[0] == 0  # noqa: E731
        else:
            proc = spawn(relay, CAUSAL_SRC, go_r)
            alive = lambda: proc.poll() is None  # noqa: E731
        relay.close_child_ends()
        relay.start()
        seen = out.wait_for(P0 + "first line\n", timeout=10.0)
        still_running = alive()
        os.write(go_w, b"go")
        if proc is not None:
            assert proc.wait(15) == 0
        else:
            assert reap(pid) == 0
        assert seen, f"first line never reached the parent: {out.getvalue()!r}"
        assert still_running, "child had exited before its first line reached the parent"
    finally:
        for fd in (go_r, go_w):
            os.close(fd)
        relay.close()
    assert out.lines() == [P0 + "first line", P0 + "second line"], err.getvalue()
    assert err.getvalue() == ""


@pytest.mark.multiprocess
@pytest.mark.parametrize("method", ["os_fork", "mp_fork", "spawn"])
def test_every_kind_of_output_is_captured(method: str) -> None:
    out, err = Recorder(), Recorder()
    with OutputRelay({0: P0}, stdout=out, stderr=err) as relay:
        if method == "os_fork":

            def body() -> None:
                relay.redirect_forked_child(0)
                exec(KINDS_SRC, {})

            pid = fork_child(body)
            relay.close_child_ends()
            code = reap(pid)
        elif method == "mp_fork":
            ctx = multiprocessing.get_context("fork")
            process = ctx.Process(target=_mp_target, args=(relay, 0, KINDS_SRC))
            process.start()
            relay.close_child_ends()
            process.join(15)
            code = process.exitcode if process.exitcode is not None else -1
        else:
            proc = spawn(relay, KINDS_SRC)
            relay.close_child_ends()
            code = proc.wait(15)
    assert code == 0, err.getvalue()
    assert out.lines() == [P0 + line for line in KINDS_OUT]
    assert err.lines() == [P0 + line for line in KINDS_ERR]
    assert all(text.endswith("\n") for _, text in out.writes + err.writes)


@pytest.mark.multiprocess
def test_two_ranks_with_64k_lines_never_interleave() -> None:
    out, err = Recorder(), Recorder()
    relay = OutputRelay({0: P0, 1: P1}, stdout=out, stderr=err)
    fills = {0: "abcdef", 1: "ABCDEF"}
    go_r, go_w = os.pipe()
    pids = []
    try:
        for rank in (0, 1):

            def body(rank: int = rank) -> None:
                relay.redirect_forked_child(rank)
                select.select([go_r], [], [], 10.0)
                os.read(go_r, 1)
                for ch in fills[rank]:
                    sys.stdout.write(ch * LINE + "\n")

            pids.append(fork_child(body))
        relay.close_child_ends()
        relay.start()
        os.write(go_w, b"gg")
        assert [reap(pid) for pid in pids] == [0, 0], err.getvalue()
    finally:
        for fd in (go_r, go_w):
            os.close(fd)
        relay.close()
    lines = out.lines()
    assert len(lines) == 12
    for rank, prefix in ((0, P0), (1, P1)):
        mine = [line for line in lines if line.startswith(prefix)]
        assert [line[len(prefix)] for line in mine] == list(fills[rank])
        assert all(line == prefix + line[len(prefix)] * LINE for line in mine)
    assert all(text.endswith("\n") for _, text in out.writes)
    assert err.getvalue() == ""


@pytest.mark.multiprocess
def test_child_killed_mid_line_still_yields_what_it_wrote() -> None:
    out, err = Recorder(), Recorder()
    relay = OutputRelay({0: P0}, stdout=out, stderr=err)
    ready_r, ready_w = os.pipe()

    def body() -> None:
        relay.redirect_forked_child(0)
        os.write(1, b"whole\nhalf-writ")
        os.write(2, b"err-partial")
        os.write(ready_w, b"r")
        time.sleep(30)

    pid = fork_child(body)
    try:
        relay.close_child_ends()
        relay.start()
        assert select.select([ready_r], [], [], 10.0)[0], "child never got ready"
        time.sleep(0.1)
        assert out.lines() == [P0 + "whole"]  # the half line waits for its end
        os.kill(pid, signal.SIGKILL)
        assert reap(pid) == -signal.SIGKILL
    finally:
        for fd in (ready_r, ready_w):
            os.close(fd)
        relay.close()
    assert out.getvalue() == f"{P0}whole\n{P0}half-writ\n"
    assert err.getvalue() == f"{P0}err-partial\n"


@pytest.mark.multiprocess
def test_close_gives_up_on_a_pipe_still_held_open() -> None:
    out = Recorder()
    relay = OutputRelay({0: P0}, stdout=out, stderr=out)
    os.write(relay.child_fds(0)[0], b"still running")
    pid = fork_child(lambda: time.sleep(30))  # holds copies of the write ends
    try:
        relay.start()
        start = time.monotonic()
        relay.close(timeout=0.3)
        assert time.monotonic() - start < 3.0
    finally:
        os.kill(pid, signal.SIGKILL)
        reap(pid)
    assert out.getvalue() == f"{P0}still running\n"


@pytest.mark.multiprocess
def test_forked_child_keeps_only_its_own_fds() -> None:
    out, err = Recorder(), Recorder()
    relay = OutputRelay({0: P0, 1: P1}, stdout=out, stderr=err)
    others = {p.read_fd for pair in relay._pipes.values() for p in pair}
    others.update(relay.child_fds(1))

    def body() -> None:
        relay.redirect_forked_child(0)
        print(f"open={[fd for fd in sorted(others) if is_open(fd)]}")

    pid = fork_child(body)
    relay.close_child_ends()
    with relay:
        assert reap(pid) == 0, err.getvalue()
    assert out.lines() == [P0 + "open=[]"]


@pytest.mark.multiprocess
def test_carriage_returns_split_lines_and_utf8_survives_split_reads() -> None:
    out = Recorder()
    relay = OutputRelay({0: "<0> "}, stdout=out, stderr=out)
    fd = relay.child_fds(0)[0]
    with relay:
        os.write(fd, b"hel")
        time.sleep(0.1)
        assert out.getvalue() == ""
        os.write(fd, b"lo\n\r 10%\r 20%\r 30%\n")
        os.write(fd, b"a\r\nb\n\n")
        eacute = "\u00e9".encode()
        os.write(fd, eacute[:1])
        assert out.wait_for("<0> \n")
        os.write(fd, eacute[1:] + b"\n" + b"crlf-split\r")
        time.sleep(0.1)
        os.write(fd, b"\nnext\n")
    expected = ["hello", " 10%", " 20%", " 30%", "a", "b", "", "\u00e9", "crlf-split", "next"]
    assert out.lines() == ["<0> " + line for line in expected]


def test_a_fed_relay_cuts_and_prefixes_another_hosts_output_without_pipes() -> None:
    """Ranks on other hosts: their agent's reader feeds the bytes; the same lines come out,
    an unfinished line goes out at its stream's end or at close, and no descriptor is made."""
    before = set(os.listdir("/proc/self/fd"))
    out, err = Recorder(), Recorder()
    relay = OutputRelay({3: "[node2 rank3]: ", 4: "[node2 rank4]: "}, out, err, fed=True)
    with relay:
        relay.feed(3, 1, b"hel")
        assert out.getvalue() == ""
        relay.feed(3, 1, b"lo\r 50%\r\nnext")
        relay.feed(4, 2, "caf\u00e9".encode()[:-1])
        relay.feed(4, 2, "caf\u00e9".encode()[-1:] + b"\n")
        relay.feed(3, 1, b"")  # rank 3's stdout ended: its unfinished line goes out
        relay.feed(3, 1, b"after its end")  # dropped
        relay.feed(4, 1, b"cut short")  # its machine is lost: close flushes it
        relay.feed(9, 1, b"not a rank of this relay\n")  # ignored
        assert set(os.listdir("/proc/self/fd")) == before
    assert out.lines() == [
        "[node2 rank3]: hello",
        "[node2 rank3]:  50%",
        "[node2 rank3]: next",
        "[node2 rank4]: cut short",
    ]
    assert err.lines() == ["[node2 rank4]: caf\u00e9"]


@pytest.mark.multiprocess
def test_broken_parent_stream_does_not_block_the_writer() -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise ValueError("closed")

    relay = OutputRelay({0: P0}, stdout=Broken(), stderr=Broken())
    fd = relay.child_fds(0)[0]
    relay.start()
    writer = threading.Thread(target=os.write, args=(fd, b"x\n" * 200_000))
    writer.start()
    writer.join(5.0)
    assert not writer.is_alive()
    relay.close()


@pytest.mark.multiprocess
def test_default_streams_are_those_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = Recorder(), Recorder()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    relay = OutputRelay({3: "[rank3]: "})
    monkeypatch.undo()
    fo, fe = relay.child_fds(3)
    os.write(fo, b"to out\n")
    os.write(fe, b"to err\n")
    relay.close()  # never started: close still drains
    assert out.getvalue() == "[rank3]: to out\n"
    assert err.getvalue() == "[rank3]: to err\n"


@pytest.mark.multiprocess
def test_no_fd_leak_over_twenty_cycles() -> None:
    sink = Recorder()
    before = len(os.listdir("/proc/self/fd"))
    for i in range(20):
        relay = OutputRelay({0: P0, 1: P1}, stdout=sink, stderr=sink)
        fo = relay.child_fds(i % 2)[0]
        os.write(fo, f"cycle {i}\n".encode())
        if i % 3 == 0:
            with relay:
                relay.close_child_ends()
        elif i % 3 == 1:
            relay.start()
            relay.close_child_ends()
            relay.close()
        relay.close()
        relay.close_child_ends()
    assert len(os.listdir("/proc/self/fd")) == before
    assert sink.lines() == [f"{(P0, P1)[i % 2]}cycle {i}" for i in range(20)]


def test_format_prefix() -> None:
    assert DEFAULT_PREFIX_TEMPLATE == "[rank${rank}]: "
    assert format_prefix(None, rank=3, local_rank=1) == "[rank3]: "
    template = "${node_rank}/${local_rank}/${rank} ${role_name}$$ "
    got = format_prefix(template, rank=5, local_rank=1, node_rank=2, role_name="trainer")
    assert got == "2/1/5 trainer$ "
    validate_prefix_template(None)
    validate_prefix_template("[${rank}] ")


@pytest.mark.parametrize(
    ("template", "error"),
    [("[${gpu}] ", ValueError), ("$rank_id ", ValueError), ("cost $5", ValueError), (7, TypeError)],
)
def test_bad_prefix_template(template: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="log_line_prefix_template") as info:
        validate_prefix_template(template)
    assert "${local_rank}" in str(info.value)
    with pytest.raises(error):
        format_prefix(template, rank=0, local_rank=0)  # type: ignore[arg-type]
