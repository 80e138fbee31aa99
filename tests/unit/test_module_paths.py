"""Accelerate's module paths exist under nbaccel: code that imports from a submodule
(``accelerate.utils.memory``, ``accelerate.parallelism_config``, ...) runs with only the import
changed, and each path gives the very objects of the top-level modules."""

from __future__ import annotations

import importlib

import pytest

import nbaccel
import nbaccel.utils

SUBMODULES = [
    "constants",
    "dataclasses",
    "environment",
    "fsdp_utils",
    "imports",
    "memory",
    "modeling",
    "operations",
    "other",
    "random",
    "versions",
]

# imports that Accelerate's own tests make, spelled with nbaccel
IMPORTS = [
    ("nbaccel.utils.memory", ["find_executable_batch_size", "release_memory"]),
    ("nbaccel.utils.versions", ["compare_versions", "is_torch_version"]),
    ("nbaccel.utils.operations", ["is_namedtuple"]),
    ("nbaccel.utils.dataclasses", ["DataLoaderConfiguration", "DistributedType"]),
    ("nbaccel.utils.random", ["set_seed"]),
    ("nbaccel.utils.imports", ["is_deepspeed_available", "is_transformers_available"]),
    ("nbaccel.parallelism_config", ["ParallelismConfig"]),
    ("nbaccel.data_loader", ["DataLoaderDispatcher", "DataLoaderShard", "skip_first_batches"]),
    ("nbaccel.state", ["AcceleratorState", "GradientState", "PartialState"]),
    ("nbaccel.logging", ["get_logger"]),
    ("nbaccel.accelerator", ["Accelerator"]),
]


@pytest.mark.parametrize("name", SUBMODULES)
def test_each_utils_submodule_reexports_the_objects_of_nbaccel_utils(name: str) -> None:
    module = importlib.import_module(f"nbaccel.utils.{name}")
    assert module.__all__, f"nbaccel.utils.{name} exports nothing"
    for attr in module.__all__:
        assert getattr(module, attr) is getattr(nbaccel.utils, attr), attr


@pytest.mark.parametrize(("path", "names"), IMPORTS, ids=[p for p, _ in IMPORTS])
def test_the_module_paths_accelerates_tests_import_from(path: str, names: list[str]) -> None:
    module = importlib.import_module(path)
    for name in names:
        value = getattr(module, name)
        top = getattr(nbaccel.utils, name, None) or getattr(nbaccel, name, None)
        if top is not None:
            assert value is top, f"{path}.{name} is not nbaccel's {name}"
