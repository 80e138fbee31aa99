"""``nbaccel config``: write the config file, by questions in a terminal or by flags.

``nbaccel config`` asks a few questions (Enter keeps the default; a bad answer is asked
again). Where there is no terminal (a notebook's ``!`` shell) use ``nbaccel config default``,
``nbaccel config --KEY VALUE ...`` (a flag for every key), ``nbaccel config show`` and
``nbaccel config update --KEY VALUE ...``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import yaml

from ..config import (
    ConfigError,
    ConfigFile,
    ValueProblem,
    basic_config,
    config_location,
    field_help,
    load_config_file,
    save_config_file,
    write_location,
)
from ..config.deepspeed import DEEPSPEED_KEYS, OFFLOAD_DEVICES, DeepSpeedConfig
from ..config.fsdp import FSDP_KEYS
from ..config.schema import DISTRIBUTED_TYPES, DYNAMO_KEYS, PRECISIONS, RDZV_BACKENDS
from ..config.values import as_bool, as_choice, as_int, as_port, as_str
from ..environment import cuda_device_count, fp16_unavailable_note
from .parsing import config_file_option

__all__ = ["NAME", "SUMMARY", "add_arguments", "add_field_flags", "field_values", "run"]

NAME = "config"
SUMMARY = "write the config file (questions in a terminal, or flags)"

_LIST_FIELDS = ("tpu_env", "tpu_vm")
_KEPT_TYPES = ("FSDP", "DEEPSPEED", "XLA")  # not derived from the process count
_NESTED = ("fsdp_config", "deepspeed_config", "dynamo_config")
# deepspeed_config's keys that have flags (gradient_accumulation_steps is a key of the file's
# top level as well: its flag sets both under DeepSpeed, see config/resolve.py)
_DEEPSPEED_FLAGS = tuple(k for k in DEEPSPEED_KEYS if k != "gradient_accumulation_steps")


def add_field_flags(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """A ``--KEY VALUE`` flag for every config key (``fsdp_*``, ``deepspeed_config``'s keys
    and ``dynamo_*`` included)."""
    group = parser.add_argument_group("config keys (values are checked like the file's)")
    for name, text in field_help().items():
        if name in skip or name in _NESTED:
            continue
        nargs = "+" if name in _LIST_FIELDS else None
        group.add_argument(
            f"--{name}", default=argparse.SUPPRESS, nargs=nargs, metavar="VALUE", help=text
        )
    for name, (_, text) in FSDP_KEYS.items():
        if name not in skip:
            group.add_argument(f"--{name}", default=argparse.SUPPRESS, metavar="VALUE", help=text)
    for name in _DEEPSPEED_FLAGS:
        if name not in skip:
            text = f"deepspeed_config: {DEEPSPEED_KEYS[name][1]}"
            group.add_argument(f"--{name}", default=argparse.SUPPRESS, metavar="VALUE", help=text)
    for name in DYNAMO_KEYS:
        if name not in skip:
            group.add_argument(
                f"--{name}", default=argparse.SUPPRESS, metavar="VALUE", help="dynamo_config key"
            )


def field_values(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys given as flags, with ``fsdp_*``, DeepSpeed's and ``dynamo_*`` keys nested
    as in the file."""
    given = {k: v for k, v in vars(args).items() if k in field_help() or k in FSDP_KEYS}
    given.update({k: v for k, v in vars(args).items() if k in DYNAMO_KEYS})
    given.update({k: v for k, v in vars(args).items() if k in _DEEPSPEED_FLAGS})
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in FSDP_KEYS:
            out.setdefault("fsdp_config", {})[key] = value
        elif key in _DEEPSPEED_FLAGS:
            out.setdefault("deepspeed_config", {})[key] = value
        elif key in DYNAMO_KEYS:
            out.setdefault("dynamo_config", {})[key] = value
        else:
            out[key] = value
    return out


def _apply(base: ConfigFile, changes: dict[str, Any]) -> ConfigFile:
    merged = base.to_dict()
    kind = str(changes.get("distributed_type", "")).strip().upper()
    other = {"FSDP": "deepspeed_config", "DEEPSPEED": "fsdp_config"}.get(kind)
    if other is not None and other not in changes:  # the new kind sets the other's aside
        merged.pop(other, None)
    for key in _NESTED:
        if key in changes:
            merged[key] = {**merged.get(key, {}), **changes.pop(key)}
    merged.update(changes)
    try:
        config = ConfigFile(**merged)
        if "distributed_type" in changes or config.distributed_type in _KEPT_TYPES:
            return config
        world = config.num_processes or 1
        kind = "NO" if world == 1 else ("MULTI_CPU" if config.use_cpu else "MULTI_GPU")
        return config.replace(distributed_type=kind)
    except ValueProblem as problem:
        raise problem.error("the command line") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel config``."""
    config_file_option(
        parser, "file to write", "$NBACCEL_CONFIG_FILE, else ~/.cache/nbaccel/default_config.yaml"
    )
    add_field_flags(parser)
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    default = sub.add_parser("default", help="write sensible defaults for this machine")
    default.add_argument("--config_file", default=None, help="file to write")
    default.add_argument(
        "--mixed_precision", choices=PRECISIONS, default="no", help="precision (default no)"
    )
    default.add_argument("--force", action="store_true", help="overwrite an existing file")
    show = sub.add_parser("show", help="print the config file in force")
    show.add_argument("--config_file", default=None, help="file to show")
    update = sub.add_parser("update", help="rewrite an existing file, changing the given keys")
    update.add_argument("--config_file", default=None, help="file to update")
    add_field_flags(update)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the subcommand."""
    try:
        command = getattr(args, "config_command", None)
        if command == "default":
            return _default(args)
        if command == "show":
            return _show(args)
        if command == "update":
            return _update(args)
        changes = field_values(args)
        if changes:
            return _write(_apply(basic_config(), changes), args.config_file)
        if not sys.stdin.isatty():
            print(
                "nbaccel config: there is no terminal to ask questions in (stdin is not a TTY). "
                "From a notebook use `!nbaccel config default`, or give the settings as flags, "
                "e.g. `!nbaccel config --num_processes 2 --mixed_precision bf16`.",
                file=sys.stderr,
            )
            return 2
        return _write(questionnaire(), args.config_file)
    except ConfigError as exc:  # a bad value: a usage error, like a bad option
        print(f"nbaccel config: {exc}", file=sys.stderr)
        return 2


def _write(config: ConfigFile, config_file: str | None) -> int:
    path = save_config_file(config, write_location(config_file))
    print(f"nbaccel config: configuration saved at {path}")
    return 0


def _default(args: argparse.Namespace) -> int:
    path = write_location(args.config_file)
    if path.exists() and not args.force:
        print(
            f"nbaccel config: a configuration already exists at {path}; left as it is "
            "(--force overwrites it, `nbaccel config update` changes it)."
        )
        return 0
    return _write(basic_config(args.mixed_precision), str(path))


def _show(args: argparse.Namespace) -> int:
    path, origin = config_location(args.config_file)
    if path is None:
        print(f"nbaccel config: no config file in force ({origin}); defaults apply.")
        return 1
    loaded = load_config_file(path, origin, report=None)
    print(f"# config file: {loaded.path} ({loaded.origin})")
    if loaded.ignored:
        print(f"# accepted but not acted on: {', '.join(loaded.ignored)}")
    print(yaml.safe_dump(loaded.config.to_dict(), sort_keys=False).rstrip())
    return 0


def _update(args: argparse.Namespace) -> int:
    path = write_location(args.config_file)
    loaded = load_config_file(path, "update", report=None)
    return _write(_apply(loaded.config, field_values(args)), str(path))


# -- questionnaire ---------------------------------------------------------------------------


def ask(question: str, parse: Callable[[str], Any], default: Any) -> Any:
    """Ask until ``parse`` accepts the answer; Enter takes ``default`` (None: required)."""
    shown = "" if default is None else f" [{_text(default)}]"
    while True:
        try:
            answer = input(f"{question}{shown}: ").strip()
        except EOFError:
            raise ConfigError("the questions were cut short (end of input)") from None
        if not answer:
            if default is not None:
                return default
            print("  An answer is needed here.")
            continue
        try:
            return parse(answer)
        except ValueError as exc:
            print(f"  {answer!r} is not valid: {getattr(exc, 'problem', exc)}. Try again.")


def _text(value: Any) -> str:
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def _choice(allowed: tuple[str, ...]) -> Callable[[str], str]:
    return lambda answer: as_choice(answer, allowed)


def questionnaire() -> ConfigFile:
    """The short list of questions; returns the validated settings."""
    base = basic_config()
    gpus = cuda_device_count()
    values: dict[str, Any] = {}
    kind = ask(
        f"Kind of run ({', '.join(DISTRIBUTED_TYPES)})",
        _choice(DISTRIBUTED_TYPES),
        "MULTI_GPU" if gpus > 1 else "MULTI_CPU",
    )
    values["distributed_type"] = kind
    machines = ask("How many machines", lambda a: as_int(a, 1), 1)
    values["num_machines"] = machines
    if machines > 1:
        values["machine_rank"] = ask(
            "Rank of this machine", lambda a: as_int(a, 0, machines - 1), 0
        )
        values["main_process_ip"] = ask("IP address of machine 0", as_str, None)
        values["main_process_port"] = ask("Port on machine 0", as_port, 29500)
        values["rdzv_backend"] = ask("Rendezvous backend", _choice(RDZV_BACKENDS), "static")
        values["same_network"] = ask("Are all machines on one local network", as_bool, True)
    cpu = kind == "MULTI_CPU" or ask("Run on the CPU only", as_bool, base.use_cpu)
    values["use_cpu"] = cpu
    per_machine_default = 2 if kind == "MULTI_CPU" else (max(gpus, 1) if not cpu else 1)
    values["num_processes"] = ask(
        "How many processes in total (all machines)",
        lambda a: as_int(a, 1),
        per_machine_default * machines,
    )
    if not cpu and gpus:
        values["gpu_ids"] = ask("Which GPUs ('all' or e.g. 0,1)", str, "all")
    values["mixed_precision"] = _ask_precision(cpu)
    if kind == "FSDP":
        values["fsdp_config"] = _fsdp_questions()
    elif kind == "DEEPSPEED":
        values["deepspeed_config"] = _deepspeed_questions()
    values["debug"] = ask("Turn on the launcher's debug checks", as_bool, False)
    try:
        return dataclasses.replace(base, **values)
    except ValueProblem as problem:
        raise problem.error("your answers") from None


def _ask_precision(cpu: bool) -> str:
    """The mixed precision; on the CPU fp16 is not offered (it would train in fp32), as in the
    config panel."""
    if not cpu:
        return str(ask(f"Mixed precision ({', '.join(PRECISIONS)})", _choice(PRECISIONS), "no"))
    offered = tuple(p for p in PRECISIONS if p != "fp16")

    def parse(answer: str) -> str:
        if answer.strip().lower() == "fp16":
            raise ValueError(f"{fp16_unavailable_note('cpu')}; answer bf16 or no")
        return as_choice(answer, offered)

    return str(ask(f"Mixed precision ({', '.join(offered)})", parse, "no"))


def _fsdp_questions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    version = ask("FSDP version (1 or 2)", lambda a: FSDP_KEYS["fsdp_version"][0](a), 2)
    out["fsdp_version"] = version
    if version == 1:
        strategy = FSDP_KEYS["fsdp_sharding_strategy"][0]
        out["fsdp_sharding_strategy"] = ask(
            "Sharding strategy (name or 1-5)", strategy, "FULL_SHARD"
        )
    else:
        out["fsdp_reshard_after_forward"] = ask("Reshard after forward", as_bool, True)
    policy = FSDP_KEYS["fsdp_auto_wrap_policy"][0]
    out["fsdp_auto_wrap_policy"] = ask("Auto wrap policy", policy, "TRANSFORMER_BASED_WRAP")
    if out["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP":
        out["fsdp_transformer_layer_cls_to_wrap"] = ask("Layer class(es) to wrap", as_str, None)
    out["fsdp_offload_params"] = ask("Offload parameters to the CPU", as_bool, False)
    state = FSDP_KEYS["fsdp_state_dict_type"][0]
    out["fsdp_state_dict_type"] = ask("State dict type", state, "SHARDED_STATE_DICT")
    return out


def _deepspeed_questions() -> dict[str, Any]:
    """The DeepSpeed questions: a JSON config file of DeepSpeed's own (it decides the rest), or
    the ZeRO stage, the offloads that stage allows, and the 16-bit save of stage 3."""
    out: dict[str, Any] = {}
    if ask("Use a DeepSpeed JSON config file", as_bool, False):
        out["deepspeed_config_file"] = ask("Path of the DeepSpeed JSON config file", _json, None)
        return out
    stage = ask("ZeRO stage (0, 1, 2 or 3)", DEEPSPEED_KEYS["zero_stage"][0], 2)
    out["zero_stage"] = stage
    devices = ", ".join(OFFLOAD_DEVICES)
    parts = [("optimizer", "optimizer states")] if stage >= 1 else []
    parts += [("param", "parameters")] if stage == 3 else []
    for part, what in parts:
        device = ask(f"Offload {what} to ({devices})", _choice(OFFLOAD_DEVICES), "none")
        out[f"offload_{part}_device"] = device
        if device == "nvme":
            out[f"offload_{part}_nvme_path"] = ask(f"Folder for the {what} (nvme)", as_str, None)
    if stage == 3:
        out["zero3_save_16bit_model"] = ask(
            "Gather the 16-bit weights when saving the model", as_bool, False
        )
    return out


def _json(answer: str) -> str:
    """A DeepSpeed JSON config file that exists and reads (asked again otherwise)."""
    DeepSpeedConfig({"deepspeed_config_file": answer}).check_config_file()
    return answer
