"""``ProfileKwargs``: the settings of ``torch.profiler`` for ``Accelerator.profile``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .constants import PROFILE_PATTERN_NAME
from .kwargs_handlers import KwargsHandler

__all__ = ["ProfileKwargs", "profiled"]

_ACTIVITIES = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "hpu": "HPU", "mtia": "MTIA"}


@dataclasses.dataclass
class ProfileKwargs(KwargsHandler):
    """Arguments for ``torch.profiler.profile`` (see ``Accelerator.profile``).

    Args:
        activities: which devices to profile: ``["cpu"]``, ``["cpu", "cuda"]``, ...
        schedule_option: ``torch.profiler.schedule`` arguments (``wait``, ``warmup``,
            ``active``, ``repeat``, ``skip_first``).
        on_trace_ready: called with the profiler when a trace is ready.
        record_shapes, profile_memory, with_stack, with_flops, with_modules: as in torch.
        output_trace_dir: write ``profile_{process_index}.json`` (Chrome trace) there.
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable[..., Any] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def __post_init__(self) -> None:
        for activity in self.activities or []:
            self._get_profiler_activity(activity)

    @staticmethod
    def _get_profiler_activity(activity: str) -> torch.profiler.ProfilerActivity:
        name = _ACTIVITIES.get(str(activity))
        found = getattr(torch.profiler.ProfilerActivity, name, None) if name else None
        if found is None:
            allowed = [
                a for a, n in _ACTIVITIES.items() if hasattr(torch.profiler.ProfilerActivity, n)
            ]
            raise ValueError(f"Invalid profiler activity: {activity!r}. Must be one of {allowed}.")
        return found

    def build(self) -> torch.profiler.profile:
        """The ``torch.profiler.profile`` these settings describe."""
        activities = None
        if self.activities is not None:
            activities = [self._get_profiler_activity(a) for a in self.activities]
        schedule = None
        if self.schedule_option is not None:
            schedule = torch.profiler.schedule(**self.schedule_option)
        return torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            with_modules=self.with_modules,
        )


@contextlib.contextmanager
def profiled(
    handler: ProfileKwargs, process_index: int, barrier: Callable[[], None]
) -> Iterator[Any]:
    """Profile the block with ``handler``'s settings and yield the profiler; with
    ``output_trace_dir`` each process writes ``profile_{process_index}.json`` there, then
    waits at ``barrier`` for the others."""
    with handler.build() as profiler:
        yield profiler
    if handler.output_trace_dir is None:
        return
    os.makedirs(handler.output_trace_dir, exist_ok=True)
    name = PROFILE_PATTERN_NAME.format(suffix=process_index)
    profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, name))
    barrier()
