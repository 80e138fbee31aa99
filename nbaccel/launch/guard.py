"""The CUDA-not-yet-initialised guard for forked workers, and the tracing that names the culprit."""

from __future__ import annotations

import functools
import importlib
import linecache
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal, TypeAlias

import torch

from nbaccel import environment

__all__ = [
    "CudaInitializedError",
    "InitSite",
    "StartMethod",
    "check_child_not_bad_fork",
    "check_fork_safe",
    "choose_start_method",
    "cuda_init_site",
    "cuda_initialized",
    "install_cuda_init_tracer",
]

StartMethod: TypeAlias = Literal["fork", "spawn"]  # how a worker starts: what ``auto`` becomes

# Marks the wrapper so that installing twice (or after a module reload) never wraps twice.
_WRAPPER_MARK = "__nbaccel_cuda_init_tracer__"
# IPython without ipykernel names cells "<ipython-input-7-0123abcd>".
_IPYTHON_INPUT = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")
# IPython 7.34 names a cell's top-level code "<cell line: 0>" where Python says "<module>".
_IPYTHON7_CELL_CODE = re.compile(r"^<cell line: \d+>$")


@dataclass(frozen=True)
class InitSite:
    """Where CUDA was first initialised in this process.

    Attributes:
        filename: the real file, or the notebook cell's pseudo-file.
        lineno: the line number in that file or cell.
        cell: the Jupyter execution count (``In [7]``) when the frame is a notebook cell.
        source_line: the code on that line, stripped (``""`` when unknown).
        stack: the user-level traceback at the moment of initialisation, outermost first.
    """

    filename: str
    lineno: int
    cell: int | None
    source_line: str
    stack: str

    def describe(self) -> str:
        """One line naming the site, e.g. ``notebook cell In [7], line 3: x = t.cuda()``."""
        where = f"notebook cell In [{self.cell}]" if self.cell is not None else self.filename
        text = f"{where}, line {self.lineno}"
        return f"{text}: {self.source_line}" if self.source_line else text


class CudaInitializedError(RuntimeError):
    """CUDA is initialised in a process that is about to fork (or was forked) workers.

    Attributes:
        site: where CUDA was first initialised, when the tracer recorded it.
    """

    def __init__(self, message: str, site: InitSite | None = None) -> None:
        super().__init__(message)
        self.site = site

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.site))


class _Trace:
    """The tracer's record: the one piece of module state, set at most once per process."""

    site: InitSite | None = None


_TRACE = _Trace()


def _package_dir(module: Any) -> str:
    return os.path.realpath(os.path.dirname(module.__file__)) + os.sep


@functools.lru_cache(maxsize=1)
def _skipped_dirs() -> tuple[str, ...]:
    nbaccel = sys.modules["nbaccel"]
    return (_package_dir(torch), _package_dir(nbaccel), _package_dir(importlib))


def _is_internal(filename: str) -> bool:
    """True for frames inside torch, nbaccel or importlib (including its frozen bootstrap)."""
    if filename.startswith("<frozen importlib"):
        return True
    if filename.startswith("<"):
        return False
    return os.path.realpath(filename).startswith(_skipped_dirs())


def _cell_number(filename: str) -> int | None:
    """The execution count of the notebook cell compiled under ``filename``, if it is one.

    ipykernel compiles each cell under a pseudo-file such as ``/tmp/ipykernel_<pid>/<hash>.py``.
    IPython 8's ``CachingCompiler`` maps that name to the execution count in ``_filename_map``;
    IPython 7 (Colab, Kaggle) keeps no such map, so the cell is found by its code (see
    :func:`_cell_from_history`). Plain IPython names cells ``<ipython-input-<count>-<hash>>``.
    """
    match = _IPYTHON_INPUT.match(filename)
    if match:
        return int(match.group(1))
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    if shell is None:
        return None
    filename_map = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if isinstance(filename_map, dict):
        number = filename_map.get(filename)
        return number if isinstance(number, int) else None
    return _cell_from_history(shell, filename)


def _cell_from_history(shell: Any, filename: str) -> int | None:
    """IPython 7: the latest cell whose code is what ``linecache`` holds for ``filename``.

    IPython caches every cell's (transformed) code in ``linecache`` under its pseudo-file and
    keeps the same code, by execution count, in ``history_manager.input_hist_parsed``.
    """
    history = getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None)
    if filename not in linecache.cache or not isinstance(history, list):
        return None
    code = "".join(linecache.getlines(filename)).rstrip("\n")
    for number in range(len(history) - 1, 0, -1):
        if isinstance(history[number], str) and history[number].rstrip("\n") == code:
            return number
    return None


def _walk(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _record_site(frame: FrameType | None) -> InitSite | None:
    """Build the site from ``frame`` outwards, skipping torch, nbaccel and importlib frames."""
    user = [f for f in _walk(frame) if not _is_internal(f.f_code.co_filename)]
    if not user:
        return None
    innermost = user[0]
    cells = [_cell_number(f.f_code.co_filename) for f in user]
    outermost_cell = max((i for i, c in enumerate(cells) if c is not None), default=len(user) - 1)
    # In a notebook, the kernel's own machinery sits outside the outermost cell: drop it.
    shown = traceback.StackSummary.extract(
        ((f, f.f_lineno) for f in reversed(user[: outermost_cell + 1])), lookup_lines=True
    )
    for frame_summary, cell in zip(reversed(shown), cells, strict=False):
        if cell is not None:  # name cells as IPython's own tracebacks do
            frame_summary.filename = f"Cell In[{cell}]"
            if _IPYTHON7_CELL_CODE.match(frame_summary.name):
                frame_summary.name = "<module>"
    summary = shown[-1]
    return InitSite(
        filename=innermost.f_code.co_filename,
        lineno=innermost.f_lineno,
        cell=cells[0],
        source_line=(summary.line or "").strip(),
        stack="".join(shown.format()),
    )


def _traced(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _lazy_init(*args: Any, **kwargs: Any) -> Any:
        if _TRACE.site is None:
            try:
                if not cuda_initialized():
                    _TRACE.site = _record_site(sys._getframe(1))
            except Exception:  # tracing must never change what torch does
                pass
        return original(*args, **kwargs)

    setattr(_lazy_init, _WRAPPER_MARK, True)
    return _lazy_init


def install_cuda_init_tracer() -> None:
    """Record where CUDA gets initialised in this process, to name it in guard errors.

    Wraps ``torch.cuda._lazy_init``, which every path into CUDA goes through (torch's C++ lazy
    init looks it up on the ``torch.cuda`` module by name), so that the first call made while
    CUDA is not initialised records an :class:`InitSite` before torch runs. Idempotent, cheap,
    and safe on CPU-only builds of torch; behaviour is otherwise unchanged.
    """
    current = torch.cuda._lazy_init
    if getattr(current, _WRAPPER_MARK, False):
        return
    wrapper = _traced(current)
    torch.cuda._lazy_init = wrapper
    # Submodules that did `from . import _lazy_init` (torch.cuda.random) hold the original.
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.cuda.") and getattr(module, "_lazy_init", None) is current:
            vars(module)["_lazy_init"] = wrapper


def cuda_init_site() -> InitSite | None:
    """Where CUDA was first initialised, if the tracer was installed in time to see it."""
    return _TRACE.site


def cuda_initialized() -> bool:
    """True when CUDA is initialised here or this is a bad fork; never initialises CUDA."""
    return bool(torch.cuda.is_initialized() or torch.cuda._is_in_bad_fork())


def _site_text(site: InitSite | None, debug: bool) -> str:
    if site is None:
        return (
            "nbaccel could not tell which line initialised CUDA. To have it named next time, "
            "restart the kernel and, before the line that touches CUDA, set "
            "NBACCEL_DEBUG_MODE=1 and import nbaccel.launch (or call "
            "nbaccel.launch.guard.install_cuda_init_tracer())."
        )
    text = f"CUDA was first initialised at {site.describe()}"
    if debug and site.stack:
        text += f"\nTraceback of that initialisation (most recent call last):\n{site.stack}"
    return text.rstrip("\n")


def check_fork_safe(debug: bool | None = None) -> None:
    """Refuse to fork workers when CUDA is already initialised in this process.

    Args:
        debug: include the full recorded stack in the error; ``None`` follows
            ``NBACCEL_DEBUG_MODE`` / ``ACCELERATE_DEBUG_MODE``.

    Raises:
        CudaInitializedError: CUDA is initialised, so forked workers could not use it.
    """
    if not cuda_initialized():
        return
    if debug is None:
        debug = environment.debug_mode_requested()
    site = _TRACE.site
    message = (
        "CUDA was already initialised in this process, so workers started with fork cannot "
        "use it; nothing was started.\n"
        f"{_site_text(site, debug)}\n"
        'To fix it, either pass start_method="spawn" (which works with CUDA initialised), '
        "or restart the kernel and keep all CUDA work (.cuda(), .to('cuda'), "
        "torch.cuda.* calls) inside the function you launch."
    )
    raise CudaInitializedError(message, site)


def choose_start_method(requested: str, debug: bool | None = None) -> StartMethod:
    """``"fork"`` or ``"spawn"`` for a validated ``start_method`` (``auto``, ``fork``, ``spawn``).

    ``auto`` forks on Linux while CUDA is not initialised here, else spawns; ``fork`` is
    refused with :class:`CudaInitializedError` once CUDA is initialised (the launcher and the
    worker pool share this one guard).
    """
    if requested == "fork":
        check_fork_safe(debug)
        return "fork"
    if requested == "spawn":
        return "spawn"
    if sys.platform.startswith("linux") and not cuda_initialized():
        return "fork"
    return "spawn"


def check_child_not_bad_fork() -> None:
    """In a forked worker, fail clearly when the parent had initialised CUDA before forking.

    Raises:
        CudaInitializedError: this process is a fork of a parent with CUDA initialised.
    """
    if not torch.cuda._is_in_bad_fork():
        return
    site = _TRACE.site
    where = f" (at {site.describe()})" if site is not None else ""
    raise CudaInitializedError(
        f"This worker was forked from a process that had already initialised CUDA{where}, "
        "and CUDA cannot be re-initialised in a forked process. Launch with "
        'start_method="spawn", or restart the kernel and keep all CUDA work inside the '
        "launched function.",
        site,
    )
