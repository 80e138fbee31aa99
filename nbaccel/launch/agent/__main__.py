"""``python -m nbaccel.launch.agent [--die-with-parent]``: what each host of ``hosts=`` runs
(``--die-with-parent``: ended with the process that started it, a Ray node's actor)."""

from __future__ import annotations

import os
import signal
import sys

from ..lifeline import die_with_parent
from .main import leave, main

if __name__ == "__main__":
    if "--die-with-parent" in sys.argv[1:]:
        die_with_parent(os.getppid())
        # a Ray worker blocks signals in the thread that started this process, and a blocked
        # mask outlives exec: unblock them, or the ranks would never see an interrupt
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    leave(main())
