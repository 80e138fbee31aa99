"""Helpers for testing code that uses nbaccel: Accelerate's ``accelerate.test_utils``.

The ``require_*`` decorators skip a test unless nbaccel finds what it needs on this machine;
``AccelerateTestCase`` forgets nbaccel's state after every test; ``DEFAULT_LAUNCH_COMMAND``,
``get_launch_command`` and ``execute_subprocess_async`` run scripts under ``nbaccel launch``;
:mod:`.training` has a tiny regression model and data set; :mod:`.scripts` holds the scripts
that check a real multi-process run (``debug_launcher(test_script.main)``, or
``nbaccel launch`` on ``path_in_accelerate_package("test_utils", "scripts", ...)``).
"""

from __future__ import annotations

from .testing import *  # noqa: F403
from .testing import __all__ as _testing_names
from .training import RegressionDataset, RegressionModel

from .scripts import test_ops, test_script, test_sync  # isort: skip  (they import the above)

__all__ = [
    *_testing_names,
    "RegressionDataset",
    "RegressionModel",
    "test_ops",
    "test_script",
    "test_sync",
]
