"""A notebook-like process for the interrupt tests: it launches a 2-process training run and
is interrupted (SIGINT) by the test while the run starts, trains or saves a checkpoint.

Usage: python interrupt_target.py PHASE PROJECT_DIR, PHASE one of startup, training, saving.
"""

from __future__ import annotations

import sys

import fault_helpers as fh  # beside this script, whose folder Python searches first

from nbaccel import notebook_launcher

phase, project = sys.argv[1], sys.argv[2]
if phase == "startup":  # spawned workers take seconds to import torch: interrupted before
    notebook_launcher(fh.train, (None,), num_processes=2, start_method="spawn")
elif phase == "training":
    notebook_launcher(
        fh.train, kwargs={"announce": True, "step_delay": 0.3}, num_processes=2, start_method="fork"
    )
else:
    notebook_launcher(
        fh.train,
        kwargs={"project_dir": project, "hold_save": 1, "announce": True},
        num_processes=2,
        start_method="fork",
    )
print("FINISHED", flush=True)
