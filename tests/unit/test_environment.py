"""Unit tests for nbaccel.environment: launch variables, platform detection, device choice."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from nbaccel import environment
from nbaccel.environment import (
    LaunchEnvironment,
    choose_device,
    debug_mode_requested,
    devices,
    in_colab,
    in_kaggle,
    in_notebook,
    launch_variables,
    read_launch_environment,
    tpu_requested,
    xla_available,
    xla_bf16_storage_requested,
    xla_device_name,
    xla_requested,
)

MASTER = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29512"}


def _no_accelerator() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return environment.cuda_device_count() == 0 and not (mps is not None and mps.is_available())


needs_no_accelerator = pytest.mark.skipif(
    not _no_accelerator(), reason="an accelerator is present: the CPU default does not apply"
)


# --- read_launch_environment ------------------------------------------------------------------


def test_empty_environment_means_one_process() -> None:
    launch = read_launch_environment({})
    assert launch == LaunchEnvironment()
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        0,
        1,
        0,
        1,
    )
    assert launch.node_rank == 0
    assert launch.master_addr is None and launch.master_port is None
    assert launch.launcher == "none"
    assert launch.restart_count == 0
    assert not launch.distributed
    assert not launch.fork_launched and not launch.debug and not launch.use_cpu
    assert launch.mixed_precision is None


def test_torchrun_variables() -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "job-17",
        "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_MAX_RESTARTS": "3",
        **MASTER,
    }
    launch = read_launch_environment(env)
    assert launch.launcher == "torchrun"
    assert launch.rank == 3
    assert launch.world_size == 4
    assert launch.local_rank == 1
    assert launch.local_world_size == 2
    assert launch.node_rank == 1
    assert launch.restart_count == 2
    assert launch.master_addr == "10.1.2.3"
    assert launch.master_port == 29512
    assert launch.distributed


def test_torchrun_without_group_rank_derives_node_from_rank() -> None:
    env = {
        "RANK": "5",
        "WORLD_SIZE": "6",
        "LOCAL_RANK": "2",
        "LOCAL_WORLD_SIZE": "3",
        "TORCHELASTIC_RUN_ID": "x",
        **MASTER,
    }
    launch = read_launch_environment(env)
    assert launch.node_rank == 1
    assert launch.restart_count == 0


def test_nbaccel_restart_count_wins_over_torchelastic() -> None:
    env = {"TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "1"}
    env["NBACCEL_RESTART_COUNT"] = "4"
    assert read_launch_environment(env).restart_count == 4


def test_use_env_launch_variables() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", **MASTER}
    launch = read_launch_environment(env)
    assert launch.launcher == "env"
    assert (launch.rank, launch.world_size, launch.local_rank) == (1, 2, 1)
    assert launch.local_world_size == 2
    assert launch.node_rank == 0
    assert launch.master_addr == "10.1.2.3"
    assert launch.master_port == 29512
    assert launch.distributed


def test_use_env_with_node_rank() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "NODE_RANK": "1", **MASTER}
    env["LOCAL_WORLD_SIZE"] = "2"
    launch = read_launch_environment(env)
    assert launch.node_rank == 1
    assert launch.local_world_size == 2


def test_rank_without_local_rank_uses_rank() -> None:
    launch = read_launch_environment({"RANK": "2", "WORLD_SIZE": "3", **MASTER})
    assert launch.local_rank == 2
    assert launch.local_world_size == 3


def test_open_mpi_variables() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        **MASTER,
    }
    launch = read_launch_environment(env)
    assert launch.launcher == "mpi"
    assert (launch.rank, launch.world_size) == (5, 8)
    assert (launch.local_rank, launch.local_world_size) == (1, 4)
    assert launch.node_rank == 1
    assert launch.distributed


def test_intel_mpi_variables() -> None:
    env = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    launch = read_launch_environment(env)
    assert launch.launcher == "mpi"
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        2,
        4,
        0,
        2,
    )
    assert launch.node_rank == 1


def test_reads_os_environ_when_no_mapping_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    launch = read_launch_environment()
    assert (launch.rank, launch.world_size, launch.launcher) == (1, 3, "env")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0),
        dict(rank=1, world_size=2, local_rank=1, local_world_size=2, node_rank=0),
        dict(
            rank=5,
            world_size=8,
            local_rank=1,
            local_world_size=4,
            node_rank=1,
            restart_count=3,
            fork_launched=True,
            mixed_precision="bf16",
            debug=True,
            use_cpu=True,
        ),
        dict(
            rank=2,
            world_size=3,
            local_rank=2,
            local_world_size=3,
            node_rank=0,
            mixed_precision="fp16",
        ),
    ],
)
def test_launch_variables_round_trip(kwargs: dict) -> None:
    variables = launch_variables(master_addr="127.0.0.1", master_port=29400, **kwargs)
    assert all(isinstance(v, str) for v in variables.values())
    launch = read_launch_environment(variables)
    assert launch.launcher == "nbaccel"
    assert launch.master_addr == "127.0.0.1"
    assert launch.master_port == 29400
    for name in ("rank", "world_size", "local_rank", "local_world_size", "node_rank"):
        assert getattr(launch, name) == kwargs[name], name
    assert launch.restart_count == kwargs.get("restart_count", 0)
    assert launch.fork_launched == kwargs.get("fork_launched", False)
    assert launch.mixed_precision == kwargs.get("mixed_precision")
    assert launch.debug == kwargs.get("debug", False)
    assert launch.use_cpu == kwargs.get("use_cpu", False)


def test_launch_variables_set_what_torch_env_rendezvous_needs() -> None:
    variables = launch_variables(
        rank=1,
        world_size=2,
        local_rank=1,
        local_world_size=2,
        node_rank=0,
        master_addr="127.0.0.1",
        master_port=1234,
    )
    assert variables["RANK"] == "1"
    assert variables["WORLD_SIZE"] == "2"
    assert variables["LOCAL_RANK"] == "1"
    assert variables["MASTER_ADDR"] == "127.0.0.1"
    assert variables["MASTER_PORT"] == "1234"
    assert "NBACCEL_MIXED_PRECISION" not in variables
    assert "NBACCEL_DEBUG_MODE" not in variables


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("RANK", {"RANK": "one", "WORLD_SIZE": "2"}),
        ("WORLD_SIZE", {"RANK": "0", "WORLD_SIZE": "2.0"}),
        ("LOCAL_RANK", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "first"}),
        ("LOCAL_WORLD_SIZE", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "two"}),
        ("MASTER_PORT", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "http"}),
        ("GROUP_RANK", {"TORCHELASTIC_RUN_ID": "x", "GROUP_RANK": "n1"}),
        (
            "TORCHELASTIC_RESTART_COUNT",
            {"TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "?"},
        ),
        ("NBACCEL_RESTART_COUNT", {"NBACCEL_RESTART_COUNT": "1.5"}),
        ("OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "r"}),
        ("OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_SIZE": "many"}),
        ("NBACCEL_MIXED_PRECISION", {"NBACCEL_MIXED_PRECISION": "fp32"}),
        ("ACCELERATE_MIXED_PRECISION", {"ACCELERATE_MIXED_PRECISION": "half"}),
        ("NBACCEL_USE_CPU", {"NBACCEL_USE_CPU": "maybe"}),
        ("NBACCEL_FORK_LAUNCHED", {"NBACCEL_FORK_LAUNCHED": "2"}),
    ],
)
def test_malformed_variable_is_named(name: str, env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=rf"\b{name}="):
        read_launch_environment(env)


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "2", "WORLD_SIZE": "2"},
        {"RANK": "5", "WORLD_SIZE": "3", "LOCAL_RANK": "0"},
        {"RANK": "-1", "WORLD_SIZE": "2"},
        {"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"},
    ],
)
def test_rank_outside_world_is_rejected(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="RANK"):
        read_launch_environment(env)


def test_world_size_zero_is_rejected() -> None:
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        read_launch_environment({"RANK": "0", "WORLD_SIZE": "0"})


def test_local_rank_outside_local_world_is_rejected() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}
    with pytest.raises(ValueError, match="LOCAL_RANK=2"):
        read_launch_environment(env)


def test_precision_and_flags_from_accelerate_names() -> None:
    env = {"ACCELERATE_MIXED_PRECISION": "FP16", "ACCELERATE_USE_CPU": "true"}
    launch = read_launch_environment(env)
    assert launch.mixed_precision == "fp16"
    assert launch.use_cpu is True
    env = {"NBACCEL_MIXED_PRECISION": "bf16", "ACCELERATE_MIXED_PRECISION": "fp16"}
    assert read_launch_environment(env).mixed_precision == "bf16"


def test_launch_environment_is_frozen() -> None:
    launch = read_launch_environment({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        launch.rank = 1  # type: ignore[misc]


# --- debug / platform detection ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"NBACCEL_DEBUG_MODE": "1"}, True),
        ({"NBACCEL_DEBUG_MODE": "0"}, False),
        ({"ACCELERATE_DEBUG_MODE": "yes"}, True),
        ({"ACCELERATE_DEBUG_MODE": "true"}, True),
        ({"ACCELERATE_DEBUG_MODE": "TRUE"}, True),
        ({"ACCELERATE_DEBUG_MODE": "1"}, True),
        ({"ACCELERATE_DEBUG_MODE": "no"}, False),
        ({"ACCELERATE_DEBUG_MODE": ""}, False),
    ],
)
def test_debug_mode_requested(env: dict[str, str], expected: bool) -> None:
    assert debug_mode_requested(env) is expected
    assert read_launch_environment(env).debug is expected


def test_debug_mode_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    assert debug_mode_requested() is False
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "yes")
    assert debug_mode_requested() is True


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"PJRT_DEVICE": "TPU"}, True),
        ({"PJRT_DEVICE": "tpu"}, True),
        ({"PJRT_DEVICE": "CPU"}, False),
        ({"PJRT_DEVICE": "CUDA"}, False),
        ({"TPU_NAME": "my-tpu"}, True),
        ({"COLAB_TPU_ADDR": "10.0.0.2:8470"}, True),
        ({"TPU_ACCELERATOR_TYPE": "v4-8"}, True),
        ({"TPU_NAME": ""}, False),
    ],
)
def test_tpu_requested(env: dict[str, str], expected: bool) -> None:
    assert tpu_requested(env) is expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"PJRT_DEVICE": "TPU"}, True),
        ({"PJRT_DEVICE": "CPU"}, True),  # the XLA path on torch_xla's CPU device, off TPU
        ({"PJRT_DEVICE": "CUDA"}, True),
        ({"PJRT_DEVICE": " "}, False),
        ({"TPU_NAME": "my-tpu"}, True),
        ({"PJRT_DEVICE": "CPU", "USE_TORCH_XLA": "0"}, False),  # Accelerate's switch
        ({"TPU_NAME": "my-tpu", "USE_TORCH_XLA": "false"}, False),
        ({"PJRT_DEVICE": "CPU", "USE_TORCH_XLA": "1"}, True),
    ],
)
def test_xla_requested(env: dict[str, str], expected: bool) -> None:
    assert xla_requested(env) is expected


def test_xla_device_name_and_bf16_storage() -> None:
    assert xla_device_name({"PJRT_DEVICE": "cpu"}) == "CPU"
    assert xla_device_name({"TPU_NAME": "x"}) == "TPU"
    assert xla_bf16_storage_requested({}) is False
    assert xla_bf16_storage_requested({"XLA_USE_BF16": "1"}) is True
    assert xla_bf16_storage_requested({"XLA_DOWNCAST_BF16": "1"}) is True
    assert xla_bf16_storage_requested({"XLA_USE_BF16": "0"}) is False


def test_xla_not_available_off_tpu_and_never_imported() -> None:
    assert xla_available({}) is False
    assert xla_available({"PJRT_DEVICE": "CPU"}) is False
    assert xla_available() is False
    assert "torch_xla" not in sys.modules


def test_colab_and_kaggle_detection() -> None:
    assert in_colab({}) is ("google.colab" in sys.modules)
    assert in_colab({"COLAB_RELEASE_TAG": "release-colab_20240101"}) is True
    assert in_colab({"COLAB_GPU": "1"}) is True
    assert in_kaggle({}) is False
    assert in_kaggle({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}) is True


def test_not_in_notebook_under_pytest() -> None:
    assert in_notebook() is False


_FAKE_XLA_PROGRAM = textwrap.dedent(
    """
    import sys
    from nbaccel import PartialState, DistributedType
    from nbaccel.environment import xla_available, choose_device, read_launch_environment

    assert xla_available() is False, "xla_available() should be False"
    choice = choose_device(read_launch_environment())
    assert choice.kind == "cpu" and choice.device.type == "cpu", choice
    state = PartialState()
    assert state.distributed_type == DistributedType.NO, state.distributed_type
    assert state.device.type == "cpu", state.device
    assert "torch_xla" not in sys.modules, "torch_xla was imported"
    print("DETECTION-OK")
    """
)


def _run_with_fake_torch_xla(
    tmp_path: Path, body: str, extra_env: dict[str, str], environ_factory
) -> subprocess.CompletedProcess[str]:
    package = tmp_path / "site" / "torch_xla"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body)
    env = environ_factory(**extra_env)
    env["PYTHONPATH"] = str(tmp_path / "site")
    return subprocess.run(
        [sys.executable, "-c", _FAKE_XLA_PROGRAM],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# Only a stand-in can be a broken install; an importable torch_xla left alone off TPU is the
# xla tier's (tests/xla/test_xla_detection.py, the real package).
def test_broken_torch_xla_does_not_break_detection(tmp_path: Path, subprocess_environ) -> None:
    body = "raise ImportError('libtpu.so: cannot open shared object file')\n"
    result = _run_with_fake_torch_xla(tmp_path, body, {"PJRT_DEVICE": "TPU"}, subprocess_environ)
    assert result.returncode == 0, result.stderr
    assert "DETECTION-OK" in result.stdout


# --- choose_device / cuda_device_count --------------------------------------------------------


@needs_no_accelerator
def test_choose_device_distributed_cpu_uses_gloo() -> None:
    launch = read_launch_environment({"RANK": "1", "WORLD_SIZE": "2", **MASTER})
    choice = choose_device(launch)
    assert choice.device == torch.device("cpu")
    assert choice.backend == "gloo"
    assert choice.kind == "cpu"


@needs_no_accelerator
def test_choose_device_one_process_has_no_backend() -> None:
    choice = choose_device(read_launch_environment({}))
    assert choice.device == torch.device("cpu")
    assert choice.backend is None
    assert choice.kind == "cpu"


def test_choose_device_forced_cpu() -> None:
    launch = read_launch_environment({"RANK": "0", "WORLD_SIZE": "3", **MASTER})
    assert choose_device(launch, cpu=True) == environment.DeviceChoice(
        torch.device("cpu"), "gloo", "cpu"
    )
    assert choose_device(LaunchEnvironment(), cpu=True) == environment.DeviceChoice(
        torch.device("cpu"), None, "cpu"
    )
    launch = read_launch_environment({"NBACCEL_USE_CPU": "1"})
    assert choose_device(launch) == environment.DeviceChoice(torch.device("cpu"), None, "cpu")


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="this torch build has CUDA")
def test_cuda_device_count_is_zero_on_cpu_build() -> None:
    assert environment.cuda_device_count() == 0


@pytest.mark.parametrize(
    ("visible", "count", "expected"),
    [
        (None, 4, 4),
        ("0,1", 4, 2),
        ("1, 3", 4, 2),
        ("", 4, 0),
        ("0,7,1", 4, 1),
        ("-1", 4, 0),
        ("GPU-1234abcd", 2, 0),
        ("0,1,2", 0, 0),
    ],
)
def test_cuda_visible_devices_filter(visible: str | None, count: int, expected: int) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert devices._visible_filter(count, env) == expected
