"""A long-lived Python process that runs a benchmark's code cells, as a kernel does, but
without Jupyter: ``python -m benchmarks.runner FD``, started by ``hosts.ScriptHost``.

Cells run in a fresh ``__main__`` module, so the functions they define are "defined in the
notebook" (cloudpickle ships them by value to spawned processes) and a spawned child has no main
module to re-import, as under a kernel. Each message on the connection ``FD`` is
``(code, expression)``; the reply is ``("ok", value of expression)`` or ``("error", traceback)``.
After every cell the signal handlers are put back as they were (a launcher such as
torch-elastic's installs its own and leaves them behind), so a stray signal cannot turn into an
exception between two cells. End of input, or ``None``, ends the process.
"""

from __future__ import annotations

import signal
import sys
import traceback
import types
from multiprocessing.connection import Connection
from typing import Any

_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGCHLD", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def _run_cell(namespace: dict[str, Any], code: str, expression: str | None) -> tuple[str, Any]:
    try:
        exec(compile(code, "<cell>", "exec"), namespace)
        return "ok", (eval(expression, namespace) if expression else None)
    except BaseException:  # the cell's failure is the benchmark's to report, whatever it is
        return "error", traceback.format_exc()


def serve(conn: Connection) -> int:
    """Run cells from ``conn`` until it closes; the exit status of the process."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return 0
        if message is None:
            return 0
        code, expression = message
        reply = _run_cell(main.__dict__, code, expression)
        for sig, handler in handlers.items():
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.send(reply)
        except Exception as exc:  # e.g. a value that does not pickle: say so instead
            conn.send(("error", f"the cell's value could not be sent back: {exc!r}"))


if __name__ == "__main__":
    sys.exit(serve(Connection(int(sys.argv[1]))))
