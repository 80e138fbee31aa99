"""The Accelerator's view of how the job is laid out: its ``ParallelView`` part answers the
``ParallelismConfig``, the device mesh, the ranks, FSDP2 and fp8 questions.

Each is written out with the part's signature, takes the part's docstring through
``documented_by`` and calls ``self._parallel``, which is declared here with its type, so mypy
checks every call against ``ParallelView``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..parallelism import ParallelismConfig
from .documented import documented_by
from .parallel import ParallelView

__all__ = ["ParallelMethods"]


class ParallelMethods:
    """Base of ``Accelerator``: what it passes on to ``self._parallel``."""

    _parallel: ParallelView

    @property
    @documented_by(ParallelView.parallelism_config)
    def parallelism_config(self) -> ParallelismConfig | None:
        return self._parallel.parallelism_config

    @property
    @documented_by(ParallelView.torch_device_mesh)
    def torch_device_mesh(self) -> Any:
        return self._parallel.torch_device_mesh

    @property
    @documented_by(ParallelView.data_parallel_rank)
    def data_parallel_rank(self) -> int:
        return self._parallel.data_parallel_rank

    @property
    @documented_by(ParallelView.data_parallel_shard_rank)
    def data_parallel_shard_rank(self) -> int:
        return self._parallel.data_parallel_shard_rank

    @property
    @documented_by(ParallelView.tensor_parallel_rank)
    def tensor_parallel_rank(self) -> int:
        return self._parallel.tensor_parallel_rank

    @property
    @documented_by(ParallelView.context_parallel_rank)
    def context_parallel_rank(self) -> int:
        return self._parallel.context_parallel_rank

    @property
    @documented_by(ParallelView.pipeline_parallel_rank)
    def pipeline_parallel_rank(self) -> int:
        return self._parallel.pipeline_parallel_rank

    @documented_by(ParallelView.maybe_context_parallel)
    def maybe_context_parallel(
        self,
        buffers: list[torch.Tensor] | None = None,
        buffer_seq_dims: list[int] | None = None,
        no_restore_buffers: set[torch.Tensor] | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        return self._parallel.maybe_context_parallel(buffers, buffer_seq_dims, no_restore_buffers)

    @property
    @documented_by(ParallelView.is_fsdp2)
    def is_fsdp2(self) -> bool:
        return self._parallel.is_fsdp2

    @property
    @documented_by(ParallelView.is_fsdp2)
    def is_composable_parallelism_enabled(self) -> bool:
        return self._parallel.is_fsdp2

    @property
    @documented_by(ParallelView.multi_device)
    def multi_device(self) -> bool:
        return self._parallel.multi_device

    @property
    @documented_by(ParallelView.fp8_backend)
    def fp8_backend(self) -> str:
        return self._parallel.fp8_backend
