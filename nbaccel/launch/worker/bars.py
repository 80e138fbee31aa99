"""Progress bars in launched workers: notebook (widget) bars become text bars.

A worker forked from a Jupyter kernel inherits ``tqdm.notebook`` if the kernel imported it (for
instance through ``tqdm.auto``). Widget messages sent from a fork are dropped by the kernel, so
such a bar would never show; a text bar reaches the cell through the launcher's output relay.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["text_bars_in_worker"]


def _text_bar(cls: type, *args: Any, **kwargs: Any) -> Any:
    import tqdm.std

    kwargs.pop("display", None)  # tqdm.notebook-only argument
    return tqdm.std.tqdm(*args, **kwargs)


def text_bars_in_worker() -> bool:
    """Make ``tqdm.notebook`` (and so ``tqdm.auto``) build text bars in this process.

    Returns True when ``tqdm.notebook`` was loaded and is now patched.
    """
    notebook = sys.modules.get("tqdm.notebook")
    if notebook is None:
        return False
    notebook.tqdm_notebook.__new__ = _text_bar
    return True
