"""A pytest plugin that turns the SIGTERM ``tests/run.sh`` sends a tier past its budget into
a ``KeyboardInterrupt``: ``tests/run.sh`` loads it for every tier (``-p tests.tier_term``).

pytest dies at once on SIGTERM, so the session's fixtures never tear down: a tier killed at
its budget would leave its beds up (the hosts bed's daemons, the Ray cluster's raylets and
namespaces) for the next tier and the next run to trip over. Interrupted instead, pytest
runs every finalizer and prints its summary; ``timeout --kill-after`` still bounds the
teardown, and the tier's status stays ``timeout``'s 124.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second TERM ends it the plain way
    raise KeyboardInterrupt(f"signal {signum}: the tier ran past its budget")


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
