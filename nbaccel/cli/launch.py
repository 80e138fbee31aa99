"""``nbaccel launch``: run a script on many processes and machines through torch's elastic agent.

Settings come from one precedence (flag > config file > default) and reach the script's
``Accelerator()`` as one resolved config file (``NBACCEL_CONFIG_FILE`` in the processes).
Several processes or machines run under ``torch.distributed.run``'s agent, so clusters that
run ``torchrun`` run this the same way; one process runs as a plain child process. With
``--hosts`` (or the config file's ``hosts``) the script runs on those machines instead, started
from here (``hostlaunch.py``). The command exits with the script's exit code (the first
failing rank's); Ctrl-C stops every process. ``python -m nbaccel.cli.launch --call FUNCTION
script.py ...`` is the entry used when a script has no ``if __name__ == "__main__":`` of its
own (see ``main_training_function``).
"""

from __future__ import annotations

import argparse
import ast
import logging
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..config import ConfigError, ResolvedLaunch, config_in_force, resolve_launch, save_config_file
from ..environment import (
    CONFIG_FILE_VARIABLE,
    deepspeed_launch_variables,
    fsdp_launch_variables,
    gloo_socket_interface,
    malloc_variables,
    read_malloc_choice,
    user_thread_count,
)
from ..launch.nodes.meeting import gloo_interface
from ..launch.nodes.netif import route_to
from ..launch.parent.variables import temporary_environment
from ..validation import is_int
from .config import add_field_flags, field_values
from .hostlaunch import check_hosts_flags, run_on_hosts
from .hostscript import entry_function
from .parsing import config_file_option

__all__ = [
    "NAME",
    "SUMMARY",
    "add_arguments",
    "add_launch_options",
    "execute",
    "run",
    "run_entry",
    "script_command",
]

NAME = "launch"
SUMMARY = "run a script on several processes / machines"

_LOOPBACK = "127.0.0.1"
_SKIP = ("compute_environment", "distributed_type", "num_processes", "use_cpu", "debug")
_SKIP_LAUNCHER = ("max_restarts", "start_method", "display_ranks")  # launcher-only keys
_SKIP_TPU = ("tpu_env", "tpu_use_cluster", "tpu_use_sudo", "tpu_name", "tpu_zone", "tpu_vm")


def add_launch_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose how a script is launched (shared with ``nbaccel test``)."""
    config_file_option(parser, "config file", "the one in force")
    parser.add_argument(
        "--num_processes",
        type=int,
        default=None,
        help="processes on THIS machine (a config file's num_processes is the total)",
    )
    parser.add_argument("--cpu", action="store_true", default=None, help="run on the CPU")
    parser.add_argument("--debug", action="store_true", default=None, help="debug checks")
    parser.add_argument("--use_fsdp", action="store_true", help="distributed_type FSDP")
    parser.add_argument(
        "--use_deepspeed",
        action="store_true",
        help="distributed_type DEEPSPEED (with --zero_stage, --offload_optimizer_device, ...)",
    )
    parser.add_argument("--max_restarts", type=int, default=None, help="restarts after a failure")
    parser.add_argument(
        "--monitor_interval", type=float, default=None, help="seconds between process checks"
    )
    add_field_flags(parser, skip=_SKIP + _SKIP_TPU + _SKIP_LAUNCHER)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel launch``."""
    add_launch_options(parser)
    parser.add_argument("-m", "--module", action="store_true", help="run a module, like python -m")
    parser.add_argument("script", help="the script (or module with -m)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")


def resolve_from_args(args: argparse.Namespace) -> ResolvedLaunch:
    """Flags > config file > defaults."""
    explicit: dict[str, Any] = field_values(args)
    explicit.update(explicit.pop("fsdp_config", {}))
    explicit["num_processes"] = args.num_processes
    explicit["use_cpu"] = args.cpu
    explicit["debug"] = args.debug
    explicit["max_restarts"] = args.max_restarts
    explicit["monitor_interval"] = args.monitor_interval
    if args.use_fsdp and args.use_deepspeed:
        raise ConfigError(
            "--use_fsdp and --use_deepspeed both given; a run shards with one of them, so keep "
            "one flag."
        )
    if args.use_fsdp:
        explicit["distributed_type"] = "FSDP"
    if args.use_deepspeed:
        explicit["distributed_type"] = "DEEPSPEED"
    loaded = config_in_force(args.config_file, report=_note)
    return resolve_launch(explicit, loaded)


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Resolve the settings and run the script; returns its exit code."""
    try:
        resolved = resolve_from_args(args)
        read_malloc_choice()  # a bad NBACCEL_MALLOC_TUNING: said here, before any process
    except (ConfigError, ValueError) as exc:
        print(f"nbaccel launch: {exc}", file=sys.stderr)
        return 2
    problem = check_hosts_flags(args, resolved)
    if problem is not None:
        print(f"nbaccel launch: {problem}", file=sys.stderr)
        return 2
    if resolved.config.hosts is not None:  # --hosts, or the config file's hosts
        return run_on_hosts(resolved, args.script, args.script_args, args.module)
    command = script_command(
        args.script, args.script_args, args.module, resolved.config.main_training_function
    )
    return execute(resolved, command)


def script_command(script: str, args: list[str], module: bool, function: str) -> list[str]:
    """The arguments after ``python -u`` that run the script in each process."""
    if module:
        return ["-m", script, *args]
    path = Path(script)
    if not path.is_file():
        raise SystemExit(f"nbaccel launch: no such script: {script}")
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError:
        return [script, *args]  # let Python report it, with the usual traceback
    if entry_function(tree, function) is not None:
        return ["-m", "nbaccel.cli.launch", "--call", function, script, *args]
    return [script, *args]


def run_entry(argv: list[str]) -> int:
    """``--call FUNCTION script.py args``: run the script's top level, then call FUNCTION()."""
    if len(argv) < 3 or argv[0] != "--call":
        print(
            "usage: python -m nbaccel.cli.launch --call FUNCTION script.py [args]", file=sys.stderr
        )
        return 2
    function, script, rest = argv[1], argv[2], argv[3:]
    sys.argv = [script, *rest]
    sys.path.insert(0, str(Path(script).resolve().parent))
    namespace = runpy.run_path(script, run_name="__nbaccel_script__")
    result = namespace[function]()
    return result if is_int(result) else 0


# -- execution -------------------------------------------------------------------------------


def _child_environment(resolved: ResolvedLaunch, config_path: Path) -> dict[str, str]:
    cfg = resolved.config
    env = {CONFIG_FILE_VARIABLE: str(config_path)}
    if resolved.cpu:
        env["NBACCEL_USE_CPU"] = "1"  # read by the device choice of every process
    if cfg.debug:
        env["NBACCEL_DEBUG_MODE"] = "1"
    if cfg.distributed_type == "FSDP":
        env.update(fsdp_launch_variables(cfg.fsdp_config.for_processes(resolved.cpu)))
    if cfg.distributed_type == "DEEPSPEED":  # Accelerate's variables; Accelerator() reads them
        env.update(deepspeed_launch_variables(cfg.deepspeed_config.launch_settings()))
    if cfg.gpu_ids not in (None, "all") and not resolved.cpu:
        env["CUDA_VISIBLE_DEVICES"] = str(cfg.gpu_ids)
    if cfg.distributed_type == "XLA" and cfg.downcast_bf16 and cfg.mixed_precision == "bf16":
        env["XLA_DOWNCAST_BF16"] = "1"
    env.update(malloc_variables())  # as a notebook's ranks: docs/launcher.md, "Memory a rank frees"
    if user_thread_count() is None and resolved.cpu:
        env["OMP_NUM_THREADS"] = str(
            max(1, (os.cpu_count() or 1) // resolved.processes_per_machine)
        )
    if cfg.num_machines == 1 and cfg.main_process_ip is None and resolved.cpu:
        env["GLOO_SOCKET_IFNAME"] = gloo_socket_interface() or "lo"
    elif cfg.num_machines > 1:  # the interface that reaches the main machine (or the user's)
        env["GLOO_SOCKET_IFNAME"] = gloo_interface(route_to(cfg.main_process_ip or _LOOPBACK))
    return env


def _strategy(resolved: ResolvedLaunch) -> str:
    """What the processes' ``Accelerator()`` will run, as the banner says it."""
    cfg = resolved.config
    if cfg.distributed_type not in ("FSDP", "DEEPSPEED"):
        return cfg.distributed_type
    name = "FSDP" if cfg.distributed_type == "FSDP" else "DeepSpeed"
    if resolved.world_size == 1 and resolved.max_restarts == 0:  # not launched: _run_one
        how = "unsharded" if name == "FSDP" else "without DeepSpeed"
        return f"NO ({name} asked for, but one process on its own trains {how})"
    if name == "FSDP":
        return f"FSDP ({cfg.fsdp_config.describe(resolved.cpu)})"
    return f"DeepSpeed ({cfg.deepspeed_config.describe()})"


def _describe(resolved: ResolvedLaunch) -> str:
    cfg = resolved.config
    where = f"{resolved.path}" if resolved.path else "no config file"
    return (
        f"nbaccel launch: {resolved.processes_per_machine} process(es) x {cfg.num_machines} "
        f"machine(s), {_strategy(resolved)}, {'cpu' if resolved.cpu else 'gpu'}, "
        f"mixed_precision={cfg.mixed_precision} ({where})"
    )


def execute(resolved: ResolvedLaunch, command: list[str]) -> int:
    """Run ``python -u COMMAND`` in every process; return the exit code of the job."""
    print(_describe(resolved), file=sys.stderr, flush=True)
    if resolved.config.debug:
        for key, source in sorted(resolved.sources.items()):
            print(f"  {key} = {getattr(resolved.config, key)!r}  ({source})", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="nbaccel-launch-") as tmp:
        config_path = save_config_file(resolved.config, Path(tmp) / "resolved_config.yaml")
        with temporary_environment(_child_environment(resolved, config_path)):
            if resolved.world_size == 1 and resolved.max_restarts == 0:
                return _run_one(command)
            return _run_elastic(resolved, command, Path(tmp))


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def _run_one(command: list[str]) -> int:
    process = subprocess.Popen([sys.executable, "-u", *command])
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        return _exit_code(process.wait())
    except (KeyboardInterrupt, _Stopped) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        print(f"nbaccel launch: stopped by {signal.Signals(signum).name}.", file=sys.stderr)
        return 128 + int(signum)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_elastic(resolved: ResolvedLaunch, command: list[str], tmp: Path) -> int:
    # torchrun's agent is slow to import and only multi-machine launches use it
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from ..launch.nodes.elastic import elastic_rendezvous  # torchrun's rendezvous, as above

    cfg = resolved.config
    if not cfg.debug:
        logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    try:
        rdzv = elastic_rendezvous(
            cfg.num_machines,
            cfg.machine_rank,
            cfg.main_process_ip,
            cfg.main_process_port,
            cfg.rdzv_backend,
            timedelta(seconds=900),
        )
    except (OSError, ValueError) as exc:  # a taken port, an address that is not machine 0's
        print(f"nbaccel launch: {exc}", file=sys.stderr)
        return 1
    launch_config = LaunchConfig(
        min_nodes=cfg.num_machines,
        max_nodes=cfg.num_machines,
        nproc_per_node=resolved.processes_per_machine,
        run_id="none",
        rdzv_endpoint=rdzv.endpoint,
        rdzv_backend=rdzv.backend,
        rdzv_configs=rdzv.configs,
        max_restarts=resolved.max_restarts,
        monitor_interval=resolved.monitor_interval,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp / "logs")),
        shutdown_timeout=5,
        local_addr=rdzv.local_addr,
    )
    try:
        elastic_launch(launch_config, entrypoint=sys.executable)("-u", *command)
        return 0
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        code = _exit_code(failure.exitcode) or 1
        print(
            f"nbaccel launch: rank {rank} (pid {failure.pid}) failed first, exit code {code}; "
            "the other processes were stopped.",
            file=sys.stderr,
        )
        return code
    except (SignalException, KeyboardInterrupt) as exc:
        sig = getattr(exc, "sigval", signal.SIGINT)
        print(
            f"nbaccel launch: stopped by {signal.Signals(sig).name}; every process was stopped.",
            file=sys.stderr,
        )
        return 128 + int(sig)
    finally:
        rdzv.close()


if __name__ == "__main__":
    sys.exit(run_entry(sys.argv[1:]))
