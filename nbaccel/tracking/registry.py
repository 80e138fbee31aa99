"""Tracker names -> classes, which packages they need, and ``log_with`` resolution."""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass
from typing import Any

from ..enums import LoggerType
from .base import GeneralTracker
from .comet import CometMLTracker
from .jsonl import JSONLTracker
from .mlflow import MLflowTracker
from .tensorboard import TensorBoardTracker
from .wandb import WandBTracker

__all__ = [
    "LOGGER_TYPE_TO_CLASS",
    "available_trackers",
    "create_tracker",
    "is_comet_ml_available",
    "is_mlflow_available",
    "is_tensorboard_available",
    "is_tracker_available",
    "is_wandb_available",
    "register_tracker_class",
    "resolve_log_with",
    "tracker_class",
]


@dataclass(frozen=True)
class _Spec:
    cls: type[GeneralTracker]
    modules: tuple[str, ...]  # any one of these importable makes the tracker available
    install: str  # what to pip install
    takes_logging_dir: bool  # accepts logging_dir as its second argument
    in_extra: bool = True  # part of the `tracking` extra


_SPECS: dict[str, _Spec] = {
    "jsonl": _Spec(JSONLTracker, (), "", True),
    "tensorboard": _Spec(TensorBoardTracker, ("tensorboard", "tensorboardX"), "tensorboard", True),
    "wandb": _Spec(WandBTracker, ("wandb",), "wandb", True),
    "mlflow": _Spec(MLflowTracker, ("mlflow",), "mlflow", True),
    "comet_ml": _Spec(CometMLTracker, ("comet_ml",), "comet_ml", False, False),
}
_BUILT_IN = tuple(_SPECS)
_NOT_BUILT_IN = ("aim", "clearml", "dvclive", "trackio", "swanlab")

LOGGER_TYPE_TO_CLASS: dict[str, type[GeneralTracker]] = {n: s.cls for n, s in _SPECS.items()}


def _key(name: str | LoggerType) -> str:
    """A registered tracker's own name, or a built-in one's canonical name."""
    if isinstance(name, str) and name in _SPECS:
        return name
    return str(LoggerType.parse(name, "log_with"))


def register_tracker_class(tracker_class: type[GeneralTracker]) -> None:
    """Make a ``GeneralTracker`` subclass usable by its ``name`` in ``log_with``, like the
    built-in trackers (register it before building the ``Accelerator`` that uses it).

    The class is built as ``tracker_class(project_name, **init_kwargs)``, with the logging
    directory as second argument when ``requires_logging_directory`` is True. Registering a
    name again replaces the earlier class, with a warning.

    Raises:
        ValueError: not a ``GeneralTracker`` subclass, an empty ``name``, or no
            ``requires_logging_directory`` class attribute.
    """
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise ValueError(
            f"register_tracker_class needs a subclass of GeneralTracker, got {tracker_class!r}."
        )
    name = getattr(tracker_class, "name", None)
    if not name or not isinstance(name, str):
        raise ValueError(
            f"{tracker_class.__name__} must define a non-empty `name` class attribute (the "
            "name log_with uses)."
        )
    own = [c for c in tracker_class.__mro__ if c is not GeneralTracker]
    if not any("requires_logging_directory" in vars(c) for c in own):
        raise ValueError(
            f"{tracker_class.__name__} must define a `requires_logging_directory` class "
            "attribute: True when it needs a logging directory, False otherwise."
        )
    if name in _SPECS:
        warnings.warn(
            f"A tracker named {name!r} is already registered; {tracker_class.__name__} "
            "replaces it.",
            stacklevel=2,
        )
    takes_dir = bool(tracker_class.requires_logging_directory)
    _SPECS[name] = _Spec(tracker_class, (), "", takes_dir, in_extra=False)
    LOGGER_TYPE_TO_CLASS[name] = tracker_class


def is_tracker_available(name: str) -> bool:
    """True when the package that tracker ``name`` needs is installed (jsonl: always)."""
    spec = _SPECS[_key(name)]
    return not spec.modules or any(importlib.util.find_spec(m) is not None for m in spec.modules)


def is_tensorboard_available() -> bool:
    """True when ``tensorboard`` (or ``tensorboardX``) is installed."""
    return is_tracker_available("tensorboard")


def is_wandb_available() -> bool:
    """True when ``wandb`` is installed."""
    return is_tracker_available("wandb")


def is_mlflow_available() -> bool:
    """True when ``mlflow`` is installed."""
    return is_tracker_available("mlflow")


def is_comet_ml_available() -> bool:
    """True when ``comet_ml`` is installed."""
    return is_tracker_available("comet_ml")


def available_trackers() -> list[str]:
    """Names of the built-in trackers usable here, what ``log_with="all"`` means."""
    return [name for name in _BUILT_IN if is_tracker_available(name)]


def tracker_class(name: str | LoggerType) -> type[GeneralTracker]:
    """The class of built-in tracker ``name``.

    Raises:
        ValueError: ``name`` is not a tracker name.
        NotImplementedError: a documented tracker that nbaccel does not ship.
        ImportError: its package is not installed (the message names what to install).
    """
    key = _key(name)
    if key == "all":
        raise ValueError('log_with="all" is not one tracker; resolve it with resolve_log_with.')
    if key in _NOT_BUILT_IN:
        raise NotImplementedError(
            f"log_with={key!r}: nbaccel has no built-in {key} tracker yet; built in are "
            f"{sorted(_SPECS)}. Write a GeneralTracker subclass around {key} and pass an "
            "instance in log_with (docs/tracking.md, 'Your own tracker')."
        )
    spec = _SPECS[key]
    if not is_tracker_available(key):
        extra = " (or `pip install nbaccel[tracking]`)" if spec.in_extra else ""
        raise ImportError(
            f"log_with={key!r} needs the `{spec.install}` package, which is not installed. "
            f"Install it with `pip install {spec.install}`{extra}, or log with 'jsonl', "
            "which needs no package."
        )
    return spec.cls


def _items(log_with: Any) -> list[Any]:
    if log_with is None:
        return []
    if isinstance(log_with, (list, tuple)):
        return list(log_with)
    return [log_with]


def resolve_log_with(log_with: Any, logging_dir: str | os.PathLike[str] | None) -> list[Any]:
    """Turn ``Accelerator(log_with=...)`` into a list of tracker names and tracker objects.

    Accepts None, a name, a ``LoggerType``, a ``GeneralTracker`` instance, or a list of
    these; ``"all"`` stands for every built-in tracker whose package is installed.

    Raises:
        TypeError: an entry of the wrong type (e.g. a tracker class instead of an instance).
        ValueError: an unknown name, or a tracker that needs ``logging_dir`` without one.
        ImportError: a named tracker whose package is missing.
    """
    resolved: list[Any] = []
    for item in _items(log_with):
        if isinstance(item, GeneralTracker):
            resolved.append(item)
            continue
        if isinstance(item, type) and issubclass(item, GeneralTracker):
            raise TypeError(
                f"log_with got the class {item.__name__}; pass an instance, "
                f"e.g. log_with=[{item.__name__}(...)]."
            )
        if not isinstance(item, (str, LoggerType)):
            raise TypeError(
                f"log_with entries must be tracker names, LoggerType members or GeneralTracker "
                f"instances; got {type(item).__name__} ({item!r})."
            )
        key = _key(item)
        names = available_trackers() if key == "all" else [key]
        for name in names:
            cls = tracker_class(name)
            if cls.requires_logging_directory and logging_dir is None:
                raise ValueError(
                    f"Logging with `{name}` requires a `logging_dir` (log_with={name!r} writes "
                    "files): pass "
                    "Accelerator(project_dir=...) or project_config=ProjectConfiguration("
                    "logging_dir=...)."
                )
            if name not in resolved:
                resolved.append(name)
    return resolved


def create_tracker(
    name: str,
    project_name: str,
    logging_dir: str | os.PathLike[str] | None,
    kwargs: dict[str, Any],
) -> GeneralTracker:
    """Build built-in tracker ``name`` for ``project_name`` (not started yet)."""
    spec = _SPECS[name]
    factory: Any = spec.cls  # each built-in has its own signature
    if spec.takes_logging_dir:
        return factory(project_name, logging_dir, **kwargs)
    return factory(project_name, **kwargs)
