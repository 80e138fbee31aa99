"""pytest plugin for ``accelerate_compat --per-test``: a name nbaccel lacks fails only the
tests that use it, not every test of the file that imports it.

Loaded with ``-p benchmarks.compat_placeholders``. ``from nbaccel... import name`` of a missing
name, or an import of a missing ``nbaccel.*`` module, gives a placeholder; using it (calling
it, reading an attribute, subclassing it) raises ``MissingName`` naming what is missing;
a missing ``is_*_available`` function says False.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["MissingName"]


class MissingName(ImportError):
    """A test used a name that nbaccel does not have."""


class _Placeholder:
    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _missing(self, *args: Any, **kwargs: Any) -> Any:
        raise MissingName(f"nbaccel has no {object.__getattribute__(self, '_name')}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):  # used as a decorator
            return _failing(args[0], object.__getattribute__(self, "_name"))
        return self._missing()

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        return self._missing()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_placeholder_base(object.__getattribute__(self, "_name")),)

    def __iter__(self) -> Any:
        return self._missing()


def _failing(target: Any, name: str) -> Any:
    """``target`` (a test function or class) made to fail with MissingName when it runs."""

    def fail(*args: Any, **kwargs: Any) -> None:
        raise MissingName(f"nbaccel has no {name}")

    if isinstance(target, type):
        for attribute in [a for a in vars(target) if a.startswith("test")]:
            setattr(target, attribute, fail)
        return target
    fail.__name__ = getattr(target, "__name__", "fail")
    return fail


def _placeholder_base(name: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise MissingName(f"nbaccel has no {name}")

    return type(name.rpartition(".")[2], (), {"__init__": __init__})


def _not_available(*args: Any, **kwargs: Any) -> bool:
    return False


def _lenient(module: types.ModuleType) -> None:
    """Give ``module`` a module-level ``__getattr__`` returning placeholders."""
    previous = module.__dict__.get("__getattr__")

    def __getattr__(attribute: str) -> Any:
        if previous is not None:
            try:
                return previous(attribute)
            except AttributeError:
                pass
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if attribute.startswith("is_") and attribute.endswith("_available"):
            return _not_available  # an availability check of something nbaccel lacks: False
        return _Placeholder(f"{module.__name__}.{attribute}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    if not hasattr(module, "__path__"):  # nbaccel.utils.memory: children found by _Finder
        module.__path__ = []


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Missing ``nbaccel.*`` modules become lenient empty modules; real ones turn lenient."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith("nbaccel.") and fullname != "nbaccel":
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _Wrapping(spec.loader)
                return spec
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        _lenient(module)


class _Wrapping(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        if _is_accelerate_path(module.__name__):
            _lenient(module)


def _accelerate_paths() -> set[str] | None:
    """The modules that stand for Accelerate's paths (nbaccel's table of them), or None for
    a tree without that table (every nbaccel module then counts)."""
    try:
        table = importlib.import_module("nbaccel.module_paths")
    except ImportError:
        return None
    return {"nbaccel", *table.DOORS, *table.UTILS_SUBMODULES, *table.AT_HOME}


_PATHS: set[str] | None = None


def _is_accelerate_path(name: str) -> bool:
    """Only the modules test code imports from get placeholders: nbaccel's own modules (which
    torch.compile, for one, inspects) keep failing on a missing attribute as usual."""
    if _PATHS is None:
        return True
    return name in _PATHS or any(name.startswith(f"{home}.") for home in _PATHS - {"nbaccel"})


def pytest_configure(config: Any) -> None:
    global _PATHS
    importlib.import_module("nbaccel")
    _PATHS = _accelerate_paths()
    sys.meta_path.insert(0, _Finder())
    for name in [n for n in sys.modules if n == "nbaccel" or n.startswith("nbaccel.")]:
        if _is_accelerate_path(name):
            _lenient(sys.modules[name])
