"""A worker's exception in a form that always crosses the process boundary."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass

import cloudpickle

from .location import CollectiveCall
from .wire import dumps_for_parent

__all__ = ["RemoteException", "capture_exception"]

# Messages that a rank raises only because a peer went away: never reported as the cause.
_PEER_LOSS = re.compile(
    r"connection (closed|reset)|broken pipe|peer|recvBytes|sendBytes|Socket Timeout|"
    r"DistNetworkError|DistBackendError|communicator was aborted|ProcessGroupGloo|"
    r"gloo/transport|Connection refused|timed out waiting",
    re.IGNORECASE,
)


@dataclass
class RemoteException:
    """An exception raised in a worker, in a form that always crosses the process boundary."""

    type_name: str
    message: str
    traceback: str
    pickled: bytes | None
    when: float
    collective: CollectiveCall | None = None  # the collective that raised it, if one did

    def rebuild(self) -> Exception | None:
        """The original exception, or None when it cannot be re-created here.

        Only ``Exception`` subclasses are re-raised as themselves: a rank's ``SystemExit`` or
        ``KeyboardInterrupt`` must not end or interrupt the notebook's own process.
        """
        if self.pickled is None:
            return None
        try:
            exc = cloudpickle.loads(self.pickled)
        except Exception:
            return None
        return exc if isinstance(exc, Exception) else None

    @property
    def looks_like_peer_loss(self) -> bool:
        """True when the error reads like a symptom of another rank dying."""
        return bool(_PEER_LOSS.search(f"{self.type_name}: {self.message}"))


def capture_exception(exc: BaseException, when: float) -> RemoteException:
    """Describe ``exc`` (raised in this worker) for the parent."""
    kind = type(exc)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    try:
        pickled: bytes | None = dumps_for_parent(exc)
    except Exception:
        pickled = None
    text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    return RemoteException(name, str(exc), text, pickled, when, _collective_of(exc))


def _collective_of(exc: BaseException) -> CollectiveCall | None:
    """The collective a worker noted on ``exc`` or on an exception it came from."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        call = getattr(current, "_nbaccel_collective", None)
        if isinstance(call, CollectiveCall):
            return call
        current = current.__cause__ or current.__context__
    return None
