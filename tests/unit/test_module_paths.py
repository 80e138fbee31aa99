"""Accelerate's module paths exist under nbaccel: code that imports from a submodule
(``accelerate.utils.memory``, ``accelerate.parallelism_config``, ...) runs with only the import
changed, and each path gives the very objects of the top-level modules.

One table, :mod:`nbaccel.module_paths`, says which paths nbaccel offers, the names at each and
each name's home (the module where its code lives). A door (a path whose code lives elsewhere)
holds nothing but the imports of its names from their homes and an ``__all__`` equal to the
table's names, so the table and the doors cannot drift apart.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nbaccel
import nbaccel.utils
from nbaccel import module_paths as table

PACKAGE = Path(nbaccel.__file__).parent
DOORS = [path for path in [*table.DOORS, *table.UTILS_SUBMODULES] if path != "nbaccel"]
PATHS = ["nbaccel", *DOORS]  # the package itself also defines code (the IPython hooks)

SUBMODULES = [
    "constants",
    "dataclasses",
    "deepspeed",
    "environment",
    "fsdp_utils",
    "imports",
    "memory",
    "modeling",
    "offload",
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
    ("nbaccel.big_modeling", ["init_empty_weights", "infer_auto_device_map"]),
    ("nbaccel.hooks", ["attach_align_device_hook", "remove_hook_from_module"]),
    ("nbaccel.big_modeling", ["cpu_offload_with_hook", "dispatch_model"]),
    ("nbaccel.utils.modeling", ["get_state_dict_from_offload", "load_checkpoint_in_model"]),
    ("nbaccel.utils.offload", ["OffloadedWeightsLoader", "offload_state_dict"]),
    ("nbaccel.launchers", ["notebook_launcher", "debug_launcher"]),
    ("nbaccel.optimizer", ["AcceleratedOptimizer"]),
    ("nbaccel.scheduler", ["AcceleratedScheduler"]),
]


def _file(path: str) -> Path:
    """The source file of module ``path`` (a package's ``__init__.py``)."""
    relative = Path(*path.split(".")[1:])
    package = PACKAGE / relative / "__init__.py"
    return package if package.exists() else PACKAGE / relative.with_suffix(".py")


def _absolute(path: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in module ``path`` names, spelled out."""
    if not node.level:
        return node.module or ""
    is_package = _file(path).name == "__init__.py"
    parts = path.split(".") if is_package else path.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def _is_all(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
        "__all__"
    ]


@functools.cache
def _defined(path: str) -> set[str]:
    """The names module ``path`` defines at its top level (functions, classes, assignments)."""
    names = set()
    for node in ast.parse(_file(path).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _only_imports(source: str) -> bool:
    """True for a module of nothing but a docstring, imports and ``__all__``."""
    return all(
        isinstance(node, (ast.Import, ast.ImportFrom))
        or _is_all(node)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        for node in ast.parse(source).body
    )


@pytest.mark.parametrize("name", SUBMODULES)
def test_each_utils_submodule_reexports_the_objects_of_nbaccel_utils(name: str) -> None:
    module = importlib.import_module(f"nbaccel.utils.{name}")
    assert module.__all__, f"nbaccel.utils.{name} exports nothing"
    for attr in module.__all__:
        assert getattr(module, attr) is getattr(nbaccel.utils, attr), attr


def test_the_table_holds_every_utils_submodule() -> None:
    assert sorted(table.UTILS_SUBMODULES) == [f"nbaccel.utils.{name}" for name in SUBMODULES]


@pytest.mark.parametrize(("path", "names"), IMPORTS, ids=[p for p, _ in IMPORTS])
def test_the_module_paths_accelerates_tests_import_from(path: str, names: list[str]) -> None:
    module = importlib.import_module(path)
    for name in names:
        value = getattr(module, name)
        top = getattr(nbaccel.utils, name, None) or getattr(nbaccel, name, None)
        if top is not None:
            assert value is top, f"{path}.{name} is not nbaccel's {name}"


@pytest.mark.parametrize("path", PATHS)
def test_all_is_the_tables_names(path: str) -> None:
    exported = importlib.import_module(path).__all__
    assert sorted(exported) == table.names_of(path)
    assert len(set(exported)) == len(exported), f"{path}.__all__ names a name twice"


@pytest.mark.parametrize("path", PATHS)
def test_each_name_is_the_object_of_its_home(path: str) -> None:
    """The table's home is where the code lives: the object is the home's, the home defines
    the name (it does not import it), and a function's or class's ``__module__`` is the home."""
    module = importlib.import_module(path)
    for name, home in table.homes(path).items():
        value: Any = getattr(module, name)
        assert value is getattr(importlib.import_module(home), name), f"{path}.{name}"
        assert name in _defined(home), f"{home} imports {name}: the table names its home"
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == home, f"{path}.{name} lives in {value.__module__}"


@pytest.mark.parametrize("path", DOORS)
def test_a_door_holds_only_the_imports_of_its_names_from_their_homes(path: str) -> None:
    source = _file(path).read_text(encoding="utf-8")
    assert _only_imports(source), f"{path} holds code; its code belongs in a home module"
    imported = set()
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ImportFrom) or _absolute(path, node) == table.__name__:
            continue
        for alias in node.names:
            assert alias.asname is None, f"{path} renames {alias.name}: give the home that name"
            imported.add((alias.name, _absolute(path, node)))
    assert imported == set(table.homes(path).items())
    assert path not in table.homes(path).values(), f"{path} is a door: its homes are elsewhere"


def test_a_top_level_module_of_only_imports_is_a_door_of_the_table() -> None:
    """No re-export pile outside Accelerate's paths: such a module is a door, or goes."""
    piles = [
        f"nbaccel.{file.stem}"
        for file in sorted(PACKAGE.glob("*.py"))
        if file.stem != "__init__" and _only_imports(file.read_text(encoding="utf-8"))
    ]
    assert piles and sorted(set(piles) - set(DOORS)) == []


def test_each_name_has_one_home_at_each_path() -> None:
    for path, homes in table.DOORS.items():
        names = [name for listed in homes.values() for name in listed.split()]
        assert len(names) == len(set(names)), path
    utils = table.homes("nbaccel.utils")
    for path, listed in table.UTILS_SUBMODULES.items():
        assert sorted(set(listed.split()) - set(utils)) == [], f"{path} names beyond utils"


@pytest.mark.parametrize("path", table.AT_HOME)
def test_the_paths_where_nbaccel_code_lives_itself_import(path: str) -> None:
    module = importlib.import_module(path)
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)
    assert path not in table.DOORS


def test_the_package_loads_its_names_on_first_use_and_types_them_all() -> None:
    """``nbaccel/__init__.py`` imports its names for type checkers only (``TYPE_CHECKING``):
    exactly the table's names; at run time each loads from its home when first asked for."""
    source = _file("nbaccel").read_text(encoding="utf-8")
    typed = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom), ast.unparse(child)
                typed |= {alias.asname or alias.name for alias in child.names}
    assert sorted(typed) == table.names_of("nbaccel")
    fresh = "import sys, nbaccel; print(sorted(m for m in sys.modules if '.fsdp' in m))"
    loaded = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    modules = ast.literal_eval(loaded.stdout)
    torch_fsdp = [m for m in modules if m.startswith("torch.distributed.fsdp")]
    assert torch_fsdp == [], loaded.stdout  # FSDP loads with the Accelerator only
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        nbaccel.not_a_name  # noqa: B018
