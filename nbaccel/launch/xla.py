"""The TPU path: launch through ``torch_xla``'s multiprocessing spawn (Colab, Kaggle, TPU VMs).

``torch_xla`` is imported here only, and only when a TPU is requested and the package imports
(see ``environment.xla_available``). Workers run the same core as every other path:
``PartialState()`` inside the function reports ``DistributedType.XLA`` and the XLA device.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from ..environment import fsdp_launch_variables
from ..state.registry import reset_registry
from .config import LaunchConfig
from .errors import RankFate, build_error, capture_exception, root_cause
from .variables import temporary_environment

__all__ = ["launch_xla"]


class _XlaEntry:
    """The picklable per-process entry that ``xmp.spawn`` calls with the process index."""

    def __init__(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        queue: Any,
    ):
        self.function, self.args, self.kwargs, self.queue = function, args, kwargs, queue

    def __call__(self, index: int) -> None:
        reset_registry()
        try:
            result = self.function(*self.args, **self.kwargs)
            self.queue.put((index, "result", cloudpickle.dumps(result)))
        except BaseException as exc:
            self.queue.put((index, "error", capture_exception(exc, time.time())))
            raise


def launch_xla(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
) -> list[Any]:
    """Run ``function`` on every TPU core of this host; return the results by core index."""
    import torch_xla.distributed.xla_multiprocessing as xmp

    queue = multiprocessing.get_context("fork").SimpleQueue()
    messages: list[tuple[int, str, Any]] = []
    done = threading.Event()

    def drain() -> None:  # read while workers write, so large results cannot block them
        while not (done.is_set() and queue.empty()):
            if queue.empty():
                time.sleep(0.01)
                continue
            messages.append(queue.get())

    reader = threading.Thread(target=drain, name="nbaccel-xla-results", daemon=True)
    reader.start()
    nprocs = 1 if config.num_processes == 1 else None
    print(f"Launching on TPU ({'1 core' if nprocs == 1 else 'every core of this host'}).")
    failure: BaseException | None = None
    try:
        with temporary_environment(_xla_variables(config)):
            xmp.spawn(
                _XlaEntry(function, args, kwargs, queue),
                args=(),
                nprocs=nprocs,
                start_method="fork",
            )
    except Exception as exc:  # a worker failed: its own message says which and why
        failure = exc
    finally:
        done.set()
        reader.join()
        queue.close()
    return _collect(messages, failure)


def _xla_variables(config: LaunchConfig) -> dict[str, str | None]:
    """The launcher's choices for the forked TPU processes."""
    changes: dict[str, str | None] = {"NBACCEL_MIXED_PRECISION": config.mixed_precision}
    if config.mixed_precision == "bf16":
        changes["XLA_USE_BF16"] = "1"
    if config.debug:
        changes["NBACCEL_DEBUG_MODE"] = "1"
    if config.fsdp_config is not None:  # xla: true in it shards with XLA's FSDP
        changes.update(fsdp_launch_variables(config.fsdp_config))
    return changes


def _collect(messages: list[tuple[int, str, Any]], failure: BaseException | None) -> list[Any]:
    fates = {i: RankFate(i, i) for i, _, _ in messages}
    results: dict[int, Any] = {}
    for index, kind, payload in messages:
        if kind == "result":
            fates[index].state = "returned"
            results[index] = cloudpickle.loads(payload)
        else:
            fates[index].state, fates[index].error = "raised", payload
            fates[index].when = payload.when
    table = [fates[i] for i in sorted(fates)]
    cause = root_cause(table)
    if cause is not None:
        raise build_error(cause, table)
    if failure is not None:
        raise failure
    return [results[i] for i in sorted(results)]
