"""Benchmarks that time nbaccel side by side with its peers: ``python -m benchmarks NAME|all``."""

from __future__ import annotations

from .registry import BENCHMARKS, Benchmark

__all__ = ["BENCHMARKS", "Benchmark"]
