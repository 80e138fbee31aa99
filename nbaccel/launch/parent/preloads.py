"""What the notebook loads once before its ranks fork from it.

``import nbaccel`` is lazy (``nbaccel/__init__.py``): a module the notebook never asked for is
not loaded there, so every forked rank that needs it would import it for itself, at every
launch (the ``Accelerator`` with FSDP's modules: about half a second a rank). The layers above
the launcher register here what a rank commonly needs (``nbaccel/__init__.py``: the
``Accelerator``; in a kernel, what the worker's display patches comes too), and a launch that
forks loads it once in the notebook first
(``localranks.ThisMachine.start``); later forks find it loaded. A host's agent does not load
them: there each rank imports what its function uses.
"""

from __future__ import annotations

from collections.abc import Callable

from ..worker.display import load_before_fork

__all__ = ["preload_for_fork", "register_fork_preload"]

_LOADERS: list[Callable[[], None]] = []


def register_fork_preload(loader: Callable[[], None]) -> None:
    """Call ``loader()`` in the notebook before ranks fork from it (once each: a loader that
    imports costs nothing after its first call)."""
    if not callable(loader):
        raise TypeError(f"a fork preload must be callable, got {type(loader).__name__}.")
    if loader not in _LOADERS:
        _LOADERS.append(loader)


def preload_for_fork(display: bool) -> None:
    """Run every registered loader (a launch about to fork its ranks); with ``display`` (the
    ranks send rich output and notebook bars to the cell) also what their display patches."""
    if display:
        load_before_fork()
    for loader in _LOADERS:
        loader()
