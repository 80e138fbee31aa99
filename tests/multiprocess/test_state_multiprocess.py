"""State classes on 2 and 3 real gloo ranks: one process group per world size, a test per check."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.multiprocess

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "state_checks.py"
REPO = HERE.parent.parent
TIMEOUT_S = 120
WORLD_SIZES = (2, 3)


def _check_names() -> list[str]:
    spec = importlib.util.spec_from_file_location("_nbaccel_state_checks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [function.__name__ for function in module.CHECKS]


CHECK_NAMES = _check_names()


class RankRun:
    """The outcome of one run of state_checks.py on ``world`` ranks."""

    def __init__(self, world: int, out_dir: Path, codes: list[int | None], timed_out: bool):
        self.world = world
        self.out_dir = out_dir
        self.codes = codes
        self.timed_out = timed_out

    def results(self, rank: int) -> dict[str, str]:
        path = self.out_dir / f"rank{rank}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def log(self, rank: int) -> str:
        path = self.out_dir / f"rank{rank}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-4000:]


def _start_ranks(
    world: int, out_dir: Path, port: int, environ: Callable[..., dict[str, str]]
) -> RankRun:
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    for rank in range(world):
        env = environ(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NBACCEL_MIXED_PRECISION="bf16",
            NBACCEL_RESTART_COUNT="2",
            OMP_NUM_THREADS="1",
        )
        log = open(out_dir / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed below)
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT), str(out_dir)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    deadline = time.monotonic() + TIMEOUT_S
    timed_out = False
    try:
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    return RankRun(world, out_dir, [p.returncode for p in procs], timed_out)


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"{n}ranks")
def ranks(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    free_port: Callable[[], int],
    subprocess_environ: Callable[..., dict[str, str]],
) -> RankRun:
    world = request.param
    out_dir = tmp_path_factory.mktemp(f"state_checks_{world}")
    return _start_ranks(world, out_dir, free_port(), subprocess_environ)


def _describe(run: RankRun, rank: int) -> str:
    state = "timed out" if run.timed_out else f"exit code {run.codes[rank]}"
    return f"rank {rank}/{run.world} ({state}); its output:\n{run.log(rank)}"


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_check(ranks: RankRun, name: str) -> None:
    failures = []
    for rank in range(ranks.world):
        outcome: Any = ranks.results(rank).get(name)
        if outcome is None:
            failures.append(f"{name} did not report on {_describe(ranks, rank)}")
        elif outcome != "ok":
            failures.append(f"{name} failed on rank {rank}/{ranks.world}:\n{outcome}")
    assert not failures, "\n\n".join(failures)


def test_every_rank_exited_cleanly(ranks: RankRun) -> None:
    assert not ranks.timed_out, "\n\n".join(_describe(ranks, r) for r in range(ranks.world))
    for rank, code in enumerate(ranks.codes):
        assert code == 0, _describe(ranks, rank)
    assert set(ranks.results(0)) == set(CHECK_NAMES)


# --- one rank, a process group made by hand ----------------------------------------------------

# Each check builds its own world-size-1 gloo group (tcp:// on a fresh port), so the checks do
# not depend on each other. Run in a subprocess: the pytest process itself never holds a group.
ONE_RANK_CHECKS = textwrap.dedent(
    """
    import json, os, socket, sys, traceback
    import torch.distributed as dist
    from nbaccel import AcceleratorState, PartialState
    from nbaccel.testing import reset_state

    def new_group():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1)

    def destroy_default_group():
        new_group()
        PartialState().destroy_process_group()
        assert not dist.is_initialized(), "the default group survived destroy_process_group()"

    def fork_launched_keeps_the_default_group():
        os.environ["NBACCEL_FORK_LAUNCHED"] = "1"
        try:
            new_group()
            state = PartialState()
            assert state.fork_launched is True
            state.destroy_process_group()
            AcceleratorState().destroy_process_group()
            assert dist.is_initialized(), "a fork-launched worker destroyed the default group"
            group = dist.new_group([0])
            state.destroy_process_group(group)
            try:
                dist.get_rank(group)
            except (ValueError, RuntimeError, KeyError):
                pass
            else:
                raise AssertionError("an explicit group survived destroy_process_group(group)")
            assert dist.is_initialized()
        finally:
            del os.environ["NBACCEL_FORK_LAUNCHED"]

    def reset_state_destroys_the_group_after_an_earlier_reset():
        new_group()
        PartialState()
        reset_state()  # reuse the group between tests, as reset_state's docstring advises ...
        reset_state(destroy_process_group=True)  # ... then tear it down at the end
        assert not dist.is_initialized(), "reset_state(destroy_process_group=True) kept the group"

    results = {}
    for check in (destroy_default_group, fork_launched_keeps_the_default_group,
                  reset_state_destroys_the_group_after_an_earlier_reset):
        try:
            check()
            results[check.__name__] = "ok"
        except BaseException:
            results[check.__name__] = traceback.format_exc()
        reset_state()
        if dist.is_initialized():
            dist.destroy_process_group()
    print("RESULTS=" + json.dumps(results))
    """
)
ONE_RANK_NAMES = (
    "destroy_default_group",
    "fork_launched_keeps_the_default_group",
    "reset_state_destroys_the_group_after_an_earlier_reset",
)


@pytest.fixture(scope="module")
def one_rank(subprocess_environ: Callable[..., dict[str, str]]) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RANK_CHECKS],
        cwd=REPO,
        env=subprocess_environ(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS=")]
    assert done.returncode == 0 and lines, f"{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1][len("RESULTS=") :])


@pytest.mark.parametrize("name", ONE_RANK_NAMES)
def test_one_rank_group(one_rank: dict[str, str], name: str) -> None:
    assert one_rank.get(name) == "ok", one_rank.get(name, f"{name} did not run")
