"""The module path ``accelerate.utils.operations``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.operations import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..constants import TORCH_DISTRIBUTED_OPERATION_TYPES
from ..enums import DistributedType
from ..environment.availability import is_npu_available, is_torch_version, is_torch_xla_available
from ..module_paths import names_of
from ..ops.collectives import (
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)
from ..ops.nested import (
    concatenate,
    convert_to_fp32,
    find_batch_size,
    find_device,
    honor_type,
    ignorant_find_batch_size,
    is_namedtuple,
    is_torch_tensor,
    listify,
    recursively_apply,
    send_to_device,
    slice_tensors,
)
from ..ops.padding_warning import CannotPadNestedTensorWarning
from ..ops.structures import (
    TensorInformation,
    convert_outputs_to_fp32,
    copy_tensor_to_devices,
    get_data_structure,
    initialize_tensors,
    is_tensor_information,
    pad_input_tensors,
)

__all__ = names_of(__name__)
