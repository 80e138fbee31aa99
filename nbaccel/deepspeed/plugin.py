"""``DeepSpeedPlugin``: Accelerate's DeepSpeed settings, validated when built.

Fields not given come from the launch (``ACCELERATE_DEEPSPEED_*``, written by ``nbaccel
launch --use_deepspeed`` and ``accelerate launch``), else Accelerate's defaults. Without
``hf_ds_config`` the plugin writes a config of its own whose batch sizes are ``"auto"``;
``prepare()`` fills every ``"auto"`` from what it sees (:mod:`nbaccel.deepspeed.autofill`).
Nothing here imports ``deepspeed``: the engine is built in :mod:`nbaccel.deepspeed.engine`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config.deepspeed import OFFLOAD_LOWEST_STAGE, offload_problem
from ..environment import read_deepspeed_launch
from ..plugins import fill_unset
from .checks import as_bool, as_int, check_offload_device, check_stage
from .hfconfig import HfDeepSpeedConfig

__all__ = ["DeepSpeedPlugin"]

# the plugin's field -> its key in the DeepSpeed config
CONFIG_KEYS = {
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "offload_param_nvme_path": "zero_optimization.offload_param.nvme_path",
    "offload_optimizer_nvme_path": "zero_optimization.offload_optimizer.nvme_path",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}
_DEFAULTS: dict[str, Any] = {
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_stage": 2,
    "offload_optimizer_device": "none",
    "offload_param_device": "none",
    "offload_optimizer_nvme_path": "none",
    "offload_param_nvme_path": "none",
    "zero3_save_16bit_model": False,
}


@dataclass
class DeepSpeedPlugin:
    """DeepSpeed's ZeRO settings for ``Accelerator(deepspeed_plugin=...)``.

    Args:
        hf_ds_config: a DeepSpeed config (dict, JSON file path or :class:`HfDeepSpeedConfig`);
            its ``"auto"`` values are filled by ``prepare()``. Without it the plugin writes one.
        gradient_accumulation_steps: batches per optimizer step (``"auto"``: the
            Accelerator's).
        gradient_clipping: the gradients' largest total norm (``"auto"``: 1.0, as in
            Accelerate).
        zero_stage: 0, 1, 2 (default) or 3.
        is_train_batch_min: with several loaders, the smallest batch size is the micro batch.
        offload_optimizer_device: ``"none"``, ``"cpu"`` or ``"nvme"`` (stages 1-3).
        offload_param_device: ``"none"``, ``"cpu"`` or ``"nvme"`` (stage 3).
        offload_optimizer_nvme_path / offload_param_nvme_path: the folders for ``"nvme"``.
        zero3_init_flag: build models under ``deepspeed.zero.Init`` (stage 3).
        zero3_save_16bit_model: gather 16-bit weights when saving a stage-3 model.
        transformer_moe_cls_names: comma-separated MoE block class names kept whole (stage 3).
        enable_msamp / msamp_opt_level: MS-AMP fp8 (refused: nbaccel runs torchao's fp8).
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: Any = None
    gradient_clipping: Any = None
    zero_stage: Any = None
    is_train_batch_min: bool = True
    offload_optimizer_device: Any = None
    offload_param_device: Any = None
    offload_optimizer_nvme_path: Any = None
    offload_param_nvme_path: Any = None
    zero3_init_flag: Any = None
    zero3_save_16bit_model: Any = None
    transformer_moe_cls_names: Any = None
    enable_msamp: Any = None
    msamp_opt_level: Any = None
    deepspeed_config: dict[str, Any] = field(init=False, repr=False, default_factory=dict)
    # Transformers' view of the config (it keeps only a weak reference to it)
    dschf: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.enable_msamp:
            raise NotImplementedError(
                "DeepSpeedPlugin(enable_msamp=True): nbaccel does not run MS-AMP; train in fp8 "
                'with Accelerator(mixed_precision="fp8") (torchao) or in bf16 with DeepSpeed.'
            )
        self.enable_msamp = False
        launch = read_deepspeed_launch()
        fill_unset(self, _DEFAULTS, launch)
        if self.hf_ds_config is None:
            self.hf_ds_config = launch.get("hf_ds_config")
        if self.zero3_init_flag is None and "zero3_init_flag" in launch:
            self.zero3_init_flag = launch["zero3_init_flag"]
        if self.transformer_moe_cls_names is None:
            self.transformer_moe_cls_names = launch.get("transformer_moe_cls_names")
        self._check_fields()
        if self.hf_ds_config is not None:
            self._from_config()
        else:
            self._write_config()
        self.deepspeed_config = self.hf_ds_config.config
        self.deepspeed_config["steps_per_print"] = math.inf  # DeepSpeed prints nothing itself
        self._check_config()
        zero3 = self.hf_ds_config.is_zero3()
        if self.zero3_init_flag is None:
            self.zero3_init_flag = zero3
        self.zero3_init_flag = as_bool("zero3_init_flag", self.zero3_init_flag)
        if self.zero3_init_flag and not zero3:
            warnings.warn(
                "DeepSpeedPlugin(zero3_init_flag=True) applies to ZeRO stage 3 only; it is set "
                "to False.",
                UserWarning,
                stacklevel=3,
            )
            self.zero3_init_flag = False
        self.selected = False

    # -- validation --------------------------------------------------------------------------
    def _check_fields(self) -> None:
        self.zero_stage = check_stage(self.zero_stage)
        for name in ("offload_optimizer_device", "offload_param_device"):
            setattr(self, name, check_offload_device(name, getattr(self, name)))
        self.zero3_save_16bit_model = as_bool("zero3_save_16bit_model", self.zero3_save_16bit_model)
        steps = self.gradient_accumulation_steps
        if steps != "auto":
            self.gradient_accumulation_steps = as_int("gradient_accumulation_steps", steps)
            if self.gradient_accumulation_steps < 1:
                raise ValueError(
                    f"DeepSpeedPlugin(gradient_accumulation_steps={steps!r}) must be at least 1."
                )
        clip = self.gradient_clipping
        if clip != "auto":
            try:
                self.gradient_clipping = float(clip)
            except (TypeError, ValueError):
                raise ValueError(
                    f"DeepSpeedPlugin(gradient_clipping={clip!r}) must be a number or 'auto'."
                ) from None
            if not self.gradient_clipping > 0:
                raise ValueError(
                    f"DeepSpeedPlugin(gradient_clipping={clip!r}) must be above 0; leave it "
                    "out for the default of 1.0."
                )

    def _check_config(self) -> None:
        """The rules of the config as a whole, after the plugin's fields went into it."""
        stage = check_stage(self.get_value("zero_optimization.stage", 0), "zero_optimization.stage")
        for part in OFFLOAD_LOWEST_STAGE:
            device = check_offload_device(
                f"zero_optimization.offload_{part}.device",
                self.get_value(f"zero_optimization.offload_{part}.device", "none"),
            )
            path = self.get_value(f"zero_optimization.offload_{part}.nvme_path")
            problem = offload_problem(part, device, stage, path)
            if problem is not None and part == "param" and problem[0].endswith("_device"):
                # DeepSpeed ignores it below stage 3, and Accelerate's code passes it there:
                # said once, and set to what runs
                warnings.warn(
                    f"DeepSpeedPlugin: {problem[1].partition(';')[0]}: it is set to none.",
                    UserWarning,
                    stacklevel=4,
                )
                self.deepspeed_config["zero_optimization"]["offload_param"] = {"device": "none"}
                self.offload_param_device = "none"
            elif problem is not None:
                raise ValueError(f"DeepSpeed: {problem[1]}.")

    # -- building the config -----------------------------------------------------------------
    def _write_config(self) -> None:
        def offload(device: str, path: Any) -> dict[str, Any]:
            return {"device": device, "nvme_path": path if device == "nvme" else None}

        config: dict[str, Any] = {
            "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "zero_optimization": {
                "stage": self.zero_stage,
                "offload_optimizer": offload(
                    self.offload_optimizer_device, self.offload_optimizer_nvme_path
                ),
                "offload_param": offload(self.offload_param_device, self.offload_param_nvme_path),
                "stage3_gather_16bit_weights_on_model_save": self.zero3_save_16bit_model,
            },
            "gradient_clipping": self.gradient_clipping,
        }
        self.hf_ds_config = HfDeepSpeedConfig(config)

    def _from_config(self) -> None:
        if not isinstance(self.hf_ds_config, HfDeepSpeedConfig):
            self.hf_ds_config = HfDeepSpeedConfig(self.hf_ds_config)
        config = self.hf_ds_config.config
        config.setdefault("gradient_accumulation_steps", 1)
        if "zero_optimization" not in config:
            raise ValueError(
                "DeepSpeedPlugin(hf_ds_config=...): the config has no 'zero_optimization' "
                'section; add one, e.g. "zero_optimization": {"stage": 2}.'
            )
        given = {key: getattr(self, name) for name, key in CONFIG_KEYS.items()}
        for key in given:
            self.fill_match(key, must_match=False, **given)
        self.hf_ds_config.set_stage_and_offload()
        for name, key in CONFIG_KEYS.items():  # the config's values win over the defaults
            value = self.hf_ds_config.get_value(key)
            if value is not None and value != "auto":
                setattr(self, name, value)

    # -- Accelerate's helpers ------------------------------------------------------------------
    def fill_match(
        self,
        ds_key_long: str,
        mismatches: list[str] | None = None,
        must_match: bool = True,
        **kwargs: Any,
    ) -> None:
        """Fill an ``"auto"`` value at a dotted key from ``kwargs``; with ``must_match``, note
        a set value that differs from ``kwargs``' in ``mismatches``."""
        config, ds_key = self.hf_ds_config.find_config_node(ds_key_long)
        if config is None:
            return
        if config.get(ds_key) == "auto":
            if ds_key_long not in kwargs:
                raise ValueError(
                    f"DeepSpeed config: {ds_key_long} is 'auto' and nothing fills it here; set "
                    "it to a value in the config."
                )
            config[ds_key] = kwargs[ds_key_long]
            return
        value = config.get(ds_key)
        differs = value is not None and ds_key_long in kwargs and value != kwargs[ds_key_long]
        if must_match and differs and mismatches is not None:
            mismatches.append(
                f"- ds {ds_key_long}={value} vs arg {ds_key_long}={kwargs[ds_key_long]}"
            )

    def is_auto(self, ds_key_long: str) -> bool:
        """True when the config says ``"auto"`` at a dotted key."""
        return self.hf_ds_config.get_value(ds_key_long) == "auto"

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The config's value at a dotted key."""
        return self.hf_ds_config.get_value(ds_key_long, default)

    def deepspeed_config_process(
        self,
        prefix: str = "",
        mismatches: list[str] | None = None,
        config: dict[str, Any] | None = None,
        must_match: bool = True,
        **kwargs: Any,
    ) -> None:
        """Fill every ``"auto"`` from ``kwargs`` (dotted keys); with ``must_match``, raise
        ``ValueError`` listing the set values that differ from ``kwargs``."""
        mismatches = [] if mismatches is None else mismatches
        for key, value in (self.deepspeed_config if config is None else config).items():
            if isinstance(value, dict):
                self.deepspeed_config_process(
                    f"{prefix}{key}.", mismatches, value, must_match, **kwargs
                )
            else:
                self.fill_match(f"{prefix}{key}", mismatches, must_match, **kwargs)
        if mismatches and prefix == "":
            listed = "\n".join(mismatches)
            raise ValueError(
                "These DeepSpeed config values contradict what prepare() found:\n"
                f"{listed}\nSet them to 'auto' (or to the values found)."
            )

    def set_mixed_precision(self, mixed_precision: str) -> None:
        """Turn DeepSpeed's ``fp16`` / ``bf16`` sections on or off for ``mixed_precision``
        (``"no"``, ``"fp16"``, ``"bf16"``); a config that enables the other one is refused."""
        config = self.deepspeed_config
        if mixed_precision == "fp8":
            raise NotImplementedError(
                'Accelerator(mixed_precision="fp8") with DeepSpeed: nbaccel trains DeepSpeed in '
                'bf16 or fp16; use mixed_precision="bf16".'
            )
        if mixed_precision in ("fp16", "bf16"):
            other = "bf16" if mixed_precision == "fp16" else "fp16"
            if str(config.get(other, {}).get("enabled", False)).lower() == "true":
                raise ValueError(
                    f'mixed_precision="{mixed_precision}" contradicts the DeepSpeed config, '
                    f"which enables {other}; change one of them."
                )
            config.setdefault(mixed_precision, {"enabled": True})
        for dtype in ("fp16", "bf16"):
            config.setdefault(dtype, {"enabled": False})
        wanted: dict[str, Any] = {
            "fp16.enabled": mixed_precision == "fp16",
            "bf16.enabled": mixed_precision == "bf16",
        }
        self.fill_match("fp16.enabled", must_match=False, **wanted)
        self.fill_match("bf16.enabled", must_match=False, **wanted)

    def set_deepspeed_weakref(self) -> None:
        """Let Transformers see this config (``is_deepspeed_zero3_enabled()``), so that
        ``from_pretrained`` builds a stage-3 model sharded from the start."""
        # transformers is optional: only runs that load Hugging Face models reach this
        from transformers.integrations import HfDeepSpeedConfig as TransformersConfig
        from transformers.integrations import unset_hf_deepspeed_config

        config = copy.deepcopy(self.deepspeed_config)
        for key in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu"):
            if config.get(key, "auto") == "auto":
                config[key] = 1
        if config.get("train_batch_size") == "auto":
            del config["train_batch_size"]
        unset_hf_deepspeed_config()
        self.dschf = TransformersConfig(config)  # Transformers keeps a weak reference

    def is_zero3_init_enabled(self) -> bool:
        """Whether models are built under ``deepspeed.zero.Init``."""
        return bool(self.zero3_init_flag)

    @contextlib.contextmanager
    def zero3_init_context_manager(self, enable: bool = False) -> Iterator[None]:
        """Within it, ``zero3_init_flag`` reads ``enable`` (Transformers follows it)."""
        before = self.zero3_init_flag
        if before == enable:
            yield
            return
        self.zero3_init_flag = enable
        self.dschf = None
        self.set_deepspeed_weakref()
        try:
            yield
        finally:
            self.zero3_init_flag = before
            self.dschf = None
            self.set_deepspeed_weakref()

    def set_moe_leaf_modules(self, model: Any) -> None:
        """Keep the named MoE blocks whole under stage 3 (DeepSpeed's leaf modules)."""
        if not self.transformer_moe_cls_names:
            return
        names = {name.strip() for name in str(self.transformer_moe_cls_names).split(",")}
        classes = {type(m) for m in model.modules() if type(m).__name__ in names}
        missing = names - {cls.__name__ for cls in classes}
        if missing:
            raise ValueError(
                f"transformer_moe_cls_names names {', '.join(sorted(missing))}, which the model "
                "does not contain; give the class names of its MoE blocks."
            )
        # deepspeed is optional: imported only when a MoE model is prepared with it
        from deepspeed.utils import set_z3_leaf_modules

        set_z3_leaf_modules(model, list(classes))

    def select(self, _from_accelerator_state: bool = False) -> None:
        """Make this plugin the active one (``AcceleratorState.select_deepspeed_plugin``)."""
        if not _from_accelerator_state:
            raise ValueError(
                "A DeepSpeedPlugin is selected through "
                "AcceleratorState().select_deepspeed_plugin(name), which also unselects the others."
            )
        self.selected = True
        if self.zero3_init_flag:
            with contextlib.suppress(ImportError):
                self.set_deepspeed_weakref()

    def _unselect(self) -> None:
        self.selected = False
