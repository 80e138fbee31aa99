"""Sharded, seedable, resumable data loaders: what ``Accelerator.prepare`` does to DataLoaders."""

from .batches import send_to_device
from .configuration import DataLoaderConfiguration
from .dispatch import DataLoaderDispatcher
from .loaders import DataLoaderShard
from .prepare import prepare_data_loader
from .samplers import BatchSamplerShard, SeedableRandomSampler, SkipBatchSampler
from .shards import IterableDatasetShard
from .skip import SkipDataLoader, skip_first_batches

__all__ = [
    "BatchSamplerShard",
    "DataLoaderConfiguration",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "prepare_data_loader",
    "send_to_device",
    "skip_first_batches",
]
