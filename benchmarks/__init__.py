"""Benchmarks that time nbaccel side by side with its peers: ``python -m benchmarks NAME|all``.

The package itself imports nothing heavy: spawned processes import
``benchmarks.launch_subjects`` (torch's spawn needs an importable function), and that must not
pull in every benchmark. ``BENCHMARKS`` and ``Benchmark`` are loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BENCHMARKS", "Benchmark"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
