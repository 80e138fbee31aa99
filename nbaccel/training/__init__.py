"""The Accelerator and the parts it is built from (see ``docs/architecture.md``)."""

from .accelerator import Accelerator

__all__ = ["Accelerator"]
