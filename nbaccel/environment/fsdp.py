"""The FSDP settings a launcher hands its processes: nbaccel's one variable, or Accelerate's.

nbaccel's launchers (``nbaccel launch``, ``notebook_launcher`` with a config file in force)
write the config file's ``fsdp_config`` as JSON in ``NBACCEL_FSDP_CONFIG``, through
:func:`fsdp_launch_variables`. Processes started by ``accelerate launch`` (or by ``torchrun``
with the same variables) carry ``ACCELERATE_USE_FSDP=true`` and one ``FSDP_*`` variable per
setting; :func:`read_fsdp_launch` reads either into the same ``fsdp_config`` mapping.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._vars import _bool_var, _environ

__all__ = ["fsdp_launch_variables", "read_fsdp_launch"]

_NBACCEL = "NBACCEL_FSDP_CONFIG"
_USE_FSDP = "ACCELERATE_USE_FSDP"
_RAM = "FSDP_CPU_RAM_EFFICIENT_LOADING"

# Accelerate's variable -> the config file's key (both launchers mean the same setting).
_ACCELERATE_VARIABLES = {
    "FSDP_VERSION": "fsdp_version",
    "FSDP_SHARDING_STRATEGY": "fsdp_sharding_strategy",
    "FSDP_RESHARD_AFTER_FORWARD": "fsdp_reshard_after_forward",
    "FSDP_OFFLOAD_PARAMS": "fsdp_offload_params",
    "FSDP_AUTO_WRAP_POLICY": "fsdp_auto_wrap_policy",
    "FSDP_TRANSFORMER_CLS_TO_WRAP": "fsdp_transformer_layer_cls_to_wrap",
    "FSDP_MIN_NUM_PARAMS": "fsdp_min_num_params",
    "FSDP_BACKWARD_PREFETCH": "fsdp_backward_prefetch",
    "FSDP_STATE_DICT_TYPE": "fsdp_state_dict_type",
    "FSDP_FORWARD_PREFETCH": "fsdp_forward_prefetch",
    "FSDP_USE_ORIG_PARAMS": "fsdp_use_orig_params",
    "FSDP_SYNC_MODULE_STATES": "fsdp_sync_module_states",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "fsdp_cpu_ram_efficient_loading",
    "FSDP_ACTIVATION_CHECKPOINTING": "fsdp_activation_checkpointing",
    "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "fsdp_activation_checkpointing_offload",
}
_V1_ONLY = (
    "fsdp_sharding_strategy",
    "fsdp_backward_prefetch",
    "fsdp_forward_prefetch",
    "fsdp_use_orig_params",
    "fsdp_sync_module_states",
)


def fsdp_launch_variables(fsdp_config: Mapping[str, Any]) -> dict[str, str]:
    """The variables a launcher sets so that ``Accelerator()`` in its processes shards with
    ``fsdp_config`` (the config file's validated mapping). ``ACCELERATE_USE_FSDP`` and
    ``FSDP_CPU_RAM_EFFICIENT_LOADING`` are set too: Transformers reads them to load weights on
    one process only."""
    variables = {_NBACCEL: json.dumps(dict(fsdp_config), sort_keys=True), _USE_FSDP: "true"}
    if "fsdp_cpu_ram_efficient_loading" in fsdp_config:
        ram = bool(fsdp_config["fsdp_cpu_ram_efficient_loading"])
        variables[_RAM] = "true" if ram else "false"
    return variables


def _from_accelerate(env: Mapping[str, str]) -> dict[str, Any]:
    """Accelerate's ``FSDP_*`` variables as ``fsdp_config`` keys, read the way its plugin reads
    them: its launcher writes every variable, so the ones a version or a policy ignores are
    dropped here rather than refused."""
    config: dict[str, Any] = {}
    for name, key in _ACCELERATE_VARIABLES.items():
        raw = env.get(name)
        if raw is not None and raw.strip() not in ("", "None"):
            config[key] = raw.strip()
    version = config.get("fsdp_version", "1")
    if version == "2":
        for key in _V1_ONLY:
            config.pop(key, None)
    elif "fsdp_sharding_strategy" in config:
        config.pop("fsdp_reshard_after_forward", None)  # Accelerate: the strategy wins
    policy = config.get("fsdp_auto_wrap_policy", "NO_WRAP").upper()
    if policy != "SIZE_BASED_WRAP":
        config.pop("fsdp_min_num_params", None)
    if policy != "TRANSFORMER_BASED_WRAP":
        config.pop("fsdp_transformer_layer_cls_to_wrap", None)
    return config


def read_fsdp_launch(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The ``fsdp_config`` mapping the launcher asked for, or None when it did not ask for FSDP.

    ``NBACCEL_FSDP_CONFIG`` (nbaccel's launchers) comes first; else, with
    ``ACCELERATE_USE_FSDP=true``, Accelerate's ``FSDP_*`` variables. The mapping is raw: the
    config layer validates it (``FsdpConfig``).

    Raises:
        ValueError: ``NBACCEL_FSDP_CONFIG`` is not a JSON object, or a yes/no variable is
            neither.
    """
    env = _environ(environ)
    raw = env.get(_NBACCEL, "").strip()
    if raw:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            value, problem = None, f"not valid JSON ({exc})"
        else:
            problem = "not a JSON object"
        if not isinstance(value, dict):
            raise ValueError(
                f"Environment variable {_NBACCEL}={raw[:80]!r} is {problem}; it is written by "
                "nbaccel's launchers: unset it, or launch again."
            )
        return value
    if _bool_var(env, _USE_FSDP):
        return _from_accelerate(env)
    return None
