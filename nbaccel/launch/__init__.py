"""Launching workers from a notebook: ``notebook_launcher``, ``WorkerPool`` and their parts.

The package has these sides and a vocabulary they share (docs/architecture.md draws them):

- ``parent/``: what runs in the notebook's own process: the launcher and the pool, where
  their ranks are placed, the output relay, the cell renderer, the error report;
- ``supervision/``: the one loop that starts and watches worker processes, run by the
  notebook's side and by a host's agent;
- ``agent/``: what a remote host runs for the notebook (its frames, its ranks' memory);
- ``worker/``: what runs in a worker process: its entry point, its task runner, its side of
  the output and display channels; it never imports ``parent/``, ``agent/``,
  ``supervision/`` or ``nodes/``;
- ``nodes/``: meeting other machines: the rendezvous store, routes and interfaces, the watch
  over the other machines, torchrun's elastic rendezvous;
- the modules here: what both sides speak: the typed messages (``protocol``), the hand-off
  to a worker (``spec``), events and states, tasks, the settings (``config``), the output
  prefix, a worker's exception (``remote``) and the CUDA fork guard (``guard``).
"""
