"""How the Accelerator exposes its parts' methods without restating them.

``save_state = forward("_checkpointer", Checkpointer.save_state)`` makes the Accelerator's
``save_state`` call its checkpointer's, with the part's signature and docstring (``help`` and
``inspect.signature`` show them; type checkers see the same parameters).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["forward", "view"]

P = ParamSpec("P")
R = TypeVar("R")


def forward(
    part: str, method: Callable[Concatenate[Any, P], R]
) -> Callable[Concatenate[Any, P], R]:
    """A method that calls ``method`` on the object held in the attribute ``part``."""

    def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(getattr(self, part), *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


def view(part: str, attribute: Any) -> Any:
    """A read-only property showing the part's property ``attribute`` (its docstring too);
    ``attribute`` is typed loosely because type checkers see a class's property as its getter."""
    if not isinstance(attribute, property) or attribute.fget is None:
        raise TypeError(f"view() takes a part's property, got {attribute!r}.")
    getter = attribute.fget

    def read(self: Any) -> Any:
        return getter(getattr(self, part))

    return property(read, doc=attribute.__doc__)
