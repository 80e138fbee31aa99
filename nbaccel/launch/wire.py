"""How objects travel between the notebook's process and a worker."""

from __future__ import annotations

import copyreg
import io
import marshal
import pickle
import types
from collections import ChainMap
from typing import Any

import cloudpickle

__all__ = ["dumps_for_parent", "dumps_for_worker"]


def _code_whole(code: types.CodeType) -> tuple[Any, tuple[bytes]]:
    """A code object as the interpreter writes it: with its file name (``marshal``'s format is
    the same in every process of one Python version, as a launch's processes are)."""
    return marshal.loads, (marshal.dumps(code),)


class _WholeCodePickler(cloudpickle.Pickler):
    """cloudpickle, except that a function's code keeps its file name (cloudpickle writes
    ``<dynamic-code>``): a worker's traceback, and its answer to "where are you?", then name
    the notebook cell or file the function came from."""

    dispatch_table = ChainMap(
        {types.CodeType: _code_whole}, cloudpickle.Pickler.dispatch_table, copyreg.dispatch_table
    )


def dumps_for_worker(obj: Any) -> bytes:
    """Pickle ``obj`` (functions defined in the notebook by value, as cloudpickle does) for a
    worker; ``cloudpickle.loads`` reads it."""
    buffer = io.BytesIO()
    _WholeCodePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


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
