"""``hosts="slurm"``: the nodes of the SLURM allocation this notebook runs in, and the ``srun``
command that starts one host's agent there.

Inside an allocation (``salloc -N 2`` then Jupyter in that shell, or an ``sbatch`` script that
runs the Jupyter server) the launch takes the job's nodes, in SLURM's order, as its machines and
starts each agent as a job step of one task on its node: ``--overlap`` lets the step run beside
the step that runs the kernel itself, ``--whole`` gives it every CPU and GPU the job holds on
that node (the ranks there then see the job's GPUs, ``CUDA_VISIBLE_DEVICES`` as SLURM sets it,
one per local rank). The agent speaks over srun's stdin and stdout, as over ssh's;
``--unbuffered`` makes slurmstepd pass its frames on as they are written, where it would
otherwise hold back output until a line ends.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from ..environment import slurm_allocation

__all__ = ["AGENT_MODULE", "SlurmAllocation", "current_allocation", "srun_argv"]

AGENT_MODULE = "nbaccel.launch.agent"
_SCONTROL_TIMEOUT_S = 30.0
_OUTSIDE = (
    'hosts="slurm" runs the ranks on the nodes of the SLURM allocation this notebook runs in, '
    "but this kernel runs outside one (SLURM_JOB_ID is not set). Start Jupyter inside an "
    "allocation (`salloc -N 2`, then `jupyter lab` in that shell; or an sbatch script that runs "
    "`jupyter lab`), or name the machines: hosts=['node1', 'node2']."
)


@dataclass(frozen=True)
class SlurmAllocation:
    """The job this kernel runs in: its id and its nodes, in SLURM's order."""

    job_id: str
    nodes: tuple[str, ...]


def current_allocation() -> SlurmAllocation:
    """The allocation this process runs in; ``ValueError`` saying how to get one outside one,
    or where SLURM's commands are missing or cannot read the node list."""
    found = slurm_allocation()
    if found is None:
        raise ValueError(_OUTSIDE)
    job_id, compressed = found
    missing = [tool for tool in ("srun", "scontrol") if shutil.which(tool) is None]
    if missing:
        raise ValueError(
            f'hosts="slurm": this kernel runs in SLURM job {job_id}, but {" and ".join(missing)} '
            f"{'is' if len(missing) == 1 else 'are'} not on its PATH; add SLURM's bin directory "
            "to PATH (e.g. with `module load slurm`) before starting Jupyter."
        )
    try:
        done = subprocess.run(
            ["scontrol", "show", "hostnames", compressed],
            capture_output=True,
            text=True,
            timeout=_SCONTROL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(
            f'hosts="slurm": `scontrol show hostnames {compressed}` did not answer within '
            f"{_SCONTROL_TIMEOUT_S:.0f}s; check that SLURM's controller is reachable (sinfo)."
        ) from None
    nodes = tuple(line.strip() for line in done.stdout.splitlines() if line.strip())
    if done.returncode != 0 or not nodes:
        raise ValueError(
            f'hosts="slurm": SLURM job {job_id}\'s node list {compressed!r} could not be read: '
            f"{(done.stderr or done.stdout).strip() or f'exit code {done.returncode}'}."
        )
    return SlurmAllocation(job_id, nodes)


def srun_argv(job_id: str, node: str, python: str) -> list[str]:
    """The srun command that starts the agent on ``node`` as a step of job ``job_id``."""
    return [
        "srun",
        "--unbuffered",
        f"--jobid={job_id}",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--overlap",
        "--whole",
        "--quiet",
        python,
        "-m",
        AGENT_MODULE,
    ]
