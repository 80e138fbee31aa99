"""Unit tests for the CUDA-not-yet-initialised guard and its init-site tracer."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Iterator

import pytest
import torch

from nbaccel.launch import guard
from nbaccel.launch.guard import (
    CudaInitializedError,
    InitSite,
    check_child_not_bad_fork,
    check_fork_safe,
    cuda_init_site,
    cuda_initialized,
    install_cuda_init_tracer,
)

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="these tests initialise CUDA on purpose; CPU builds only"
)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No recorded site and torch's own _lazy_init; both restored after the test."""
    original = getattr(torch.cuda._lazy_init, "__wrapped__", torch.cuda._lazy_init)
    for name, module in list(sys.modules.items()):
        if name == "torch.cuda" or (
            name.startswith("torch.cuda.") and "_lazy_init" in vars(module)
        ):
            monkeypatch.setattr(module, "_lazy_init", original)
    monkeypatch.setattr(guard._TRACE, "site", None)
    monkeypatch.delenv("NBACCEL_DEBUG_MODE", raising=False)
    monkeypatch.delenv("ACCELERATE_DEBUG_MODE", raising=False)
    yield


@pytest.fixture
def pretend_initialised(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Pretend CUDA is initialised: there is no GPU here, so is_initialized is the stand-in."""

    def pretend() -> None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    return pretend


def _touch_cuda_directly() -> None:
    torch.cuda._lazy_init()  # the site line


def _touch_cuda_through_tensor() -> None:
    torch.zeros(1).cuda()


def _touch_cuda_through_torch_python() -> None:
    torch.cuda.current_device()


def _line_of(function: object, offset: int = 1) -> int:
    return function.__code__.co_firstlineno + offset  # type: ignore[attr-defined]


def _record(toucher: object) -> InitSite:
    with pytest.raises((AssertionError, RuntimeError)):
        toucher()  # type: ignore[operator]
    site = cuda_init_site()
    assert site is not None
    return site


def test_install_is_idempotent(fresh: None) -> None:
    original = torch.cuda._lazy_init
    install_cuda_init_tracer()
    wrapped = torch.cuda._lazy_init
    install_cuda_init_tracer()
    assert wrapped is not original
    assert torch.cuda._lazy_init is wrapped
    assert wrapped.__wrapped__ is original  # type: ignore[attr-defined]
    assert torch.cuda.random._lazy_init is wrapped


def test_nothing_recorded_before_cuda_is_touched(fresh: None) -> None:
    install_cuda_init_tracer()
    torch.zeros(3).sum()
    assert cuda_init_site() is None
    assert not cuda_initialized()


def test_direct_call_raises_torch_error_and_records_site(fresh: None) -> None:
    install_cuda_init_tracer()
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        _touch_cuda_directly()
    site = cuda_init_site()
    assert site is not None
    assert site.filename == __file__
    assert site.lineno == _line_of(_touch_cuda_directly)
    assert site.source_line == "torch.cuda._lazy_init()  # the site line"
    assert site.cell is None
    assert site.describe() == f"{__file__}, line {site.lineno}: {site.source_line}"


def test_tensor_cuda_goes_through_the_tracer(fresh: None) -> None:
    install_cuda_init_tracer()
    site = _record(_touch_cuda_through_tensor)
    assert (site.filename, site.lineno) == (__file__, _line_of(_touch_cuda_through_tensor))
    assert site.source_line == "torch.zeros(1).cuda()"


def test_torch_and_nbaccel_frames_are_skipped(fresh: None) -> None:
    install_cuda_init_tracer()
    site = _record(_touch_cuda_through_torch_python)
    assert site.filename == __file__
    assert site.lineno == _line_of(_touch_cuda_through_torch_python)
    assert "torch/cuda/__init__.py" not in site.stack
    assert "nbaccel/launch/guard.py" not in site.stack
    # The stack is outermost first and ends at the site.
    assert site.stack.rstrip().endswith("torch.cuda.current_device()")
    assert "in test_torch_and_nbaccel_frames_are_skipped" in site.stack


def test_only_the_first_call_is_recorded(fresh: None) -> None:
    install_cuda_init_tracer()
    first = _record(_touch_cuda_through_tensor)
    second = _record(_touch_cuda_directly)
    assert second is first
    assert first.lineno == _line_of(_touch_cuda_through_tensor)


def test_not_recorded_when_tracer_not_installed(fresh: None) -> None:
    with pytest.raises(AssertionError):
        _touch_cuda_directly()
    assert cuda_init_site() is None


def test_check_fork_safe_passes_without_cuda(fresh: None) -> None:
    install_cuda_init_tracer()
    with pytest.raises(AssertionError):
        _touch_cuda_directly()  # attempted but failed: CUDA is still not initialised
    assert not cuda_initialized()
    check_fork_safe()
    check_fork_safe(debug=True)


def test_check_fork_safe_names_site_and_spawn(
    fresh: None, pretend_initialised: Callable[[], None]
) -> None:
    install_cuda_init_tracer()
    site = _record(_touch_cuda_directly)
    pretend_initialised()
    assert cuda_initialized()
    with pytest.raises(CudaInitializedError) as caught:
        check_fork_safe(debug=False)
    message = str(caught.value)
    assert caught.value.site is site
    assert isinstance(caught.value, RuntimeError)
    assert site.describe() in message
    assert f"line {_line_of(_touch_cuda_directly)}" in message
    assert 'start_method="spawn"' in message
    assert "already initialised" in message
    assert "nothing was started" in message
    assert "restart the kernel" in message
    assert "Traceback" not in message
    assert site.stack not in message


def test_check_fork_safe_debug_includes_stack(
    fresh: None, pretend_initialised: Callable[[], None]
) -> None:
    install_cuda_init_tracer()
    site = _record(_touch_cuda_through_torch_python)
    pretend_initialised()
    with pytest.raises(CudaInitializedError) as caught:
        check_fork_safe(debug=True)
    assert site.stack.rstrip() in str(caught.value)
    assert "in test_check_fork_safe_debug_includes_stack" in str(caught.value)


@pytest.mark.parametrize("variable", ["NBACCEL_DEBUG_MODE", "ACCELERATE_DEBUG_MODE"])
def test_check_fork_safe_debug_follows_environment(
    fresh: None,
    pretend_initialised: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    install_cuda_init_tracer()
    site = _record(_touch_cuda_directly)
    pretend_initialised()
    with pytest.raises(CudaInitializedError) as quiet:
        check_fork_safe()
    assert site.stack.rstrip() not in str(quiet.value)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(CudaInitializedError) as loud:
        check_fork_safe()
    assert site.stack.rstrip() in str(loud.value)


def test_check_fork_safe_without_site_says_how_to_get_it(
    fresh: None, pretend_initialised: Callable[[], None]
) -> None:
    pretend_initialised()
    with pytest.raises(CudaInitializedError) as caught:
        check_fork_safe(debug=True)
    message = str(caught.value)
    assert caught.value.site is None
    assert "NBACCEL_DEBUG_MODE=1" in message
    assert "install_cuda_init_tracer()" in message
    assert 'start_method="spawn"' in message


def test_bad_fork_counts_as_initialised(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    assert cuda_initialized()
    with pytest.raises(CudaInitializedError):
        check_fork_safe()


def test_child_check_passes_in_a_clean_process(fresh: None) -> None:
    check_child_not_bad_fork()


def test_child_check_raises_in_a_bad_fork(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    install_cuda_init_tracer()
    site = _record(_touch_cuda_directly)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    with pytest.raises(CudaInitializedError) as caught:
        check_child_not_bad_fork()
    message = str(caught.value)
    assert "forked from a process that had already initialised CUDA" in message
    assert site.describe() in message
    assert 'start_method="spawn"' in message


def test_tracer_never_records_once_cuda_is_initialised(
    fresh: None, pretend_initialised: Callable[[], None]
) -> None:
    pretend_initialised()
    install_cuda_init_tracer()
    _touch_cuda_directly()  # torch's _lazy_init returns at once when CUDA is initialised
    assert cuda_init_site() is None


def test_error_and_site_survive_pickling(
    fresh: None, pretend_initialised: Callable[[], None]
) -> None:
    install_cuda_init_tracer()
    _record(_touch_cuda_directly)
    pretend_initialised()
    with pytest.raises(CudaInitializedError) as caught:
        check_fork_safe()
    clone = pickle.loads(pickle.dumps(caught.value))
    assert type(clone) is CudaInitializedError
    assert str(clone) == str(caught.value)
    assert clone.site == caught.value.site


def test_describe_names_notebook_cells() -> None:
    site = InitSite("/tmp/ipykernel_1/123.py", 3, 7, "x = torch.zeros(1).cuda()", "")
    assert site.describe() == "notebook cell In [7], line 3: x = torch.zeros(1).cuda()"
    assert InitSite("train.py", 12, None, "", "").describe() == "train.py, line 12"


def test_plain_ipython_cell_names_are_recognised() -> None:
    assert guard._cell_number("<ipython-input-12-0a1b2c3d4e>") == 12
    assert guard._cell_number(__file__) is None
