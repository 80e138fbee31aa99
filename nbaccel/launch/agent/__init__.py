"""The agent a remote host runs for a notebook's launch or pool (``python -m
nbaccel.launch.agent``): it speaks frames over the ssh or srun channel (``wire``), runs its
ranks under the same supervisor as the notebook's own ranks, and measures their memory
(``usage``). Nothing here imports the notebook's side.
"""
