"""The Accelerator's checkpointing part: save_state / load_state, hooks, registered
objects, save_model, get_state_dict and save."""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..checkpoint.export import save_model_files
from ..checkpoint.files import save_to
from ..checkpoint.interrupts import terminated_cleanly
from ..checkpoint.layout import (
    checkpoint_dirs,
    make_dirs,
    publish,
    remove_stale_staging,
    remove_tree,
    staging_dir,
    write_manifest,
)
from ..checkpoint.state import (
    StateObjects,
    load_state_files,
    save_loader_states,
    save_state_files,
)
from ..modeling.offloaded import get_state_dict_offloaded_model, has_offloaded_params
from ..ops import broadcast_object_list
from ..plugins import ProjectConfiguration
from ..precision import Precision
from ..state import AcceleratorState
from ..state.handshake import enter
from ..strategies import DeepSpeedStrategy, FSDPStrategy, Strategy
from ..validation import check_bool, check_instance, check_path
from .preparation import Preparer
from .steps import TrainingSteps

__all__ = ["Checkpointer"]


@dataclasses.dataclass
class _Registry:
    custom: list[Any] = dataclasses.field(default_factory=list)
    # OrderedDict: RemovableHandle keeps a weak reference, which a plain dict does not allow
    save_hooks: OrderedDict[int, Callable[..., None]] = dataclasses.field(
        default_factory=OrderedDict
    )
    load_hooks: OrderedDict[int, Callable[..., None]] = dataclasses.field(
        default_factory=OrderedDict
    )


@dataclasses.dataclass(eq=False)
class Checkpointer:
    """Checkpointing for :class:`~nbaccel.Accelerator` (see ``docs/checkpointing.md``).

    Owns the registered objects and the save/load hooks; reads the prepared objects from the
    preparer and the counters from the training-step part.
    """

    state: AcceleratorState
    project_configuration: ProjectConfiguration
    strategy: Strategy
    preparer: Preparer
    precision: Precision
    steps: TrainingSteps
    _registry: _Registry = dataclasses.field(default_factory=_Registry, init=False)

    @property
    def custom_objects(self) -> list[Any]:
        """The objects given to :meth:`register_for_checkpointing`."""
        return self._registry.custom

    @property
    def save_iteration(self) -> int:
        """The number the next automatically named checkpoint gets."""
        return self.project_configuration.iteration

    def _fsdp(self) -> FSDPStrategy | None:
        """The FSDP strategy when models are sharded (their checkpoints take its path)."""
        return self.strategy if isinstance(self.strategy, FSDPStrategy) else None

    def _deepspeed(self) -> DeepSpeedStrategy | None:
        """The DeepSpeed strategy when models are engines (their checkpoints are theirs)."""
        return self.strategy if isinstance(self.strategy, DeepSpeedStrategy) else None

    def _writes(self) -> bool:
        """Whether this process writes the shared files."""
        if self.project_configuration.save_on_each_node:
            return self.state.is_local_main_process
        return self.state.is_main_process

    # -- registration ------------------------------------------------------------------------
    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` with the state (each needs state_dict / load_state_dict)."""
        invalid = [
            (index, obj)
            for index, obj in enumerate(objects)
            if not (callable(getattr(obj, "state_dict", None)))
            or not callable(getattr(obj, "load_state_dict", None))
        ]
        if invalid:
            listed = "\n".join(
                f"- Item at index {i}, {type(obj).__name__}: {obj!r}"[:200] for i, obj in invalid
            )
            raise ValueError(
                "register_for_checkpointing: every object must have state_dict() and "
                f"load_state_dict() methods; these do not:\n{listed}"
            )
        self.custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` in ``save_state`` before anything is
        written; it may change ``weights`` (the state dicts to save) or remove entries."""
        hooks = self._registry.save_hooks
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` in ``load_state`` before anything is loaded; models
        it removes from the list are not loaded."""
        hooks = self._registry.load_hooks
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    # -- state -------------------------------------------------------------------------------
    def _checkpoint_root(self) -> Path:
        project_dir = self.project_configuration.project_dir
        if project_dir is None:
            raise ValueError(
                "automatic_checkpoint_naming=True needs a project directory: pass "
                "ProjectConfiguration(project_dir=...) or Accelerator(project_dir=...)."
            )
        return Path(project_dir).expanduser() / "checkpoints"

    def _save_target(self, output_dir: str | os.PathLike[str] | None) -> Path:
        config = self.project_configuration
        if not config.automatic_checkpoint_naming:
            if output_dir is None:
                raise ValueError(
                    "save_state() needs output_dir, or a ProjectConfiguration with "
                    "automatic_checkpoint_naming=True and a project_dir."
                )
            return Path(output_dir).expanduser()
        target = self._checkpoint_root() / f"checkpoint_{config.iteration}"
        if target.exists():
            raise ValueError(
                f"The checkpoint directory {target} already exists. Call load_state() first "
                "(it continues the numbering after the newest checkpoint) or set "
                "project_configuration.iteration to the number to continue with."
            )
        return target

    def save_state(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        safe_serialization: bool = True,
        **save_model_func_kwargs: Any,
    ) -> str:
        """Save models, optimizers, schedulers, scaler, data loader positions, RNG states and
        registered objects; every process must call it. The directory appears complete or not
        at all. Returns the checkpoint directory."""
        check_path("save_state(output_dir)", output_dir)
        check_bool("save_state(safe_serialization)", safe_serialization)
        enter("save_state")  # every process takes part: fails at once if some are elsewhere
        config = self.project_configuration
        target = self._save_target(output_dir)
        token = broadcast_object_list([secrets.token_hex(6)])[0]
        staging = staging_dir(target, token)
        publisher = self._writes()
        with terminated_cleanly():  # SIGTERM (the launcher stopping workers) raises here too
            try:
                if publisher:
                    make_dirs(target.parent)
                    remove_stale_staging(target, keep=staging)
                    staging.mkdir(exist_ok=True)
                self.state.wait_for_everyone()
                self._write_and_publish(staging, target, token, publisher, safe_serialization)
            except BaseException:
                if publisher:  # leave no half checkpoint behind (the previous one is untouched)
                    shutil.rmtree(staging, ignore_errors=True)
                raise
        config.iteration += 1
        return str(target)

    def _write_and_publish(
        self, staging: Path, target: Path, token: str, publisher: bool, safe_serialization: bool
    ) -> None:
        config = self.project_configuration
        staging.mkdir(parents=True, exist_ok=True)  # machines without a shared file system
        models = list(self.preparer.models)
        fsdp = self._fsdp()
        engines = self._deepspeed()
        sharded = (fsdp is not None and fsdp.sharded_checkpoints) or engines is not None
        weights = [] if sharded else [self._full_state_dict(model) for model in models]
        for hook in list(self._registry.save_hooks.values()):
            hook(models, weights, str(staging))
        if engines is not None:  # each engine writes its weights, optimizer and scheduler
            engines.save_checkpoint(models, staging)
            schedulers = engines.schedulers_not_saved(self.preparer.schedulers)
            objects = self._state_objects(optimizers=[], schedulers=schedulers)
        elif fsdp is None:
            objects = self._state_objects(weights=weights)
        else:  # models and optimizers take FSDP's path; the rest is written as without it
            # torch.distributed.checkpoint is slow to import: only FSDP runs pay for it
            from ..fsdp.state_dict import save_fsdp_checkpoint

            save_fsdp_checkpoint(
                staging,
                models,
                weights,
                fsdp.optimizer_pairs(models, list(self.preparer.optimizers)),
                sharded=sharded,
                writer=publisher,
                safe_serialization=safe_serialization,
                everywhere=config.save_on_each_node,
            )
            objects = self._state_objects(optimizers=[])
        counters = self.steps.counters()
        save_state_files(
            staging,
            objects,
            process_index=self.state.process_index,
            writer=publisher,
            safe_serialization=safe_serialization,
            counters=counters,
        )
        self.state.wait_for_everyone()
        if publisher:
            info = {"num_processes": self.state.num_processes, "step": self.steps.step}
            write_manifest(staging, info)
            publish(staging, target, token)
            if config.automatic_checkpoint_naming and config.total_limit is not None:
                for _, old in checkpoint_dirs(target.parent)[: -config.total_limit]:
                    remove_stale_staging(old)
                    remove_tree(old)
        self.state.wait_for_everyone()
        if not publisher and self.state.is_local_main_process and staging.exists():
            if sharded:  # this machine's shards are part of the checkpoint: they stay here
                publish(staging, target, token)
                return
            # a machine without a shared file system and without save_on_each_node: like
            # Accelerate, it keeps its processes' random states and the data loader positions
            # in its own directory (the weights stay on the main process's machine)
            save_loader_states(staging, list(self.preparer.dataloaders))
            publish(staging, target, token)

    def _state_objects(self, **kwargs: Any) -> StateObjects:
        preparer = self.preparer
        return StateObjects(
            models=kwargs.pop("models", []),
            optimizers=kwargs.pop("optimizers", list(preparer.optimizers)),
            schedulers=kwargs.pop("schedulers", list(preparer.schedulers)),
            dataloaders=list(preparer.dataloaders),
            custom=list(self.custom_objects),
            scaler=self.precision.scaler,
            **kwargs,
        )

    def _load_source(self, input_dir: str | os.PathLike[str] | None) -> Path:
        if input_dir is not None:
            directory = Path(input_dir).expanduser()
            if not directory.is_dir():
                raise FileNotFoundError(f"load_state: the checkpoint {directory} does not exist.")
            return directory
        if not self.project_configuration.automatic_checkpoint_naming:
            raise ValueError(
                "load_state() needs input_dir, or a ProjectConfiguration with "
                "automatic_checkpoint_naming=True to load the newest checkpoint."
            )
        found = checkpoint_dirs(self._checkpoint_root())
        if not found:
            raise FileNotFoundError(
                f"load_state: there is no complete checkpoint in {self._checkpoint_root()}."
            )
        return found[-1][1]

    def load_state(
        self,
        input_dir: str | os.PathLike[str] | None = None,
        load_kwargs: dict[str, Any] | None = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        """Load what :meth:`save_state` saved into the prepared objects (the newest automatic
        checkpoint when ``input_dir`` is None); RNG states and data loader epochs too."""
        check_path("load_state(input_dir)", input_dir)
        directory = self._load_source(input_dir)
        models = list(self.preparer.models)
        for hook in list(self._registry.load_hooks.values()):
            hook(models, str(directory))
        strict = bool(load_model_func_kwargs.get("strict", True))
        fsdp = self._fsdp()
        engines = self._deepspeed()
        if engines is not None:
            engines.load_checkpoint(models, directory)
            schedulers = engines.schedulers_not_saved(self.preparer.schedulers)
            objects = self._state_objects(optimizers=[], schedulers=schedulers)
        elif fsdp is None:
            objects = self._state_objects(models=[self.strategy.unwrap_model(m) for m in models])
        else:
            # torch.distributed.checkpoint is slow to import: only FSDP runs pay for it
            from ..fsdp.state_dict import load_fsdp_checkpoint, manifest_checker

            pairs = fsdp.optimizer_pairs(list(self.preparer.models), list(self.preparer.optimizers))
            checked = manifest_checker(directory)
            load_fsdp_checkpoint(directory, models, pairs, strict=strict, checked=checked)
            objects = self._state_objects(optimizers=[])
        counters = load_state_files(
            directory,
            objects,
            process_index=self.state.process_index,
            num_processes=self.state.num_processes,
            strict=strict,
        )
        self.steps.restore(counters)
        config = self.project_configuration
        if config.automatic_checkpoint_naming and input_dir is None:
            config.iteration = int(directory.name.rpartition("_")[2]) + 1

    # -- models and objects ------------------------------------------------------------------
    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The state dict of ``model`` (of the model inside its wrappers when ``unwrap``).

        Under FSDP (1 and 2) it is the full, unsharded state dict on CPU, on the main process
        (``{}`` on the others), whatever ``state_dict_type`` says; every process must call it.
        A model with offloaded weights (``dispatch_model``, ``cpu_offload``, ``disk_offload``)
        gives their real values, on the CPU.
        """
        return self._full_state_dict(model, unwrap=unwrap, everywhere=False)

    def _full_state_dict(
        self, model: nn.Module, unwrap: bool = True, everywhere: bool | None = None
    ) -> dict[str, torch.Tensor]:
        """``get_state_dict``; FSDP's full one also on each machine's first process when
        ``everywhere`` (``save_on_each_node`` when None: those processes write files)."""
        # torch.distributed.checkpoint is slow to import: only FSDP runs pay for it
        from ..fsdp.state_dict import full_model_state_dict, is_fsdp_model

        engines = self._deepspeed()
        if engines is not None:
            enter("a DeepSpeed model's full state dict")  # stage 3 gathers on every process
            if everywhere is None:
                everywhere = self.project_configuration.save_on_each_node
            main = self.state.is_local_main_process if everywhere else self.state.is_main_process
            return engines.full_state_dict(model, main=main)
        if self._fsdp() is not None and is_fsdp_model(model):
            enter("an FSDP model's full state dict")  # get_state_dict, save_model, save_state
            if everywhere is None:
                everywhere = self.project_configuration.save_on_each_node
            return full_model_state_dict(model, everywhere=everywhere)
        target = self.strategy.unwrap_model(model) if unwrap else model
        if any(has_offloaded_params(module) for module in target.modules()):
            return get_state_dict_offloaded_model(target)  # the real values, not meta
        return target.state_dict()

    def save_model(
        self,
        model: nn.Module,
        save_directory: str | os.PathLike[str],
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Export ``model``'s weights (unwrapped) for ``load_checkpoint_in_model`` and the Hugging
        Face ecosystem: safetensors shards plus an index, or ``pytorch_model.bin``. Every
        process calls it; only the main process writes. Offloaded weights are written with
        their real values (brought to the CPU one module at a time)."""
        check_instance("save_model(model)", model, nn.Module, "a torch.nn.Module")
        if model is None:
            raise TypeError("save_model(model) must be a torch.nn.Module, got None.")
        check_path("save_model(save_directory)", save_directory, allow_none=False)
        check_bool("save_model(safe_serialization)", safe_serialization)
        offloaded = any(has_offloaded_params(module) for module in model.modules())
        if not offloaded and any(p.device.type == "meta" for p in model.parameters()):
            raise RuntimeError(
                "You can't save the model since some parameters are on the meta device (load "
                "real weights first, e.g. with load_checkpoint_in_model)."
            )
        state_dict = self._full_state_dict(model)
        if self._writes():
            save_model_files(state_dict, Path(save_directory), max_shard_size, safe_serialization)

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save`` (or safetensors) once per machine, in place of ``torch.save``."""
        if self.state.is_local_main_process:
            save_to(obj, f, safe_serialization)
