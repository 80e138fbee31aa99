"""Progress bars in launched workers: what ``tqdm.notebook`` (and so ``tqdm.auto``) builds there.

A worker forked from a Jupyter kernel inherits ``tqdm.notebook`` if the kernel imported it (for
instance through ``tqdm.auto``). Widget messages sent from a fork are dropped by the kernel, so
such a bar would never show: a worker builds either a text bar, which reaches the cell through
the launcher's output relay, or (when the launcher draws rich output) a bar that sends its
state to the parent (``display.py``). :func:`notebook_bars_build` is the one patch of tqdm.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["notebook_bars_build", "text_bars_in_worker"]


def notebook_bars_build(factory: Callable[..., Any], load: bool = False) -> bool:
    """Make ``tqdm.notebook.tqdm_notebook(...)`` return ``factory(...)`` in this process.

    ``__new__`` is replaced on the class itself, so references taken before the worker started
    (``from tqdm.auto import tqdm`` in the kernel) build the new bars too. Returns False when
    ``tqdm.notebook`` was not loaded (and ``load`` does not ask to load it).
    """
    if load and "tqdm.notebook" not in sys.modules:
        import tqdm.notebook  # noqa: F401 - loaded to be patched
    notebook = sys.modules.get("tqdm.notebook")
    if notebook is None:
        return False

    def build(cls: type, *args: Any, **kwargs: Any) -> Any:
        return factory(*args, **kwargs)

    notebook.tqdm_notebook.__new__ = build
    return True


def _text_bar(*args: Any, **kwargs: Any) -> Any:
    # tqdm loads in a worker only once it draws a bar
    import tqdm.std

    kwargs.pop("display", None)  # tqdm.notebook-only argument
    return tqdm.std.tqdm(*args, **kwargs)


def text_bars_in_worker() -> bool:
    """Make ``tqdm.notebook`` (and so ``tqdm.auto``) build text bars in this process.

    Returns True when ``tqdm.notebook`` was loaded and is now patched.
    """
    return notebook_bars_build(_text_bar)
