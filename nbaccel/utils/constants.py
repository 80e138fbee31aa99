"""The module path ``accelerate.utils.constants``: the constants of :mod:`nbaccel.constants`,
so that ``from accelerate.utils.constants import ...`` runs with only the import changed."""

from ..constants import *  # noqa: F403
from ..constants import __all__ as __all__
