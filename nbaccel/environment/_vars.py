"""Reading typed values out of an environment mapping (shared by the modules here)."""

from __future__ import annotations

import os
from collections.abc import Mapping

_TRUE = {"1", "true", "yes", "on", "y"}


_FALSE = {"0", "false", "no", "off", "n", ""}


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _int_var(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    """Return the first of ``names`` that is set, as an int, or ``default``."""
    for name in names:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            return int(raw)
        except ValueError:
            raise ValueError(
                f"Environment variable {name}={raw!r} is not an integer. Unset it or set it to "
                "a whole number (it is normally set by the launcher that started this process)."
            ) from None
    return default


def _bool_var(env: Mapping[str, str], *names: str) -> bool:
    for name in names:
        raw = env.get(name)
        if raw is None:
            continue
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ValueError(
            f"Environment variable {name}={raw!r} is not a yes/no value; use one of "
            f"{sorted(_TRUE | (_FALSE - {''}))}."
        )
    return False
