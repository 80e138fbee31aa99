"""The warning for nested (jagged) tensors given to a padding operation."""

from __future__ import annotations

__all__ = ["CannotPadNestedTensorWarning"]


class CannotPadNestedTensorWarning(UserWarning):
    """Warned when a nested (jagged) tensor is given to a padding operation, which returns it
    unchanged."""
