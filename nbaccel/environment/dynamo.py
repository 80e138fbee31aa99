"""The ``ACCELERATE_DYNAMO_*`` variables that Accelerate's launcher writes for torch.compile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._vars import _bool_var, _environ

__all__ = ["dynamo_settings"]

_PREFIX = "ACCELERATE_DYNAMO_"
_BOOLEANS = {
    "fullgraph": "USE_FULLGRAPH",
    "dynamic": "USE_DYNAMIC",
    "use_regional_compilation": "USE_REGIONAL_COMPILATION",
}


def dynamo_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``TorchDynamoPlugin`` fields that the environment sets, by field name.

    ``ACCELERATE_DYNAMO_BACKEND`` and ``ACCELERATE_DYNAMO_MODE`` give ``backend`` and ``mode``
    as written; ``ACCELERATE_DYNAMO_USE_FULLGRAPH``, ``..._USE_DYNAMIC`` and
    ``..._USE_REGIONAL_COMPILATION`` are yes/no values. Variables that are not set are left
    out, so the plugin keeps its own defaults for them.
    """
    env = _environ(environ)
    found: dict[str, Any] = {}
    for field, suffix in (("backend", "BACKEND"), ("mode", "MODE")):
        raw = env.get(_PREFIX + suffix, "").strip()
        if raw:
            found[field] = raw
    for field, suffix in _BOOLEANS.items():
        if env.get(_PREFIX + suffix) is not None:
            found[field] = _bool_var(env, _PREFIX + suffix)
    return found
