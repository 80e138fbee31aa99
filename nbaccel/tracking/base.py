"""The tracker interface: ``GeneralTracker`` and the ``on_main_process`` method decorator."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ..state import PartialState

__all__ = ["GeneralTracker", "OpenedTracker", "on_main_process", "scalar_value"]

F = TypeVar("F", bound=Callable[..., Any])


def _is_main_process() -> bool:

    return bool(PartialState().is_main_process)


def on_main_process(function: F) -> F:
    """Method decorator: run the method only on the main process when the object's
    ``main_process_only`` attribute is true (on every process otherwise).

    The check happens at call time, so decorating a class does not create the state.
    """

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", False) and not _is_main_process():
            return None
        return function(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def scalar_value(value: Any) -> float | int | None:
    """``value`` as a Python number when it is one (bool, int, float, 0-d tensor or numpy
    scalar); None otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    item = getattr(value, "item", None)
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    size = numel() if callable(numel) else numel
    if callable(item) and size == 1:
        got = item()
        if isinstance(got, (bool, int, float)):
            return got if not isinstance(got, bool) else int(got)
    return None


class GeneralTracker:
    """Base class of every experiment tracker, built in or written by the user.

    A subclass sets the class attributes ``name`` (a unique string) and
    ``requires_logging_directory`` (bool), defines the ``tracker`` property (the wrapped
    object, e.g. a ``SummaryWriter``; optional), and overrides what it needs among :meth:`start`,
    :meth:`store_init_configuration`, :meth:`log` and :meth:`finish`. Pass an instance in
    ``Accelerator(log_with=[...])``. With ``main_process_only = True`` (the default) the
    Accelerator calls it on the main process only; decorate methods with
    :func:`on_main_process` to get the same guard when calling them yourself.

    Args:
        _blank: make an inert tracker (what ``get_tracker`` returns on processes where the
            named tracker does not run); its methods do nothing.
    """

    name: str = ""
    requires_logging_directory: bool = False
    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        self._blank = _blank
        if _blank:
            return
        name = getattr(self, "name", None)
        if not isinstance(name, str) or not name:
            raise NotImplementedError(
                f"{type(self).__name__} must set the class attribute `name` to a non-empty "
                f"string (got {name!r}); see docs/tracking.md, 'Your own tracker'."
            )
        if not isinstance(getattr(self, "requires_logging_directory", False), bool):
            raise TypeError(f"{type(self).__name__}.requires_logging_directory must be a bool.")

    @property
    def tracker(self) -> Any:
        """The object this tracker wraps (None for the base class and inert trackers)."""
        return None

    def start(self) -> None:
        """Open the run; called once by ``init_trackers`` after construction."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the run's hyperparameters (``init_trackers(config=...)``)."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` (name -> number, string or dict) at ``step``."""

    def finish(self) -> None:
        """Close the run (``end_training``)."""

    def __repr__(self) -> str:
        kind = "blank " if getattr(self, "_blank", False) else ""
        return f"<{kind}{type(self).__name__} name={getattr(self, 'name', '')!r}>"


class OpenedTracker(GeneralTracker):
    """A built-in tracker around one object that :meth:`start` opens (a run, a writer).

    The object is kept in the attribute Accelerate gives it for that tracker, named by the
    class attribute ``opened_attribute`` (None until :meth:`start`); :attr:`tracker` returns it.
    """

    opened_attribute = ""

    def __init__(self) -> None:
        super().__init__()
        setattr(self, self.opened_attribute, None)

    @property
    def tracker(self) -> Any:
        """The opened object (None before :meth:`start`)."""
        return getattr(self, self.opened_attribute)

    def opened(self) -> Any:
        """The opened object, after calling :meth:`start` when it is not open yet."""
        if self.tracker is None:
            self.start()
        return self.tracker
