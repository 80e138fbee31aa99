"""The module path ``accelerate.utils.operations``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.operations import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..constants import TORCH_DISTRIBUTED_OPERATION_TYPES
from ..enums import DistributedType
from ..environment.availability import is_npu_available
from ..environment.availability import is_torch_version
from ..environment.availability import is_torch_xla_available
from ..module_paths import names_of
from ..ops.collectives import broadcast
from ..ops.collectives import broadcast_object_list
from ..ops.collectives import gather
from ..ops.collectives import gather_object
from ..ops.collectives import pad_across_processes
from ..ops.collectives import reduce
from ..ops.nested import concatenate
from ..ops.nested import convert_to_fp32
from ..ops.nested import find_batch_size
from ..ops.nested import find_device
from ..ops.nested import honor_type
from ..ops.nested import ignorant_find_batch_size
from ..ops.nested import is_namedtuple
from ..ops.nested import is_torch_tensor
from ..ops.nested import listify
from ..ops.nested import recursively_apply
from ..ops.nested import send_to_device
from ..ops.nested import slice_tensors
from ..ops.padding_warning import CannotPadNestedTensorWarning
from ..ops.structures import TensorInformation
from ..ops.structures import convert_outputs_to_fp32
from ..ops.structures import copy_tensor_to_devices
from ..ops.structures import get_data_structure
from ..ops.structures import initialize_tensors
from ..ops.structures import is_tensor_information
from ..ops.structures import pad_input_tensors

__all__ = names_of(__name__)
