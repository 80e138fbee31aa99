"""What runs in a worker process: ``main.run_worker`` (fork) and ``main.spawn_entry`` (spawn).

It imports the shared vocabulary of ``nbaccel.launch`` and never the notebook's side
(``parent/``) or the multi-machine code (``nodes/``); the layer contracts in
``pyproject.toml`` check that.
"""
