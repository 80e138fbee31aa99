"""The module path ``accelerate.utils.versions``: the names of :mod:`nbaccel.utils` it
holds, so that ``from accelerate.utils.versions import ...`` runs with only the import
changed."""

from . import compare_versions, is_torch_version

__all__ = [
    "compare_versions",
    "is_torch_version",
]
