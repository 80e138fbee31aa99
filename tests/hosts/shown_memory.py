"""Kernel code for the tests of the memory that the hosts' agents measure: ranks that wait
until the dashboard shows their memory, rather than for a number of the agents' rounds.

An agent measures its ranks every 2 seconds, and what it measured reaches the dashboard only
while a launch or a pool call runs; a rank that returned before that is shown no figure. So
each rank notes its own RSS in ``figures`` (a folder of the login machine, whose disk the
nodes share) and stays until the notebook says "shown"; the notebook's ``on_event``, which
sees every event after the dashboard took it, says so once the dashboard holds, for every
rank, a figure within a quarter of what the rank read of itself. A rank that waits longer
than ``within`` seconds fails the launch with a sentence that says what it waited for.
"""

from __future__ import annotations

SHOWN_MEMORY = """
import os, tempfile
from nbaccel.launch.events import MemoryEvent

def near(shown, own):
    return shown is not None and abs(shown - own) < own / 4

def own_rss_once_shown(figures, within=30.0):
    import os, time, psutil
    rank, own = os.environ["RANK"], psutil.Process().memory_info().rss
    path = os.path.join(figures, f"own-{rank}")
    with open(path + ".part", "w") as out:
        out.write(str(own))
    os.replace(path + ".part", path)  # read whole or not at all
    deadline = time.monotonic() + within
    while not os.path.exists(os.path.join(figures, "shown")):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank {rank}: the dashboard showed no figure near its RSS of {own} bytes "
                f"within {within}s"
            )
        time.sleep(0.1)
    return psutil.Process().memory_info().rss

def when_shown(board, figures, ranks):
    def on_event(event):
        if not isinstance(event, MemoryEvent):
            return
        for rank in ranks:
            path = os.path.join(figures, f"own-{rank}")
            if not os.path.exists(path):
                return
            with open(path) as saved:
                if not near(board.ranks[rank].rss, int(saved.read())):
                    return
        open(os.path.join(figures, "shown"), "w").close()
    return on_event
"""
