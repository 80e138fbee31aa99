"""The state that Accelerate's own tests change, side by side with Accelerate: ``debug`` and
``AcceleratorState.distributed_type`` are settable, and ``destroy_process_group`` works after
the state was reset (scripts end with it after a test of the reset)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import accelerate
import accelerate.state
import pytest
import torch.distributed as dist

import nbaccel
import nbaccel.state

LIBRARIES = ["nbaccel", "accelerate"]


@pytest.fixture
def lib(request: pytest.FixtureRequest) -> Iterator[SimpleNamespace]:
    """The names a test uses, from nbaccel or from Accelerate; Accelerate's state is
    forgotten before and after (nbaccel's by the autouse fixture of tests/conftest.py)."""
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    module: Any = nbaccel if request.param == "nbaccel" else accelerate
    state_module: Any = nbaccel.state if request.param == "nbaccel" else accelerate.state
    yield SimpleNamespace(
        name=request.param,
        Accelerator=module.Accelerator,
        DistributedType=module.DistributedType,
        PartialState=state_module.PartialState,
        AcceleratorState=state_module.AcceleratorState,
    )
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture
def group() -> Iterator[None]:
    """A real process group of one (gloo over an in-memory store), destroyed afterwards if the
    test left it."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


# --- debug -------------------------------------------------------------------------------------


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
def test_debug_is_settable_and_every_partial_state_sees_it(lib: SimpleNamespace) -> None:
    state = lib.PartialState(cpu=True)
    assert state.debug is False
    state.debug = True
    assert state.debug is True and lib.PartialState().debug is True
    lib.PartialState().debug = False
    assert state.debug is False


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
def test_debug_is_settable_on_the_accelerator_state(lib: SimpleNamespace) -> None:
    state = lib.Accelerator(cpu=True).state
    state.debug = True
    assert state.debug is True
    state.debug = False
    assert state.debug is False


def test_debug_must_be_a_bool() -> None:
    state = nbaccel.PartialState(cpu=True)
    with pytest.raises(TypeError, match=r"PartialState\.debug must be True or False, got 'yes'"):
        state.debug = "yes"  # type: ignore[assignment]
    assert state.debug is False


def test_debug_set_is_forgotten_with_the_state() -> None:
    nbaccel.PartialState(cpu=True).debug = True
    nbaccel.PartialState._reset_state()
    assert nbaccel.PartialState(cpu=True).debug is False
    assert nbaccel.PartialState._shared_state["debug"] is False


# --- AcceleratorState.distributed_type ---------------------------------------------------------


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
def test_distributed_type_is_settable_on_the_accelerator_state(lib: SimpleNamespace) -> None:
    """As Accelerate's tests do (``accelerator.state.distributed_type = FSDP``, then back):
    the Accelerator reports it, ``PartialState`` keeps the process's own."""
    accelerator = lib.Accelerator(cpu=True)
    original = accelerator.state.distributed_type
    assert original == lib.DistributedType.NO
    accelerator.state.distributed_type = lib.DistributedType.FSDP
    assert accelerator.distributed_type == lib.DistributedType.FSDP
    assert lib.PartialState().distributed_type == lib.DistributedType.NO
    accelerator.state.distributed_type = original
    assert accelerator.distributed_type == lib.DistributedType.NO


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
def test_a_set_distributed_type_is_forgotten_with_the_state(lib: SimpleNamespace) -> None:
    lib.Accelerator(cpu=True).state.distributed_type = lib.DistributedType.MULTI_GPU
    lib.AcceleratorState._reset_state()
    assert lib.Accelerator(cpu=True).distributed_type == lib.DistributedType.NO


def test_a_later_accelerator_state_keeps_the_set_distributed_type() -> None:
    """Unlike Accelerate, where creating an ``AcceleratorState()`` copies the process's type
    back over the one that was set."""
    accelerator = nbaccel.Accelerator(cpu=True)
    accelerator.state.distributed_type = nbaccel.DistributedType.FSDP
    assert nbaccel.AcceleratorState().distributed_type == nbaccel.DistributedType.FSDP
    assert accelerator.distributed_type == nbaccel.DistributedType.FSDP


def test_distributed_type_takes_a_name_and_refuses_anything_else() -> None:
    state = nbaccel.Accelerator(cpu=True).state
    state.distributed_type = "multi_cpu"
    assert state.distributed_type is nbaccel.DistributedType.MULTI_CPU
    state.distributed_type = "TPU"  # Accelerate's older name of XLA
    assert state.distributed_type is nbaccel.DistributedType.XLA
    with pytest.raises(ValueError, match=r"distributed_type='GPUS' is not valid.*'MULTI_GPU'"):
        state.distributed_type = "GPUS"
    assert state.distributed_type is nbaccel.DistributedType.XLA
    assert nbaccel.PartialState().distributed_type is nbaccel.DistributedType.NO


def test_partial_state_distributed_type_stays_read_only() -> None:
    with pytest.raises(AttributeError):
        nbaccel.PartialState(cpu=True).distributed_type = nbaccel.DistributedType.FSDP  # type: ignore[misc]


# --- destroy_process_group after a reset -------------------------------------------------------


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
@pytest.mark.parametrize("reset_partial_state", [False, True])
def test_destroy_process_group_after_a_reset_destroys_the_group(
    lib: SimpleNamespace, group: None, reset_partial_state: bool
) -> None:
    """The end of Accelerate's test_script: ``state.destroy_process_group()`` on the
    Accelerator's state after a test reset that state."""
    state = lib.Accelerator(cpu=True).state
    lib.AcceleratorState._reset_state(reset_partial_state=reset_partial_state)
    state.destroy_process_group()
    assert not dist.is_initialized()


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
def test_partial_state_destroys_the_group_after_the_accelerator_state_reset(
    lib: SimpleNamespace, group: None
) -> None:
    partial = lib.PartialState(cpu=True)
    lib.Accelerator(cpu=True)
    lib.AcceleratorState._reset_state()
    lib.PartialState().destroy_process_group()
    assert not dist.is_initialized()
    assert partial.num_processes == 1  # the process state itself was kept


@pytest.mark.parametrize("lib", LIBRARIES, indirect=True)
def test_a_forked_worker_leaves_the_launchers_group_after_a_reset(
    lib: SimpleNamespace, group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a worker the notebook launcher forked, the group is the launcher's: kept."""
    monkeypatch.setenv("FORK_LAUNCHED", "1")  # Accelerate's variable
    monkeypatch.setenv("NBACCEL_FORK_LAUNCHED", "1")  # nbaccel's
    state = lib.Accelerator(cpu=True).state
    assert state.fork_launched is True
    lib.AcceleratorState._reset_state(reset_partial_state=True)
    state.destroy_process_group()
    assert dist.is_initialized()
