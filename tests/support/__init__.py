"""Helpers that more than one test tier uses, imported as ``from tests.support.kernel import
running_kernel``.

The checkout's root is on ``sys.path`` in the test process (``pythonpath`` in pyproject.toml's
``[tool.pytest.ini_options]``); workers started by the launcher get that ``sys.path`` from it.
A child process started otherwise (a script, a Jupyter kernel) gets the root on its
``PYTHONPATH`` from :func:`tests.support.paths.pythonpath`. Helpers of one tier stay in that
tier's folder (tests/README.md lists both).
"""
