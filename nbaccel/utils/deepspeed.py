"""The module path ``accelerate.utils.deepspeed``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.deepspeed import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..deepspeed.dummies import DummyOptim
from ..deepspeed.dummies import DummyScheduler
from ..deepspeed.engine import DeepSpeedEngineWrapper
from ..deepspeed.engine import DeepSpeedOptimizerWrapper
from ..deepspeed.engine import DeepSpeedSchedulerWrapper
from ..deepspeed.engine import get_active_deepspeed_plugin
from ..deepspeed.hfconfig import HfDeepSpeedConfig
from ..module_paths import names_of

__all__ = names_of(__name__)
