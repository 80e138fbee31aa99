"""Which placement runs the ranks of an attempt or a generation: the one choice of the kind."""

from __future__ import annotations

from ..nodes.meeting import Meeting
from .hostplacement import OnHosts
from .localranks import ThisMachine
from .placement import Placement, PlaceRequest

__all__ = ["place"]


def place(request: PlaceRequest, meeting: Meeting | None = None) -> Placement:
    """The placement of the request's ranks: on its config's ``hosts`` (started and checked
    now), else on this machine (``meeting``: where the machines of a ``num_nodes > 1`` launch
    met)."""
    if request.config.hosts is not None:
        return OnHosts(request)
    return ThisMachine(request, meeting)
