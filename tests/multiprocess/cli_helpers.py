"""Running the ``nbaccel`` command in a child process with a private HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import pythonpath

TIMEOUT_S = 120
_LAUNCH = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"}
_LAUNCH |= {"ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PJRT_DEVICE"}
_LAUNCH |= {"TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE"}
_CACHES = {"HF_HOME", "XDG_CACHE_HOME"}


def cli_environ(home: Path, **extra: str) -> dict[str, str]:
    """A child environment with HOME in ``home`` and no config file from the real machine."""
    prefixes = ("NBACCEL_", "ACCELERATE_", "TORCHELASTIC_", "OMPI_", "PMI_", "MPI_")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(prefixes) and k not in _LAUNCH and k not in _CACHES
    }
    env.update(HOME=str(home), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = pythonpath(environ=env)
    env.update(extra)
    return env


def nbaccel(
    *args: str, home: Path, cwd: Path | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m nbaccel ARGS`` (the console script's code) and its captured output."""
    return subprocess.run(
        [sys.executable, "-m", "nbaccel", *args],
        cwd=cwd or home,
        env=cli_environ(home, **extra),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


_MANY = """
import contextlib, io, json, sys
from nbaccel.cli.main import main
answers = []
for argv in json.loads(sys.argv[1]):
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    answers.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(answers))
"""


def nbaccel_each(
    argvs: list[list[str]], home: Path, cwd: Path | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """``nbaccel ARGS`` for each of ``argvs``: the command's own ``main`` called in turn in one
    fresh process (the commands that refuse their arguments before starting anything: one
    interpreter start for all of them); one result each, as :func:`nbaccel` gives."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", _MANY, json.dumps(argvs)],
        cwd=cwd or home,
        env=cli_environ(home),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, detail(done)
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return [
        subprocess.CompletedProcess(argv, code, out, err)
        for argv, (code, out, err) in zip(argvs, answers, strict=True)
    ]


def detail(done: subprocess.CompletedProcess[str]) -> str:
    """Exit code and output, for assertion messages."""
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"


# The example of the Transformers FSDP guide, verbatim (shared with the other test tiers).
GUIDE_YAML = (
    Path(__file__).resolve().parents[1] / "fixtures" / "fsdp_guide_config.yaml"
).read_text()
