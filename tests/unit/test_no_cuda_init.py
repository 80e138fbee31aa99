"""nbaccel never initialises CUDA: checked in fresh processes whose CUDA entry points raise."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from nbaccel.environment import cuda_device_count

# Runs in a fresh interpreter. Every CUDA runtime entry point is replaced before nbaccel is
# imported; NVML counting (torch.cuda._device_count_nvml) is allowed and left alone.
_PROGRAM = textwrap.dedent(
    """
    import sys
    import torch

    def _touched(*args, **kwargs):
        raise RuntimeError("CUDA touched")

    torch.cuda._lazy_init = _touched
    torch.cuda.init = _touched
    torch.cuda.device_count = _touched
    torch.cuda.is_available = _touched
    if hasattr(torch._C, "_cuda_getDeviceCount"):
        torch._C._cuda_getDeviceCount = _touched
    if sys.argv[1] == "built":
        torch.backends.cuda.is_built = lambda: True
    assert torch.cuda.is_initialized() is False

    import nbaccel
    from nbaccel import AcceleratorState, GradientState, PartialState, set_seed
    from nbaccel.environment import choose_device, cuda_device_count, read_launch_environment

    count = cuda_device_count()
    assert isinstance(count, int) and count >= 0, count
    choice = choose_device(read_launch_environment())
    state = PartialState()
    acc = AcceleratorState()
    grads = GradientState()
    set_seed(17)
    set_seed(17, device_specific=True)
    repr(state), repr(acc), repr(grads)
    state.wait_for_everyone()
    with state.main_process_first():
        pass
    with state.split_between_processes(list(range(5)), apply_padding=True) as share:
        assert len(share) == (5 + state.num_processes - 1) // state.num_processes
    assert torch.cuda.is_initialized() is False
    if sys.argv[2] == "canary":
        torch.cuda.is_available()
    print("NO-CUDA-OK", state.process_index, state.num_processes, choice.kind, count, flush=True)
    state.destroy_process_group()
    """
)


def _run(variant: str, env: dict[str, str], mode: str = "check") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _PROGRAM, variant, mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"no-CUDA check timed out\n{out}\n{err}")
    return proc.returncode, out, err


@pytest.mark.parametrize("variant", ["cpu-build", "built"])
def test_state_and_seeding_never_touch_cuda(
    variant: str, subprocess_environ: Callable[..., dict[str, str]]
) -> None:
    code, out, err = _finish(_run(variant, subprocess_environ()))
    assert code == 0, f"exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "NO-CUDA-OK 0 1" in out


def test_the_harness_notices_a_cuda_call(subprocess_environ: Callable[..., dict[str, str]]) -> None:
    """The canary calls torch.cuda.is_available() at the end: the check must catch it."""
    code, out, err = _finish(_run("built", subprocess_environ(), mode="canary"))
    assert code != 0
    assert "CUDA touched" in err
    assert "NO-CUDA-OK" not in out


@pytest.mark.multiprocess
@pytest.mark.skipif(cuda_device_count() > 0, reason="GPU workers bind CUDA by design")
def test_two_rank_env_launch_never_touches_cuda(
    subprocess_environ: Callable[..., dict[str, str]],
    free_port: Callable[[], int],
) -> None:
    port = free_port()
    procs = []
    for rank in range(2):
        env = subprocess_environ(
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(_run("built", env))  # the NVML / device-file path
    results = [_finish(p) for p in procs]
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank} exit {code}\nstdout:\n{out}\nstderr:\n{err}"
        assert f"NO-CUDA-OK {rank} 2 cpu 0" in out
