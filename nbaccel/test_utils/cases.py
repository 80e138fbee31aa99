"""Test-case classes and assertions for tests of code that uses nbaccel."""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import unittest
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ..ops import gather
from ..state import PartialState
from ..testing import reset_state

__all__ = [
    "AccelerateTestCase",
    "MockingTestCase",
    "TempDirTestCase",
    "are_the_same_tensors",
    "assert_exception",
    "capture_call_output",
]


class TempDirTestCase(unittest.TestCase):
    """One temporary directory for the whole class, ``self.tmpdir``, emptied before each test.

    Set ``clear_on_setup = False`` on a subclass to keep what earlier tests wrote there. The
    directory is removed after the last test of the class.
    """

    clear_on_setup: bool = True
    tmpdir: Path

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.tmpdir = Path(tempfile.mkdtemp(prefix="nbaccel-test-"))

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmpdir, ignore_errors=True)
        super().tearDownClass()

    def setUp(self) -> None:
        super().setUp()
        if self.clear_on_setup:
            for child in self.tmpdir.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()


class AccelerateTestCase(unittest.TestCase):
    """Forgets nbaccel's process-wide state after every test.

    ``PartialState``, ``AcceleratorState`` and ``GradientState`` (including the data loaders
    the gradient state tracks) start afresh in the next test, so one test's ``Accelerator``
    settings never leak into another. A process group, when there is one, is kept and adopted
    by the next state (see :func:`nbaccel.testing.reset_state`).
    """

    def tearDown(self) -> None:
        super().tearDown()
        reset_state()


class MockingTestCase(unittest.TestCase):
    """Starts mocks for every test that can only be built in ``setUp``.

    Call :meth:`add_mocks` at the end of ``setUp`` (after ``super().setUp()``); each mock is
    started there and stopped after the test::

        def setUp(self):
            super().setUp()
            self.add_mocks(mock.patch("time.sleep"))
    """

    mocks: list[Any]

    def add_mocks(self, mocks: Any) -> None:
        """Start ``mocks`` (one patcher or a list / tuple of them) for the current test."""
        self.mocks = list(mocks) if isinstance(mocks, (list, tuple)) else [mocks]
        for patcher in self.mocks:
            patcher.start()
            self.addCleanup(patcher.stop)


@contextlib.contextmanager
def assert_exception(
    exception_class: type[BaseException], msg: str | None = None
) -> Iterator[None]:
    """Assert that the block raises ``exception_class`` (with ``msg`` in its message).

    Raises:
        AssertionError: the block ran without an exception, raised another type, or the
            message lacks ``msg``.
    """
    try:
        yield
    except Exception as error:
        if not isinstance(error, exception_class):
            raise AssertionError(
                f"Expected exception of type {exception_class} but got {type(error)}: {error}"
            ) from error
        if msg is not None and msg not in str(error):
            raise AssertionError(
                f"Expected message {msg!r} to be in the exception, but got {str(error)!r}"
            ) from error
    else:
        raise AssertionError(f"Expected exception of type {exception_class} but ran without issue.")


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``func(*args, **kwargs)`` prints to standard output, as one string."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        func(*args, **kwargs)
    return buffer.getvalue()


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """True when ``tensor`` holds the same values on every process (a collective: every
    process must call it)."""
    state = PartialState()
    mine = tensor.detach().clone().to(state.device)
    everyone = gather(mine[None]).cpu()
    return all(torch.equal(row, mine.cpu()) for row in everyone)
