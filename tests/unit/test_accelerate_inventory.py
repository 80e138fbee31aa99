"""Every public name of Accelerate 1.15 (tests/fixtures/accelerate_inventory.json) exists in
nbaccel with compatible parameters, or is listed below with the reason.

Regenerate the fixture with ``python tests/fixtures/make_accelerate_inventory.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from inventory_check import entry_problems, load_inventory

import nbaccel
import nbaccel.utils
from nbaccel.module_paths import names_of

# Areas nbaccel leaves out: the names may be absent. Reason -> names, space-separated
# ("Section:name" for class members; plain names stand for "accelerate" and "accelerate.utils").
OUT_OF_SCOPE: dict[str, str] = {
    "big-model inference internals: the checks of Transformers' config, and loading one "
    "checkpoint file onto the devices of a map (load_checkpoint_in_model does both)": (
        "check_tied_parameters_in_config load_state_dict"
    ),
    "DeepSpeed / Megatron-LM internals: not run (DeepSpeedPlugin and MegatronLMPlugin exist "
    "and say to use FSDP)": (
        "AbstractTrainStep BertTrainStep GPTTrainStep T5TrainStep MegatronLMDummyDataLoader "
        "MegatronLMDummyScheduler GatheredParameters add_model_config_to_megatron_parser "
        "avg_losses_across_data_parallel_group compile_regions_deepspeed deepspeed_required "
        "prepare_deepspeed_cmd_env Accelerator:deepspeed_ulysses_dl_adapter"
    ),
    "fp8 / quantisation backends (Transformer Engine, MS-AMP, bitsandbytes, torchao recipes): "
    "nbaccel's fp8 is mixed_precision='fp8' through torchao": (
        "AORecipeKwargs MSAMPRecipeKwargs TERecipeKwargs BnbQuantizationConfig "
        "apply_fp8_autowrap check_cuda_fp8_capability contextual_fp8_autocast convert_model "
        "convert_model_to_fp8_ao filter_first_and_last_linear_layers has_4bit_bnb_layers "
        "has_ao_layers has_transformer_engine_layers load_and_quantize_model torchao_required"
    ),
    "LOMO fused-backward optimizers (lomo_optim): use a torch optimizer": (
        "Accelerator:lomo_backward"
    ),
    "Accelerate's own launcher internals (its CLI's command builders, SageMaker, TPU pods, "
    "pippy, NUMA): nbaccel launches with notebook_launcher / nbaccel launch": (
        "PrepareForLaunch prepare_multi_gpu_env prepare_sagemager_args_inputs "
        "prepare_simple_launcher_cmd_env prepare_tpu install_xla prepare_pippy "
        "set_numa_affinity get_cpu_distributed_information check_cuda_p2p_ib_support "
        "get_gpu_info get_current_device_type get_model_tp_size"
    ),
    "FSDP and precision internals that prepare / save_state / load_state run for you: call those": (
        "save_fsdp_model load_fsdp_model save_fsdp_optimizer load_fsdp_optimizer fsdp2_apply_ac "
        "fsdp2_canonicalize_names get_fsdp2_grad_scaler compile_regions_fsdp2 "
        "ensure_weights_retied get_grad_scaler get_mixed_precision_context_manager"
    ),
}

# Present, but the parameters differ on purpose. Name -> reason.
DIFFERS: dict[str, str] = {
    "DeepSpeedPlugin": "takes anything and raises: nbaccel does not run DeepSpeed (use FSDP)",
    "MegatronLMPlugin": "takes anything and raises: nbaccel does not run Megatron-LM",
    "InitProcessGroupKwargs": "backend=None: gloo on CPU, nccl on GPU, chosen per device",
    "GradientAccumulationPlugin": "num_steps defaults to 1 (Accelerate's None must be set)",
    "notebook_launcher": "None defaults mean 'decide': precision from the config file, a free "
    "port on one machine, 127.0.0.1; max_restarts=None is 0",
    "write_basic_config": "save_location=None is nbaccel's own config path (nbaccel config)",
    "Accelerator:init_trackers": "Accelerate's signature is its decorator's (*args, **kwargs); "
    "nbaccel names the same parameters",
    "Accelerator:log": "the same: (values, step, log_kwargs) named instead of *args/**kwargs",
    "fsdp2_load_full_state_dict": "no cpu_offload argument: the plugin's cpu_offload decides",
    "FP8RecipeKwargs": "takes anything and raises: Transformer Engine / MS-AMP recipes are "
    "not run (the error says mixed_precision='fp8', through torchao)",
}

# Changed by the other parts of issue 20 (behaviour, FSDP config, collectives). Remove an
# entry once its branch is merged and the entry passes.
PENDING_BEHAVIOUR: dict[str, str] = {}

INVENTORY = load_inventory()
_OUT = {name for names in OUT_OF_SCOPE.values() for name in names.split()}
STATE_CLASSES = ("PartialState", "AcceleratorState", "GradientState")


def _entries() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (section, name, entry)
        for section, entries in INVENTORY.items()
        if isinstance(entries, dict)
        for name, entry in entries.items()
    ]


def _listed(table: Any, section: str, name: str) -> bool:
    plain = section in ("accelerate", "accelerate.utils")
    return (name in table and plain) or f"{section}:{name}" in table


# The module sections' paths in nbaccel: their names are the table's (nbaccel.module_paths).
PATHS = {"accelerate": "nbaccel", "accelerate.utils": "nbaccel.utils"}
OFFERED = {section: set(names_of(path)) for section, path in PATHS.items()}

# Where each section's names live in nbaccel (the state classes' attributes are properties).
TARGETS: dict[str, Any] = {
    "accelerate": nbaccel,
    "accelerate.utils": nbaccel.utils,
    "Accelerator": nbaccel.Accelerator,
    **{name: getattr(nbaccel, name) for name in STATE_CLASSES},
}


def test_fixture_is_accelerate_1_15() -> None:
    assert INVENTORY["accelerate_version"] == "1.15.0"
    assert len(_entries()) > 400


@pytest.mark.parametrize(("section", "name", "entry"), _entries(), ids=lambda v: str(v)[:60])
def test_name_matches_accelerate(section: str, name: str, entry: dict[str, Any]) -> None:
    if _listed(PENDING_BEHAVIOUR, section, name):
        pytest.skip(f"{section}.{name}: pending in another part of issue 20 (PENDING_BEHAVIOUR)")
    if _listed(_OUT, section, name):
        return
    target = TARGETS[section]
    assert hasattr(target, name), f"{section}.{name} is missing from nbaccel"
    if section in OFFERED:
        assert name in OFFERED[section], f"{section}.{name} is not in nbaccel.module_paths"
    if not _listed(DIFFERS, section, name):
        assert entry_problems(entry, getattr(target, name)) == [], f"{section}.{name}"


def test_tables_name_only_real_entries() -> None:
    """Every name in the tables is in the inventory (a stale entry is removed)."""
    known = {n for _, n, _ in _entries()} | {f"{s}:{n}" for s, n, _ in _entries()}
    for table in (_OUT, DIFFERS, PENDING_BEHAVIOUR):
        assert sorted(set(table) - known) == []


def test_out_of_scope_names_are_really_absent_or_checked() -> None:
    """An out-of-scope name that nbaccel does provide is moved out of the table."""
    provided = [n for n in _OUT if ":" not in n and hasattr(nbaccel.utils, n)]
    assert provided == []
    assert sorted(_OUT & (OFFERED["accelerate"] | OFFERED["accelerate.utils"])) == []
