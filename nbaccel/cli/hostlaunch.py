"""``nbaccel launch --hosts node1,node2 script.py``: the script on other machines, started from
here through the launcher's hosts path (``notebook_launcher(hosts=...)``: one agent per host
over ssh, a job step per node with ``--hosts slurm``, or a Ray actor per node of a Ray cluster
with ``--hosts ray``, ``--num_machines`` of its nodes: every node that fits by default),
``--num_processes`` ranks on each.

The settings are resolved as for any ``nbaccel launch`` (flag > config file > default) and
reach the launcher as the resolved config file in force (``NBACCEL_CONFIG_FILE`` in this
process), so the file's keys apply here exactly as they apply to ``notebook_launcher``. The
script travels as text (``hostscript.py``). Every setting is checked before anything starts
(exit code 2). The ranks' output comes back prefixed with host and rank; the command exits
with the first failing rank's exit code (128+N for a signal N, 1 for an exception), 130 on
Ctrl-C and 143 on SIGTERM, after every rank on every host was stopped.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import warnings
from pathlib import Path

import yaml

from ..config import ResolvedLaunch, save_config_file
from ..config.hosts import hosts_text, is_ray, is_slurm, ray_num_nodes
from ..environment import deepspeed_launch_variables
from ..launch.config import LaunchConfig
from ..launch.parent.errors import WorkerError
from ..launch.parent.notebook import notebook_launcher
from ..launch.parent.variables import temporary_environment
from ..launch.states import Fate
from .hostscript import ScriptJob, run_script, script_job

__all__ = ["HOSTS_FLAGS", "check_hosts_flags", "run_on_hosts"]

HOSTS_FLAGS = ("hosts_python", "hosts_cwd", "hosts_connect_timeout")


def check_hosts_flags(args: argparse.Namespace, resolved: ResolvedLaunch) -> str | None:
    """What is wrong with ``--hosts_*`` flags given where no hosts are in force, or None."""
    given = [f"--{name}" for name in HOSTS_FLAGS if name in vars(args)]
    if given and resolved.config.hosts is None:
        return (
            f"{', '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} to a launch on "
            "other machines; pass --hosts node1,node2, slurm or ray (or set hosts in the config "
            "file) as well, or leave them out."
        )
    return None


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the launcher stops every rank as for Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated()


def _describe(resolved: ResolvedLaunch) -> str:
    cfg = resolved.config
    assert cfg.hosts is not None
    where = f"{resolved.path}" if resolved.path else "no config file"
    machines = _machines(cfg.hosts, cfg.num_machines)
    device = "cpu" if cfg.use_cpu else "the hosts' GPUs (cpu where they have none)"
    deepspeed = ""
    if cfg.distributed_type == "DEEPSPEED":
        deepspeed = f", DeepSpeed ({cfg.deepspeed_config.describe()})"
    return (
        f"nbaccel launch: {resolved.processes_per_machine} process(es) x {machines} "
        f"({hosts_text(cfg.hosts)}){deepspeed}, {device}, mixed_precision={cfg.mixed_precision} "
        f"({where})"
    )


def _machines(hosts: list[str] | str, num_machines: int) -> str:
    """The machines of a launch on hosts, as the banner names them."""
    if is_slurm(hosts):
        return "the SLURM job's nodes"
    if is_ray(hosts):
        nodes = ray_num_nodes(hosts, num_machines)
        return "the Ray cluster's nodes" if nodes is None else f"{nodes} of the Ray cluster's nodes"
    return f"{len(hosts)} host(s)"


def _ranks_variables(resolved: ResolvedLaunch) -> dict[str, str] | None:
    """The variables every rank gets besides the resolved file: DeepSpeed's settings (which
    ``Accelerator()`` reads from Accelerate's variables), for a DEEPSPEED launch."""
    cfg = resolved.config
    if cfg.distributed_type != "DEEPSPEED":
        return None
    return deepspeed_launch_variables(cfg.deepspeed_config.launch_settings())


def _ranks_config(resolved: ResolvedLaunch) -> str:
    """The resolved file as the ranks read it: the hosts are the launcher's business."""
    plain = resolved.config.replace(hosts=None, hosts_python=None, hosts_cwd=None).to_dict()
    plain.pop("hosts_connect_timeout", None)
    return yaml.safe_dump(plain, sort_keys=False, default_flow_style=False)


def run_on_hosts(
    resolved: ResolvedLaunch, script: str, script_args: list[str], module: bool
) -> int:
    """Run the script on ``resolved.config.hosts``; returns the command's exit code."""
    cfg = resolved.config
    job = script_job(
        script, script_args, module, cfg.main_training_function, _ranks_config(resolved)
    )
    with tempfile.TemporaryDirectory(prefix="nbaccel-launch-") as tmp:
        path = save_config_file(cfg, Path(tmp) / "resolved_config.yaml")
        with temporary_environment({"NBACCEL_CONFIG_FILE": str(path)}):
            try:  # the launch checks the same again; its warnings are shown then, once
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    LaunchConfig.build(hosts=None)
            except (TypeError, ValueError, ConnectionError, ImportError) as exc:
                print(f"nbaccel launch: {exc}", file=sys.stderr)  # ray: no cluster, no Ray
                return 2
            print(_describe(resolved), file=sys.stderr, flush=True)
            return _launch(job, _ranks_variables(resolved))


def _launch(job: ScriptJob, env: dict[str, str] | None) -> int:
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        notebook_launcher(run_script, (job,), env=env)  # the rest from the resolved file
        return 0
    except KeyboardInterrupt as exc:
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        print(
            f"nbaccel launch: stopped by {signum.name}; every rank on every host was stopped.",
            file=sys.stderr,
        )
        return 128 + int(signum)
    except Exception as exc:
        return _report(exc)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _report(exc: Exception) -> int:
    """Print why the launch failed; the exit code (the failing rank's, as ``nbaccel launch``
    gives without hosts)."""
    error = exc if isinstance(exc, WorkerError) else exc.__cause__
    if not isinstance(error, WorkerError):  # HostError, MachineLostError: named in the message
        print(f"nbaccel launch: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    where = f"rank {error.rank} on {error.host}" if error.host else f"rank {error.rank}"
    if error.type_name == "SystemExit":  # the script chose its exit code: no traceback
        number = error.message.lstrip("-").isdigit()
        code = int(error.message) if number else 1  # sys.exit("text") exits with 1
        said = "" if number else f" ({error.message})"
        print(
            f"nbaccel launch: {where} exited with code {code}{said}; every other rank was stopped.",
            file=sys.stderr,
        )
        return code
    print(f"nbaccel launch: {error}", file=sys.stderr)
    fate = next((f for f in error.fates if f.rank == error.rank), None)
    if fate is None or fate.state == Fate.RAISED or fate.exit_code is None:
        return 1
    return 128 - fate.exit_code if fate.exit_code < 0 else fate.exit_code or 1
