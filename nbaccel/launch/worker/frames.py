"""Which frames are the person's own code: a notebook cell, a script, the person's modules;
not torch, nbaccel, the standard library or another installed package."""

from __future__ import annotations

import functools
import linecache
import os
import sys
import sysconfig
import threading
from types import CodeType, FrameType

import torch

from ..location import SourceLine

__all__ = ["is_library", "mark_boundary", "person_frame", "source_line"]


def _dir_of(path: str | None) -> str:
    return os.path.dirname(os.path.realpath(path or "")) + os.sep


# torch and nbaccel, wherever they are installed, and the standard library
_OWN = (_dir_of(torch.__file__), _dir_of(sys.modules[__name__.split(".")[0]].__file__))
_STDLIB = tuple(
    {
        os.path.realpath(sysconfig.get_paths().get("stdlib") or "") + os.sep,
        _dir_of(threading.__file__),
    }
)
# nbaccel's code written as a person writes it (examples, the test scripts) counts as a package's
_WRITTEN_AS_A_PERSON = tuple(
    _OWN[1] + name + os.sep for name in ("examples", "testing", "test_utils")
)
_INSTALLED = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_PERSON_PSEUDO_FILES = ("<nbaccel cell", "<nbaccel task", "<ipython-input")
_PERSON, _INSTALLED_PACKAGE, _LIBRARY = 0, 1, 2
# the worker's entry: frames outside it belong to the process that forked the worker
_BOUNDARY: set[CodeType] = set()


@functools.lru_cache(maxsize=2048)
def _kind(filename: str) -> int:
    if filename.startswith("<"):
        return _PERSON if filename.startswith(_PERSON_PSEUDO_FILES) else _LIBRARY
    path = os.path.realpath(filename)
    if path.startswith(_WRITTEN_AS_A_PERSON):
        return _INSTALLED_PACKAGE
    if path.startswith(_OWN):
        return _LIBRARY
    if any(part in path for part in _INSTALLED):
        return _INSTALLED_PACKAGE
    return _LIBRARY if path.startswith(_STDLIB) else _PERSON


def is_library(filename: str) -> bool:
    """True for a file of torch, nbaccel or the standard library, or another installed
    package; False for the person's own code. Pseudo-files (``<string>``, ``<frozen ...>``)
    are the library's, except a pool cell's and an IPython input's."""
    return _kind(filename) != _PERSON


def mark_boundary(code: CodeType) -> None:
    """Frames outside a call of ``code`` (the worker's entry) are not the worker's: a forked
    worker still has the notebook's frames that started it below its own."""
    _BOUNDARY.add(code)


def person_frame(frame: FrameType | None) -> tuple[FrameType | None, FrameType | None]:
    """From ``frame`` outwards: the innermost frame of the person's own code (else of another
    installed package), and the frame it called (None when that is ``frame`` itself)."""
    best: tuple[FrameType | None, FrameType | None] = (None, None)
    inner: FrameType | None = None
    while frame is not None and frame.f_code not in _BOUNDARY:
        kind = _kind(frame.f_code.co_filename)
        if kind == _PERSON:
            return frame, inner
        if kind == _INSTALLED_PACKAGE and best[0] is None:
            best = (frame, inner)
        inner, frame = frame, frame.f_back
    return best


def source_line(frame: FrameType) -> SourceLine:
    """``frame``'s file, current line, function and the line's text (empty when unknown)."""
    code = frame.f_code
    lineno = frame.f_lineno or code.co_firstlineno
    text = linecache.getline(code.co_filename, lineno).strip()
    return SourceLine(code.co_filename, lineno, code.co_name, text)
