"""One machine of a 2-node run over loopback, for the multi-node fault tests.

Usage: python node_target.py NODE_RANK PORT. Each node runs one training process; the run is
slowed down (0.3 s a step) and announces its steps, so that a test can kill a node mid-run.
"""

from __future__ import annotations

import sys

import fault_helpers as fh  # beside this script, whose folder Python searches first

from nbaccel import notebook_launcher

node, port = int(sys.argv[1]), int(sys.argv[2])
notebook_launcher(
    fh.train,
    kwargs={"announce": True, "step_delay": 0.3},
    num_processes=1,
    num_nodes=2,
    node_rank=node,
    master_addr="127.0.0.1",
    use_port=port,
    rendezvous_timeout=30,
    start_method="fork",
)
print("FINISHED", flush=True)
