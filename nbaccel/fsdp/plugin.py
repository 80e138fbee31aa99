"""``FullyShardedDataParallelPlugin``: every documented FSDP option, validated on creation."""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy, ShardingStrategy

from ..state import PartialState
from ..validation import is_int
from . import options
from .config_keys import launch_plugin_kwargs, plugin_kwargs
from .policies import (
    DEFAULT_MIN_NUM_PARAMS,
    find_layer_classes,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from .ram import enable_fsdp_ram_efficient_loading

__all__ = ["FullyShardedDataParallelPlugin", "materialize_empty"]


def materialize_empty(module: nn.Module) -> None:
    """The default ``param_init_fn``: ``to_empty`` on this process's device (not recursive)."""

    module.to_empty(device=PartialState().device, recurse=False)


def _bad(name: str, value: Any, version: int, why: str) -> ValueError:
    return ValueError(f"{name}={value!r} has no meaning with fsdp_version={version}: {why}.")


@dataclasses.dataclass
class FullyShardedDataParallelPlugin:
    """Settings for sharded training (FSDP1 ``FullyShardedDataParallel`` or FSDP2
    ``fully_shard``). See ``docs/fsdp.md`` for what each option does.

    ``fsdp_group_size`` (nbaccel's addition, as in hfai's FSDP): with a HYBRID strategy,
    that many processes shard together and the groups replicate each other. It and the TPU
    options (``xla``, ``xla_fsdp_settings``, ``xla_fsdp_grad_ckpt``) are keyword-only, so
    the positional order is Accelerate's.
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: Any = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Callable[..., Any] | str | None = None
    cpu_offload: Any = None
    ignored_modules: Iterable[nn.Module] | str | None = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[[nn.Module], None] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None
    _: dataclasses.KW_ONLY
    fsdp_group_size: int | None = None
    xla: bool = False
    xla_fsdp_settings: dict[str, Any] | None = None
    xla_fsdp_grad_ckpt: bool = False

    def __post_init__(self) -> None:
        self._take_launch_defaults()
        version = 1 if self.fsdp_version is None else self.fsdp_version
        if isinstance(version, bool) or version not in (1, 2):
            raise ValueError(f"fsdp_version={self.fsdp_version!r} is not allowed; use 1 or 2.")
        self.fsdp_version = version
        self._set_sharding()
        self._set_version_only_options()
        self.mixed_precision_policy = options.parse_mixed_precision(
            self.mixed_precision_policy, version
        )
        self.cpu_offload = options.parse_cpu_offload(self.cpu_offload, version)
        self._set_wrap_policy()
        self._set_loading()
        if isinstance(self.ignored_modules, str):
            try:
                re.compile(self.ignored_modules)
            except re.error as exc:
                raise ValueError(f"ignored_modules={self.ignored_modules!r}: {exc}.") from None
        self.set_state_dict_type()
        if self.fsdp_group_size is not None and (
            not is_int(self.fsdp_group_size) or self.fsdp_group_size < 1
        ):
            raise ValueError(f"fsdp_group_size={self.fsdp_group_size!r} must be an int >= 1.")

    # -- construction steps ------------------------------------------------------------------
    def _take_launch_defaults(self) -> None:
        """Options left unset take the launch's FSDP settings (``nbaccel launch`` with an
        ``fsdp_config``, ``accelerate launch``'s ``FSDP_*`` variables), as in Accelerate. The
        sharding pair and the wrap-policy trio are taken together or not at all."""

        launch = launch_plugin_kwargs(self.fsdp_version)
        if not launch:
            return
        groups = [
            ("sharding_strategy", "reshard_after_forward"),
            ("auto_wrap_policy", "transformer_cls_names_to_wrap", "min_num_params"),
            ("xla", "xla_fsdp_settings", "xla_fsdp_grad_ckpt"),
        ]
        grouped = {name for group in groups for name in group}
        for group in groups:
            if all(getattr(self, name) in (None, False) for name in group):
                for name in group:
                    if name in launch:
                        setattr(self, name, launch[name])
        for name, value in launch.items():
            if name not in grouped and getattr(self, name) is None:
                setattr(self, name, value)

    def _set_sharding(self) -> None:
        """``sharding_strategy`` (deprecated) and ``reshard_after_forward`` -> one setting."""
        version, given = self.fsdp_version, self.sharding_strategy
        if given is not None:
            warnings.warn(
                "sharding_strategy is deprecated in favour of reshard_after_forward "
                "(FSDP1: a sharding strategy; FSDP2: True/False).",
                FutureWarning,
                stacklevel=4,
            )
            if self.reshard_after_forward is not None:
                raise ValueError(
                    "Both sharding_strategy and reshard_after_forward were given; pass only "
                    "reshard_after_forward (sharding_strategy is its deprecated name)."
                )
            strategy = options.parse_sharding_strategy(given)
            self.sharding_strategy = strategy
            name = options.strategy_name(strategy)
            self.reshard_after_forward = (
                strategy if version == 1 else options.RESHARD_FOR_STRATEGY[name]
            )
            return
        value = self.reshard_after_forward
        if version == 2:
            if value is None:
                value = True
            if not isinstance(value, bool):
                raise ValueError(
                    f"reshard_after_forward={value!r} is not allowed with fsdp_version=2; it must "
                    "be True or False (FULL_SHARD/HYBRID_SHARD -> True, SHARD_GRAD_OP -> False)."
                )
            self.reshard_after_forward = value
            self.sharding_strategy = (
                ShardingStrategy.FULL_SHARD if value else ShardingStrategy.SHARD_GRAD_OP
            )
            return
        if isinstance(value, bool):
            raise ValueError(
                f"reshard_after_forward={value!r} is not allowed with fsdp_version=1; give a "
                "sharding strategy (e.g. 'FULL_SHARD', 'SHARD_GRAD_OP' or 1-5)."
            )
        strategy = options.parse_sharding_strategy(
            "FULL_SHARD" if value is None else value, "reshard_after_forward"
        )
        self.reshard_after_forward = self.sharding_strategy = strategy

    def _set_version_only_options(self) -> None:
        version = self.fsdp_version or 1
        self.backward_prefetch = options.parse_backward_prefetch(self.backward_prefetch)
        if version == 2:
            checks = [
                (
                    "backward_prefetch",
                    self.backward_prefetch is not None,
                    "FSDP2 prefetches by itself; leave it None",
                ),
                (
                    "use_orig_params",
                    bool(self.use_orig_params),
                    "FSDP2 always trains the original parameters (as DTensors)",
                ),
                ("forward_prefetch", bool(self.forward_prefetch), "FSDP2 has no such switch"),
                (
                    "limit_all_gathers",
                    not self.limit_all_gathers,
                    "FSDP2 always limits in-flight all-gathers",
                ),
            ]
            for name, wrong, why in checks:
                if wrong:
                    raise _bad(name, getattr(self, name), version, why)
        self.use_orig_params = bool(self.use_orig_params)
        self.forward_prefetch = bool(self.forward_prefetch)
        self.activation_checkpointing = bool(self.activation_checkpointing)
        self.activation_checkpointing_offload = bool(self.activation_checkpointing_offload)
        if self.activation_checkpointing_offload and not self.activation_checkpointing:
            raise ValueError(
                "activation_checkpointing_offload=True keeps the inputs that activation "
                "checkpointing saves on the CPU, so it needs activation_checkpointing=True."
            )
        if self.activation_checkpointing_offload and version != 2:
            raise _bad(
                "activation_checkpointing_offload",
                True,
                version,
                "it is applied with FSDP2's fully_shard; set fsdp_version=2",
            )

    def _set_wrap_policy(self) -> None:
        policy = self.auto_wrap_policy
        names = self.transformer_cls_names_to_wrap
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        self.transformer_cls_names_to_wrap = list(names) if names is not None else None
        if isinstance(policy, str):
            policy = policy.strip().lower()
            if policy not in options.WRAP_POLICY_NAMES:
                raise ValueError(
                    f"auto_wrap_policy={self.auto_wrap_policy!r} is not allowed; use a callable "
                    f"or one of {list(options.WRAP_POLICY_NAMES)}."
                )
            policy = {
                "transformer_based_wrap": transformer_auto_wrap_policy,
                "size_based_wrap": size_based_auto_wrap_policy,
                "no_wrap": None,
            }[policy]
        elif policy is not None and not callable(policy):
            raise ValueError(f"auto_wrap_policy={policy!r} is neither a callable nor a name.")
        self.auto_wrap_policy = policy
        if names is not None and policy is not transformer_auto_wrap_policy:
            raise ValueError(
                "transformer_cls_names_to_wrap is only used by auto_wrap_policy="
                "'transformer_based_wrap'; set that policy or drop the class names."
            )
        if self.min_num_params is not None:
            if policy is not size_based_auto_wrap_policy:
                raise ValueError(
                    "min_num_params is only used by auto_wrap_policy='size_based_wrap'; set "
                    "that policy or drop min_num_params."
                )
            if isinstance(self.min_num_params, bool) or int(self.min_num_params) < 0:
                raise ValueError(f"min_num_params={self.min_num_params!r} must be an int >= 0.")
            self.min_num_params = int(self.min_num_params)

    def _set_loading(self) -> None:
        if self.cpu_ram_efficient_loading:
            if self.sync_module_states is False:
                warnings.warn(
                    "sync_module_states=False cannot be kept with cpu_ram_efficient_loading="
                    "True (the other processes start empty); setting sync_module_states=True.",
                    UserWarning,
                    stacklevel=4,
                )
            self.sync_module_states = True

            enable_fsdp_ram_efficient_loading()
        self.cpu_ram_efficient_loading = bool(self.cpu_ram_efficient_loading)
        self.sync_module_states = bool(self.sync_module_states)
        if self.param_init_fn is not None and not callable(self.param_init_fn):
            raise ValueError(f"param_init_fn={self.param_init_fn!r} must be a callable.")
        if self.param_init_fn is None and self.sync_module_states:
            self.param_init_fn = materialize_empty

    # -- documented methods ------------------------------------------------------------------
    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Set the state-dict type (and the configs it implies when they do not fit it)."""
        if state_dict_type is not None:
            self.state_dict_type = state_dict_type
        kind = options.parse_state_dict_type(self.state_dict_type or "FULL_STATE_DICT")
        if self.fsdp_version == 2 and kind.name == "LOCAL_STATE_DICT":
            raise _bad(
                "state_dict_type", kind.name, 2, "FSDP2 saves FULL_STATE_DICT or SHARDED_STATE_DICT"
            )
        self.state_dict_type = kind
        model_config, optim_config = options.state_dict_configs(kind)
        if type(self.state_dict_config).__name__ != type(model_config).__name__:
            self.state_dict_config = model_config
        if type(self.optim_state_dict_config).__name__ != type(optim_config).__name__:
            self.optim_state_dict_config = optim_config

    def set_auto_wrap_policy(self, model: nn.Module) -> None:
        """Turn the named policy into a callable for ``model`` (layer classes by name, or the
        model's ``_no_split_modules`` when no names were given)."""
        policy = self.auto_wrap_policy
        if isinstance(policy, functools.partial) or not callable(policy):
            return  # already resolved, or no wrapping
        if policy is transformer_auto_wrap_policy:
            names = self.transformer_cls_names_to_wrap
            if names is None:
                names = list(getattr(model, "_no_split_modules", None) or [])
            if not names:
                raise ValueError(
                    "auto_wrap_policy='transformer_based_wrap' needs the layer classes to wrap: "
                    "set transformer_cls_names_to_wrap (e.g. ['BertLayer'])."
                )
            self.transformer_cls_names_to_wrap = list(names)
            classes = find_layer_classes(model, names)
            self.auto_wrap_policy = functools.partial(policy, transformer_layer_cls=classes)
        elif policy is size_based_auto_wrap_policy:
            minimum = DEFAULT_MIN_NUM_PARAMS if self.min_num_params is None else self.min_num_params
            self.min_num_params = minimum
            self.auto_wrap_policy = functools.partial(policy, min_num_params=minimum)

    def set_mixed_precision(
        self,
        mixed_precision: str | torch.dtype,
        buffer_autocast: bool = False,
        override: bool = False,
    ) -> None:
        """Set the policy from ``fp16`` / ``bf16`` / ``fp32`` (or a dtype), unless a policy is
        already set and ``override`` is False."""
        dtype = options.parse_dtype(mixed_precision, "mixed_precision")
        if dtype is None:
            raise ValueError("set_mixed_precision needs 'fp16', 'bf16', 'fp32' or a dtype.")
        if self.mixed_precision_policy is not None and not override:
            return
        if self.fsdp_version == 1:
            buffer = torch.float32 if buffer_autocast else dtype
            self.mixed_precision_policy = MixedPrecision(
                param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=buffer
            )
        else:
            self.mixed_precision_policy = MixedPrecisionPolicy(
                param_dtype=dtype, reduce_dtype=dtype, output_dtype=dtype
            )

    def validate_mixed_precision_policy(self) -> None:
        """Check that the policy is the torch type that this FSDP version uses."""
        self.mixed_precision_policy = options.parse_mixed_precision(
            self.mixed_precision_policy, self.fsdp_version or 1
        )

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], convert_to_fsdp2: bool = False
    ) -> FullyShardedDataParallelPlugin:
        """Build the plugin from an ``fsdp_config`` mapping (the config file's keys)."""

        return cls(**plugin_kwargs(config, convert_to_fsdp2))
