"""The module path ``accelerate.utils.versions``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.versions import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..environment.availability import compare_versions
from ..environment.availability import is_torch_version
from ..module_paths import names_of

__all__ = names_of(__name__)
