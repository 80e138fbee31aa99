"""``documented_by``: a method the Accelerator writes out to call one of its parts takes its
docstring from the part's method, so that each docstring has one source.

It sets the docstring and returns the very function it was given: no wrapper and no extra
frame, and the signature stays the one written out, which mypy checks against the part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["documented_by"]

F = TypeVar("F", bound=Callable[..., Any])


def documented_by(source: object) -> Callable[[F], F]:
    """Decorator: give the decorated function the raw ``__doc__`` of ``source`` (a function, or
    a property, whose docstring is its getter's) and return the same function.

    Under ``@property`` it goes on the getter, and the property takes the getter's docstring.
    The decorated function must have no docstring of its own (that would be a second copy),
    and ``source`` must have one.
    """
    doc = source.__doc__
    if not doc:
        raise TypeError(f"documented_by: {source!r} has no docstring to give")

    def document(method: F) -> F:
        if method.__doc__ is not None:
            raise TypeError(
                f"documented_by: {method.__qualname__} has a docstring of its own; remove it"
            )
        method.__doc__ = doc
        return method

    return document
