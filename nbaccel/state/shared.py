"""``_shared_state`` and the after-reset errors of the state classes, read from the registry."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

__all__ = [
    "SharedStateView",
    "StateResetError",
    "missing_attribute",
    "record_property",
]


class StateResetError(AttributeError, RuntimeError):
    """A state object was read after its state was reset (an ``AttributeError``, as in
    Accelerate, and a ``RuntimeError``)."""


class SharedStateView(Mapping[str, Any]):
    """A live, read-only mapping of one state record: empty until the state is set up.

    ``record`` returns the record (None before the set-up), ``items`` its items under
    Accelerate's names.

    ``PartialState._shared_state == {}`` tells whether the state exists, and
    ``PartialState._shared_state["device"]`` reads it, as code written for Accelerate does;
    ``clear()`` resets that state.
    """

    def __init__(
        self,
        owner: str,
        record: Callable[[], Any],
        items: Callable[[Any], dict[str, Any]],
        reset: Callable[[], None],
    ):
        self._owner = owner
        self._record = record
        self._items = items
        self._reset = reset

    def _read(self) -> dict[str, Any]:
        """The record's items under Accelerate's names; none while there is no record."""
        record = self._record()
        return {} if record is None else self._items(record)

    def __getitem__(self, key: str) -> Any:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        raise TypeError(
            f"{self._owner}._shared_state is a read-only view of nbaccel's process-wide state; "
            f"it cannot set {key!r}. Pass the setting to the first {self._owner}() or "
            "Accelerator() of the process instead."
        )

    def clear(self) -> None:
        """Reset the state this view reads (as ``_reset_state()`` does)."""
        self._reset()

    def copy(self) -> dict[str, Any]:
        """A plain dict snapshot of the state."""
        return dict(self._read())

    def __repr__(self) -> str:
        return repr(self._read())

    def __get__(self, obj: object, objtype: type | None = None) -> SharedStateView:
        """As a class attribute, the same view on the class and on its instances."""
        return self


def missing_attribute(obj: object, name: str, reset: bool) -> NoReturn:
    """Raise the ``AttributeError`` for ``obj.name``.

    A documented attribute (a property of the class) read after the state was reset says so
    and what to do; any other name gets Python's usual message.
    """
    owner = type(obj)
    prop = getattr(owner, name, None)
    if isinstance(prop, property) and prop.fget is not None:
        if reset:
            label = owner.__name__
            raise StateResetError(
                f"`{label}` object has no attribute `{name}`: its state was cleared. This "
                f"happens if `{label}._reset_state()` was called (or "
                "nbaccel.testing.reset_state()) and an `Accelerator` or `PartialState` was not "
                "created again; create one to read the current state."
            )
        prop.fget(obj)  # the property failed for its own reason: let that error through
    raise AttributeError(f"'{owner.__name__}' object has no attribute '{name}'")


def record_property(record: str, path: str, doc: str) -> Any:
    """A read-only property of a state class: the attribute at ``path`` (dotted) of the record
    that the class's method ``record`` returns, e.g. ``record_property("_process",
    "launch.debug", ...)`` reads ``self._process().launch.debug``."""
    read = operator.attrgetter(path)

    def get(self: Any) -> Any:
        return read(getattr(self, record)())

    return property(get, doc=doc)
