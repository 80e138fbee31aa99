"""Setting launch variables in the launcher's own process for the length of a launch."""

from ...environment.patching import temporary_environment

__all__ = ["temporary_environment"]
