"""The module path ``accelerate.data_loader``: the prepared data loaders of
:mod:`nbaccel.data`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .data.dispatch import DataLoaderDispatcher
from .data.loaders import DataLoaderShard
from .data.loaders import DataLoaderStateMixin
from .data.prepare import prepare_data_loader
from .data.samplers import BatchSamplerShard
from .data.samplers import SeedableRandomSampler
from .data.samplers import SkipBatchSampler
from .data.shards import IterableDatasetShard
from .data.skip import SkipDataLoader
from .data.skip import skip_first_batches
from .module_paths import names_of

__all__ = names_of(__name__)
