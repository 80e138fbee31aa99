"""The TPU path: launch through ``torch_xla``'s multiprocessing spawn (Colab, Kaggle, TPU VMs).

``torch_xla`` is imported here only, and only when the XLA path is requested and the package
imports (see ``environment.xla_available``). Workers run the same core as every other path:
``PartialState()`` inside the function reports ``DistributedType.XLA`` and the XLA device.

``xmp.spawn`` runs the function in this process for one core (``num_processes=1``) and
otherwise hands it to a process pool, which pickles it: the entry therefore carries the
function cloudpickled (closures and notebook functions cross), and each core writes its result
or its error to a file in a directory of the launch, read back here once the spawn returns.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from ...environment import (
    choice_variables,
    fsdp_launch_variables,
    tpu_requested,
    xla_device_name,
)
from ...state.registry import reset_registry
from ..config import LaunchConfig
from ..protocol import Reply, TaskReply, decode, encode
from ..remote import capture_exception
from ..states import Fate
from .errors import RankFate, build_error, root_cause
from .variables import temporary_environment

__all__ = ["launch_xla"]


class _XlaEntry:
    """The picklable per-core entry that ``xmp.spawn`` calls with the core index."""

    def __init__(self, payload: bytes, results: str):
        self.payload, self.results = payload, results

    def __call__(self, index: int) -> None:
        reset_registry()
        target = Path(self.results) / f"core-{index}.pkl"
        try:
            function, args, kwargs = cloudpickle.loads(self.payload)
            reply = TaskReply(0, cloudpickle.dumps(function(*args, **kwargs)))
        except BaseException as exc:
            _write(target, Reply(index, TaskReply(0, error=capture_exception(exc, time.time()))))
            raise
        _write(target, Reply(index, reply))


def _write(target: Path, message: Reply) -> None:
    """One core's reply, in the protocol's encoding, as a file (xmp.spawn gives no pipe)."""
    partial = target.with_suffix(".part")
    partial.write_bytes(encode(message))
    partial.replace(target)  # a reader never sees half a file


def launch_xla(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: LaunchConfig,
) -> list[Any]:
    """Run ``function`` on every XLA core of this host; return the results by core index."""
    # torch_xla is installed on TPU hosts only
    import torch_xla.distributed.xla_multiprocessing as xmp

    nprocs = 1 if config.num_processes == 1 else None
    where = "1 core" if nprocs == 1 else "every core of this host"
    print(f"Launching on the XLA device ({xla_device_name()}, {where}).")
    results = tempfile.mkdtemp(prefix="nbaccel-xla-")
    failure: BaseException | None = None
    try:
        entry = _XlaEntry(cloudpickle.dumps((function, args, kwargs)), results)
        with temporary_environment(_xla_variables(config)):
            xmp.spawn(entry, args=(), nprocs=nprocs, start_method="fork")
    except Exception as exc:  # a core failed: its own message says which and why
        failure = exc
    try:
        return _collect(_read(Path(results)), failure)
    finally:
        shutil.rmtree(results, ignore_errors=True)


def _xla_variables(config: LaunchConfig) -> dict[str, str | None]:
    """The launcher's choices for the TPU processes.

    bf16 on a TPU is asked of torch_xla with ``XLA_USE_BF16`` as Accelerate does (float32
    tensors are kept in bfloat16); elsewhere the workers autocast to bfloat16 instead.
    """
    changes: dict[str, str | None] = {}
    changes.update(choice_variables(mixed_precision=config.mixed_precision, debug=config.debug))
    if config.mixed_precision == "bf16" and tpu_requested():
        changes["XLA_USE_BF16"] = "1"
    if config.fsdp_config is not None:  # xla: true in it shards with XLA's FSDP
        changes.update(fsdp_launch_variables(config.fsdp_config))
    return changes


def _read(results: Path) -> list[Reply]:
    replies = []
    for path in results.glob("core-*.pkl"):
        message = decode(path.read_bytes())
        if isinstance(message, Reply):
            replies.append(message)
    return replies


def _collect(replies: list[Reply], failure: BaseException | None) -> list[Any]:
    fates = {r.rank: RankFate(r.rank, r.rank) for r in replies}
    results: dict[int, Any] = {}
    for message in replies:
        fate, error = fates[message.rank], message.reply.error
        if error is None:
            fate.state = Fate.RETURNED
            assert message.reply.value is not None  # a reply without an error has a value
            results[message.rank] = cloudpickle.loads(message.reply.value)
        else:
            fate.state, fate.error, fate.when = Fate.RAISED, error, error.when
    table = [fates[i] for i in sorted(fates)]
    cause = root_cause(table)
    if cause is not None:
        raise build_error(cause, table)
    if failure is not None:
        raise failure
    return [results[i] for i in sorted(results)]
