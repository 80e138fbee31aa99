"""DeepSpeed through Accelerate's API: the plugin, its config, the dummy optimizer and
scheduler, and the engine (``deepspeed`` itself is imported only when an engine is built)."""

from .autofill import Found, fill_auto_values
from .dummies import DummyOptim, DummyScheduler
from .engine import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    DeepSpeedSchedulerWrapper,
    import_deepspeed,
    prebuild_ops,
)
from .hfconfig import HfDeepSpeedConfig
from .plugin import DeepSpeedPlugin

__all__ = [
    "DeepSpeedEngineWrapper",
    "DeepSpeedOptimizerWrapper",
    "DeepSpeedPlugin",
    "DeepSpeedSchedulerWrapper",
    "DummyOptim",
    "DummyScheduler",
    "Found",
    "HfDeepSpeedConfig",
    "fill_auto_values",
    "import_deepspeed",
    "prebuild_ops",
]
