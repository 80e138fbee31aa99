"""The ``deepspeed_config`` section of a config file: its keys, their checks, and what a
launcher hands its processes.

The keys are those Accelerate's ``accelerate config`` writes. nbaccel validates them when the
file is read, checks the DeepSpeed JSON file they may name when a launch starts
(:meth:`DeepSpeedConfig.check_config_file`), and turns them into ``DeepSpeedPlugin``'s fields
(:meth:`DeepSpeedConfig.launch_settings`), which a launcher writes into its processes'
environment; ``Accelerator()`` there builds the plugin from them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .values import ValueProblem, as_bool, as_choice, as_int, as_mapping, as_str

__all__ = [
    "DEEPSPEED_IGNORED_KEYS",
    "DEEPSPEED_KEYS",
    "OFFLOAD_DEVICES",
    "OFFLOAD_LOWEST_STAGE",
    "ZERO_STAGES",
    "DeepSpeedConfig",
    "as_deepspeed_config",
    "check_one_sharding",
    "ignored_keys",
    "offload_problem",
]

ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
# what is offloaded -> the lowest ZeRO stage that can offload it
OFFLOAD_LOWEST_STAGE = {"optimizer": 1, "param": 3}
_DEFAULT_STAGE = 2  # DeepSpeedPlugin's, as Accelerate's


def offload_problem(part: str, device: str, stage: int, nvme_path: Any) -> tuple[str, str] | None:
    """What is wrong with offloading ``part`` (``"optimizer"`` or ``"param"``) to ``device`` at
    ZeRO ``stage`` with ``nvme_path``: the setting at fault (``offload_{part}_device`` or
    ``offload_{part}_nvme_path``) and why, or None. The one rule the plugin, the config file,
    the command line and the config panel apply."""
    lowest = OFFLOAD_LOWEST_STAGE[part]
    if device != "none" and stage < lowest:
        needs = "ZeRO stage 3" if lowest == 3 else "a ZeRO stage of 1 or more"
        return f"offload_{part}_device", (
            f"offload_{part}_device={device!r} needs {needs}, but the ZeRO stage is {stage}; "
            "raise the stage or set the device to none"
        )
    if device == "nvme" and (nvme_path is None or str(nvme_path).strip() in ("", "none")):
        return f"offload_{part}_nvme_path", (
            f"offload_{part}_device='nvme' needs offload_{part}_nvme_path, a folder on a fast "
            "local disk"
        )
    return None


def _stage(value: Any) -> int:
    stage = as_int(value)
    if stage not in ZERO_STAGES:
        raise ValueProblem(
            f"has the value {stage}; ZeRO stages are 0 (plain data parallelism), 1 (optimizer "
            "states sharded), 2 (and gradients) and 3 (and parameters)"
        )
    return stage


def _device(value: Any) -> str:
    return "none" if value is None else as_choice(value, OFFLOAD_DEVICES)


def _path_or_none(value: Any) -> str:
    return "none" if value is None else as_str(value).strip() or "none"


def _auto_or(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse_or_auto(value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        return parse(value)

    return parse_or_auto


def _clipping(value: Any) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or not number > 0:
        raise ValueProblem(f"has the value {value!r}; use a number above 0 (or auto)")
    return number


def _class_names(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    text = as_str(value).strip()
    if not text:
        raise ValueProblem("is empty; give class names, e.g. 'MixtralSparseMoeBlock'")
    return text


def _json_file(value: Any) -> str:
    text = as_str(value).strip()
    if not text:
        raise ValueProblem("is empty; give the path of a DeepSpeed JSON file, or leave it out")
    return text


# key -> (parser, meaning); the keys Accelerate's files have, the launch flags' names
DEEPSPEED_KEYS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "deepspeed_config_file": (_json_file, "a DeepSpeed JSON config file (it decides the rest)"),
    "zero_stage": (_stage, "ZeRO stage: 0, 1, 2 (default) or 3"),
    "offload_optimizer_device": (_device, "optimizer states offloaded to: none, cpu or nvme"),
    "offload_param_device": (_device, "stage 3: parameters offloaded to: none, cpu or nvme"),
    "offload_optimizer_nvme_path": (_path_or_none, "folder for offload_optimizer_device nvme"),
    "offload_param_nvme_path": (_path_or_none, "folder for offload_param_device nvme"),
    "zero3_init_flag": (as_bool, "stage 3: build models sharded (deepspeed.zero.Init)"),
    "zero3_save_16bit_model": (as_bool, "stage 3: gather 16-bit weights when saving"),
    "gradient_accumulation_steps": (
        _auto_or(lambda v: as_int(v, minimum=1)),
        "DeepSpeed's batches per optimizer step (auto: the Accelerator's)",
    ),
    "gradient_clipping": (_auto_or(_clipping), "largest total gradient norm (default 1.0)"),
    "deepspeed_moe_layer_cls_names": (_class_names, "stage 3: MoE block classes kept whole"),
}
# Keys of Accelerate's DeepSpeed section for its multi-machine launcher (pdsh, a hostfile):
# accepted and not acted on (nbaccel launch starts every machine with the same command).
DEEPSPEED_IGNORED_KEYS = (
    "deepspeed_multinode_launcher",
    "deepspeed_hostfile",
    "deepspeed_exclusion_filter",
    "deepspeed_inclusion_filter",
)
# the key -> DeepSpeedPlugin's field of that meaning (the others have the key's name)
_PLUGIN_FIELDS = {
    "deepspeed_config_file": "hf_ds_config",
    "deepspeed_moe_layer_cls_names": "transformer_moe_cls_names",
}
# the key -> where a DeepSpeed JSON file says the same
_JSON_KEYS = {
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
}


@dataclasses.dataclass(frozen=True)
class DeepSpeedConfig:
    """The validated ``deepspeed_config`` mapping (keys as in Accelerate's config file).

    Raises:
        ValueProblem: (with ``key`` set) a key is unknown, a value bad, or two settings
            contradict each other (an offload the ZeRO stage cannot do, nvme without a folder).
    """

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    ignored: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {}
        ignored: list[str] = list(self.ignored)
        for given, raw in dict(self.values).items():
            key = str(given)
            if key in DEEPSPEED_IGNORED_KEYS:
                if raw not in (None, "", "none"):
                    ignored.append(key)
                continue
            if key not in DEEPSPEED_KEYS:
                known = (*DEEPSPEED_KEYS, *DEEPSPEED_IGNORED_KEYS)
                raise ValueProblem("is not a deepspeed_config key", key=key, known=known)
            if key == "deepspeed_config_file" and raw in (None, "", "none"):
                continue  # Accelerate's way of saying "no file"
            try:
                checked[key] = DEEPSPEED_KEYS[key][0](raw)
            except ValueProblem as problem:
                raise problem.at(key) from None
        if "deepspeed_config_file" not in checked:
            _check_offloads(checked)
        object.__setattr__(self, "values", checked)
        object.__setattr__(self, "ignored", tuple(ignored))

    @property
    def stage(self) -> int:
        """The ZeRO stage the section asks for (2 when it says none)."""
        return int(self.values.get("zero_stage", _DEFAULT_STAGE))

    def to_dict(self) -> dict[str, Any]:
        """The mapping as written to a file."""
        return dict(self.values)

    def launch_settings(self) -> dict[str, Any]:
        """``DeepSpeedPlugin``'s fields, for the launch variables; the JSON file's path made
        absolute (the processes may start in another directory)."""
        out: dict[str, Any] = {}
        for key, value in self.values.items():
            if key == "deepspeed_config_file":
                value = str(Path(value).expanduser().resolve())
            out[_PLUGIN_FIELDS.get(key, key)] = value
        return out

    def check_config_file(self) -> None:
        """Check the DeepSpeed JSON file the section names, if any (when a launch starts):
        it exists, holds a JSON object with a ``zero_optimization`` section, and says nothing
        that contradicts the section's own keys.

        Raises:
            ValueProblem: with the key ``deepspeed_config_file``, or the contradicting key.
        """
        name = self.values.get("deepspeed_config_file")
        if name is None:
            return
        config = _read_json(name)
        for key, dotted in _JSON_KEYS.items():
            mine, theirs = self.values.get(key), _lookup(config, dotted)
            if mine is None or theirs is None or "auto" in (mine, theirs):
                continue
            if key.endswith("_device"):
                theirs = str(theirs).lower()
            if mine != theirs:
                raise ValueProblem(
                    f"is {mine!r}, but {name} says {dotted}: {theirs!r}; DeepSpeed takes the "
                    "JSON file's value, so remove the key or make the two agree",
                    key=key,
                )

    def describe(self) -> str:
        """What the processes run, in one line (for the launch banners)."""
        values = self.values
        name = values.get("deepspeed_config_file")
        if name is not None:
            try:
                stage = _lookup(_read_json(name), "zero_optimization.stage")
            except ValueProblem:
                stage = None
            said = f"ZeRO stage {stage}" if stage is not None else "ZeRO"
            return f"{said}, config {name}"
        parts = [f"ZeRO stage {self.stage}"]
        for key, label in (
            ("offload_optimizer_device", "optimizer"),
            ("offload_param_device", "params"),
        ):
            device = values.get(key, "none")
            if device != "none":
                parts.append(f"{label} offloaded to {device}")
        if values.get("zero3_init_flag") and self.stage == 3:
            parts.append("zero.Init")
        if values.get("zero3_save_16bit_model") and self.stage == 3:
            parts.append("16-bit save")
        return ", ".join(parts)


def as_deepspeed_config(value: Any) -> DeepSpeedConfig:
    """The parser of the config file's ``deepspeed_config`` key (``null``: an empty one)."""
    if isinstance(value, DeepSpeedConfig):
        return value
    if value is None:
        return DeepSpeedConfig()
    return DeepSpeedConfig(as_mapping(value))


def check_one_sharding(
    distributed_type: str, fsdp_settings: Mapping[str, Any], deepspeed: DeepSpeedConfig
) -> None:
    """A run shards with FSDP or with DeepSpeed, never both: where ``distributed_type`` names
    one of them, settings of the other are an error."""
    if distributed_type == "DEEPSPEED" and fsdp_settings:
        raise ValueProblem(
            "has FSDP settings, but distributed_type is DEEPSPEED and a run uses one of them; "
            "remove fsdp_config (or set distributed_type: FSDP)",
            key="fsdp_config",
        )
    if distributed_type == "FSDP" and deepspeed.values:
        raise ValueProblem(
            "has DeepSpeed settings, but distributed_type is FSDP and a run uses one of them; "
            "remove deepspeed_config (or set distributed_type: DEEPSPEED)",
            key="deepspeed_config",
        )


def ignored_keys(
    ignored: list[str], distributed_type: str, deepspeed: DeepSpeedConfig
) -> list[str]:
    """The file's keys accepted but not acted on, ``deepspeed_config`` among them where the
    file has one: the section is not acted on unless ``distributed_type`` is DEEPSPEED (an
    empty one is quiet); where it is, only its keys for Accelerate's multi-machine launcher."""
    if "deepspeed_config" not in ignored:
        return ignored
    if distributed_type != "DEEPSPEED":
        quiet = not deepspeed.values and not deepspeed.ignored
        return [k for k in ignored if k != "deepspeed_config" or not quiet]
    at = ignored.index("deepspeed_config")
    nested = [f"deepspeed_config.{key}" for key in deepspeed.ignored]
    return [*ignored[:at], *nested, *ignored[at + 1 :]]


def _check_offloads(values: Mapping[str, Any]) -> None:
    """The rules DeepSpeedPlugin applies, checked where the file is read."""
    stage = int(values.get("zero_stage", _DEFAULT_STAGE))
    for part in OFFLOAD_LOWEST_STAGE:
        device = values.get(f"offload_{part}_device", "none")
        path = values.get(f"offload_{part}_nvme_path", "none")
        problem = offload_problem(part, device, stage, path)
        if problem is not None:
            key, why = problem
            raise ValueProblem(f"is wrong: {why}", key=key)


def _read_json(name: str) -> dict[str, Any]:
    path = Path(name).expanduser()
    if not path.is_file():
        raise ValueProblem(
            f"names {name}, which is not a file (from {Path.cwd()}); give the path of a "
            "DeepSpeed JSON config, or leave the key out",
            key="deepspeed_config_file",
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueProblem(
            f"names {name}, which cannot be read as JSON ({exc}); fix the file",
            key="deepspeed_config_file",
        ) from None
    if not isinstance(config, dict) or not isinstance(config.get("zero_optimization"), dict):
        raise ValueProblem(
            f"names {name}, which has no 'zero_optimization' section; add one, e.g. "
            '"zero_optimization": {"stage": 2}',
            key="deepspeed_config_file",
        )
    return config


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node
