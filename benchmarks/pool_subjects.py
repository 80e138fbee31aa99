"""The worker-pool benchmark's subjects: the cells a notebook user writes for each pool.

A pool subject has a cell that imports it (``setup``), one that starts 2 workers and returns
once they are ready (``start``), one that stops them (``stop``) and the trivial cells whose
round trip is timed once the pool is warm (``trips``: label -> cell), and the calls that are
also timed inside the kernel, without the kernel's own messaging (``calls``: label -> one
statement). A launch subject
(``launch(2)`` from ``benchmarks/launch_subjects.py``) starts and ends its processes in every
cell: the cold cost that a pool saves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .launch_subjects import SUBJECTS as LAUNCH_SUBJECTS

__all__ = ["KERNEL_FLOOR", "LAUNCHES", "POOLS", "PoolSubject"]


@dataclass(frozen=True)
class PoolSubject:
    """One pool: its label, the distribution it needs (None: nbaccel) and its cells."""

    label: str
    setup: str
    start: str
    stop: str
    trips: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    peer: str | None = None


# %dist_init returns before its workers listen, and a message sent before then is lost (the
# cell waits 30 s for it): ready means that the workers answer a "sync".
_NBDISTRIBUTED_START = """
%dist_init -n 2
_dist = get_ipython().magics_manager.registry["DistributedMagic"]._comm_manager
for _attempt in range(600):
    try:
        _dist.send_to_all("sync", {}, timeout=0.2)
        break
    except Exception:
        pass
else:
    raise TimeoutError("nbdistributed's workers did not answer within 120 s")
"""

POOLS: dict[str, PoolSubject] = {
    s.label: s
    for s in (
        PoolSubject(
            "nbaccel",
            setup="%load_ext nbaccel\nfrom nbaccel.magics import active_pool",
            start="%nbaccel start -n 2 --cpu",
            stop="%nbaccel stop",
            trips={
                "nbaccel %%nbaccel cell": "%%nbaccel\n1",
                "nbaccel pool.run(lambda: 1)": "active_pool().run(lambda: 1)",
            },
            calls={"nbaccel pool.run(lambda: 1)": "active_pool().run(lambda: 1)"},
        ),
        PoolSubject(
            "nbdistributed",
            setup="%load_ext nbdistributed",
            start=_NBDISTRIBUTED_START,
            stop="%dist_shutdown",
            trips={"nbdistributed %%distributed cell": "%%distributed\n1"},
            peer="nbdistributed",
        ),
        PoolSubject(
            "ipyparallel",
            setup="import ipyparallel as ipp",
            start=(
                "_cluster = ipp.Cluster(n=2, log_level=40)\n"
                "_rc = _cluster.start_and_connect_sync(activate=True)\n"
                "_rc.wait_for_engines(2, timeout=120)"
            ),
            stop="_rc.close()\n_cluster.stop_cluster_sync()",
            trips={"ipyparallel %px cell": "%px 1"},
            calls={"ipyparallel view.apply_sync(lambda: 1)": "_rc[:].apply_sync(lambda: 1)"},
            peer="ipyparallel",
        ),
    )
}
# The empty round trip of the kernel itself: the floor under every cell above.
KERNEL_FLOOR = "plain kernel cell"
# label -> the launch-latency subject whose ``launch(2)`` is timed cold
LAUNCHES = {
    "nbaccel notebook_launcher (cold)": LAUNCH_SUBJECTS["nbaccel fork"],
    "Accelerate notebook_launcher": LAUNCH_SUBJECTS["Accelerate notebook_launcher"],
}
