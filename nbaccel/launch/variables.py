"""Setting launch variables in the launcher's own process for the length of a launch."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = ["temporary_environment"]


@contextlib.contextmanager
def temporary_environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None values, remove) variables, and put back exactly what was there.

    Used where the launched processes inherit the launcher's environment (the TPU spawn,
    torch's elastic agent) and for the one process that runs in the kernel itself.
    """
    saved = {key: os.environ.get(key) for key in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
