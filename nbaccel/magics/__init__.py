"""The IPython extension: ``%load_ext nbaccel``, then ``%nbaccel`` and ``%%nbaccel``."""

from __future__ import annotations

from typing import Any

from .commands import PoolMagics

__all__ = ["PoolMagics", "active_pool", "load_ipython_extension", "unload_ipython_extension"]


def _magics(shell: Any) -> PoolMagics | None:
    found = shell.magics_manager.registry.get(PoolMagics.__name__)
    return found if isinstance(found, PoolMagics) else None


def load_ipython_extension(shell: Any) -> None:
    """Register the magics with ``shell`` (``%load_ext nbaccel``); loading twice is harmless."""
    if _magics(shell) is None:
        shell.register_magics(PoolMagics(shell))


def unload_ipython_extension(shell: Any) -> None:
    """Stop the pool, switch auto mode off and remove the magics (``%unload_ext nbaccel``)."""
    magics = _magics(shell)
    if magics is None:
        return
    magics.auto.switch(False)
    if magics.pool is not None:
        pool, magics.pool = magics.pool, None
        pool.shutdown()
    for kind in ("line", "cell"):
        shell.magics_manager.magics[kind].pop("nbaccel", None)
    shell.magics_manager.registry.pop(PoolMagics.__name__, None)


def active_pool(shell: Any = None) -> Any:
    """The pool that ``%nbaccel start`` started in this kernel, or None.

    Use it for what the magics do not cover, e.g. ``active_pool().push({"lr": 1e-3})``.
    """
    if shell is None:
        # IPython is there only in a notebook (the notebook extra)
        from IPython import get_ipython

        shell = get_ipython()
    magics = _magics(shell) if shell is not None else None
    return None if magics is None else magics.pool
