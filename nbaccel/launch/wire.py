"""How objects travel from a worker back to the notebook's process."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

__all__ = ["dumps_for_parent"]


def dumps_for_parent(obj: Any) -> bytes:
    """Pickle ``obj`` so that the launcher gets back objects of its *own* classes.

    Plain pickle refers to classes by name: in a forked worker a class defined in the notebook
    is then the kernel's own class again, so ``except NotebookError`` and ``isinstance`` work
    in the cell. Where a name cannot be looked up (classes shipped by value to a spawned
    worker), cloudpickle sends the class itself.
    """
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
