"""The module path ``accelerate.utils.constants``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.constants import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..constants import BETA_CP_AVAILABLE_PYTORCH_VERSION
from ..constants import BETA_SP_AVAILABLE_DEEPSPEED_VERSION
from ..constants import BETA_TP_AVAILABLE_PYTORCH_VERSION
from ..constants import BETA_TP_AVAILABLE_TRANSFORMERS_VERSION
from ..constants import MITA_PROFILING_AVAILABLE_PYTORCH_VERSION
from ..constants import MODEL_NAME
from ..constants import OPTIMIZER_NAME
from ..constants import PROFILE_PATTERN_NAME
from ..constants import RNG_STATE_NAME
from ..constants import SAFE_MODEL_NAME
from ..constants import SAFE_WEIGHTS_INDEX_NAME
from ..constants import SAFE_WEIGHTS_NAME
from ..constants import SAFE_WEIGHTS_PATTERN_NAME
from ..constants import SAMPLER_NAME
from ..constants import SCALER_NAME
from ..constants import SCHEDULER_NAME
from ..constants import TORCH_DISTRIBUTED_OPERATION_TYPES
from ..constants import TORCH_LAUNCH_PARAMS
from ..constants import WEIGHTS_INDEX_NAME
from ..constants import WEIGHTS_NAME
from ..constants import WEIGHTS_PATTERN_NAME
from ..constants import XPU_PROFILING_AVAILABLE_PYTORCH_VERSION
from ..modeling.hooks import SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
from ..module_paths import names_of

__all__ = names_of(__name__)
