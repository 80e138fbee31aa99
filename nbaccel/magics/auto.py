"""``%nbaccel auto on``: an input transformer that sends every following cell to the pool."""

from __future__ import annotations

from typing import Any

__all__ = ["AutoCells"]

# A cell whose first code line starts with one of these stays in the kernel: line and cell
# magics (``%nbaccel auto off`` among them), shell commands and help.
_KERNEL_PREFIXES = ("%", "!", "?")


class AutoCells:
    """A cleanup input transformer: ``cell`` -> ``%%nbaccel`` + ``cell`` while switched on.

    It sits in ``shell.input_transformers_cleanup`` (IPython 7 and later), which IPython runs
    on the raw cell before it turns ``%%`` lines into magic calls, so the wrapped cell goes
    through the ``%%nbaccel`` magic like a cell the user marked by hand.
    """

    has_side_effects = False  # IPython 8 may call it while checking a cell is complete

    def __init__(self, shell: Any) -> None:
        self.shell = shell

    def __call__(self, lines: list[str]) -> list[str]:
        code = [line.strip() for line in lines if line.strip()]
        code = [line for line in code if not line.startswith("#")]
        if not code or code[0].startswith(_KERNEL_PREFIXES):
            return lines
        return ["%%nbaccel\n", *lines]

    @property
    def active(self) -> bool:
        """True while the transformer is installed in the shell."""
        return any(t is self for t in self.shell.input_transformers_cleanup)

    def switch(self, on: bool) -> None:
        """Install (``on``) or remove the transformer; idempotent."""
        chain = self.shell.input_transformers_cleanup
        chain[:] = [t for t in chain if t is not self]
        if on:
            chain.append(self)
