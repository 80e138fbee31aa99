"""Helpers for tests of code that uses nbaccel (and for nbaccel's own tests)."""

from ..state.registry import reset_registry

__all__ = ["reset_state"]


def reset_state(destroy_process_group: bool = False) -> None:
    """Forget the process-wide state so the next ``PartialState()`` sets it up afresh.

    Args:
        destroy_process_group: also destroy the default process group. Leave it False to
            reuse one process group across many tests (the next state adopts it).
    """
    reset_registry(destroy_process_group=destroy_process_group)
