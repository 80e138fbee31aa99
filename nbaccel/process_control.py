"""Process control outside an Accelerator: ``wait_for_everyone`` and a ``tqdm`` shown once
per machine (Accelerate's ``accelerate.utils`` names)."""

from __future__ import annotations

from typing import Any

from .state import PartialState

__all__ = ["tqdm", "wait_for_everyone"]


def wait_for_everyone() -> None:
    """Block until every process of the job gets here (``PartialState().wait_for_everyone()``)."""
    PartialState().wait_for_everyone()


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm``, shown on each machine's first process only (every process with
    ``main_process_only=False``)."""
    # tqdm.auto chooses between the notebook and the terminal bar when imported
    from tqdm.auto import tqdm as _tqdm

    if args and isinstance(args[0], bool):
        raise ValueError(
            "Passing True or False as the first argument of tqdm is not supported; use the "
            "main_process_only keyword argument."
        )
    disable = kwargs.pop("disable", False)
    if main_process_only and not disable:
        disable = PartialState().local_process_index != 0
    return _tqdm(*args, **kwargs, disable=disable)
