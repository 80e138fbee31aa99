"""Scripts that check nbaccel on real processes: run them under ``debug_launcher`` (their
``main``) or ``nbaccel launch`` (the file)."""

from . import test_ops, test_script, test_sync

__all__ = ["test_ops", "test_script", "test_sync"]
