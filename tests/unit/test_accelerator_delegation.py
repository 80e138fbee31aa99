"""How the Accelerator passes calls on to its parts: each such method is written out, with the
part's signature, takes the part's docstring through ``documented_by`` (never a second copy of
its text), and calls a part whose type is declared, so that mypy checks the call
(docs/architecture.md, "The Accelerator")."""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest

from nbaccel import Accelerator
from nbaccel.precision import Precision
from nbaccel.state import GradientState
from nbaccel.training.documented import documented_by
from nbaccel.training.facade_checkpointing import CheckpointingMethods
from nbaccel.training.facade_collectives import CollectiveMethods
from nbaccel.training.facade_parallel import ParallelMethods
from nbaccel.training.facade_state import StateMethods
from nbaccel.training.facade_tracking import TrackingMethods
from nbaccel.training.preparation import Preparer
from nbaccel.training.steps import TrainingSteps

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "nbaccel" / "training"
BASES = (StateMethods, CheckpointingMethods, TrackingMethods, CollectiveMethods, ParallelMethods)
# The state's properties keep the Accelerator's own (shorter) docstrings, as they always had.
OWN_PROPERTY_DOCS = (StateMethods,)


def _parts(holder: type) -> dict[str, type]:
    """Attribute name -> part class, as ``holder`` declares them."""
    if holder is Accelerator:
        return {"_steps": TrainingSteps}
    return typing.get_type_hints(holder)


def _mirrored() -> list[tuple[str, Any, Any]]:
    """(name, the Accelerator's member, the part's member) for every member that a facade class
    defines and one of its declared parts also has under that name."""
    found = []
    for holder in (*BASES, Accelerator):
        for name, ours in vars(holder).items():
            if name.startswith("__"):
                continue
            for part in _parts(holder).values():
                theirs = inspect.getattr_static(part, name, None)
                methods = inspect.isfunction(ours) and inspect.isfunction(theirs)
                views = isinstance(ours, property) and isinstance(theirs, property)
                if methods or (views and holder not in OWN_PROPERTY_DOCS):
                    found.append((f"{holder.__name__}.{name}", ours, theirs))
    return found


MIRRORED = _mirrored()


def test_every_facade_base_is_a_base_of_the_accelerator() -> None:
    assert set(BASES) <= set(Accelerator.__mro__)
    own = {path.stem for path in TRAINING.glob("facade_*.py")}
    assert own == {base.__module__.rsplit(".", 1)[1] for base in BASES}


def test_the_mirrored_members_are_found() -> None:
    names = {name.rsplit(".", 1)[1] for name, _, _ in MIRRORED}
    for expected in ("save_state", "log", "gather", "wait_for_everyone", "backward", "is_fsdp2"):
        assert expected in names
    assert len(names) >= 40


@pytest.mark.parametrize(("name", "ours", "theirs"), MIRRORED, ids=[m[0] for m in MIRRORED])
def test_signature_and_docstring_are_the_parts(name: str, ours: Any, theirs: Any) -> None:
    assert ours.__doc__ == theirs.__doc__, name
    if isinstance(ours, property):
        return
    mine, part = inspect.signature(ours), inspect.signature(theirs)
    assert list(mine.parameters.values()) == list(part.parameters.values()), name
    expected = part.return_annotation
    if hasattr(theirs, "__wrapped__"):  # a generator made a context manager: that is returned
        expected = expected.replace("Iterator[", "contextlib.AbstractContextManager[")
    assert mine.return_annotation == expected, name


def _written(member: Any) -> ast.FunctionDef:
    """The definition of a facade member (a property's getter), as its source writes it."""
    function = member.fget if isinstance(member, property) else member
    assert function is not None
    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


@pytest.mark.parametrize(("name", "ours", "theirs"), MIRRORED, ids=[m[0] for m in MIRRORED])
def test_the_docstring_comes_from_the_part(name: str, ours: Any, theirs: Any) -> None:
    node = _written(ours)
    assert ast.get_docstring(node) is None, name  # one source: the part's method
    assert any(ast.unparse(d).startswith("documented_by(") for d in node.decorator_list), name


def _part_docstrings() -> set[str]:
    """The docstrings of every method and property of every part the Accelerator holds."""
    parts = {TrainingSteps, Preparer, Precision, GradientState}
    for base in BASES:
        parts.update(_parts(base).values())
    found = set()
    for part in parts:
        for name in dir(part):
            member = inspect.getattr_static(part, name)
            if (inspect.isfunction(member) or isinstance(member, property)) and member.__doc__:
                found.add(member.__doc__)
    return found


def test_no_facade_member_writes_out_a_docstring_of_a_part() -> None:
    docstrings = _part_docstrings()
    copies = []
    for holder in (*BASES, Accelerator):
        for name, member in vars(holder).items():
            if inspect.isfunction(member) or isinstance(member, property):
                written = ast.get_docstring(_written(member), clean=False)
                if written is not None and written in docstrings:
                    copies.append(f"{holder.__name__}.{name}")
    assert not copies, f"use documented_by(...) in place of the copied docstring: {copies}"


def test_documented_by_gives_the_same_function_its_source_docstring() -> None:
    def source() -> None:
        """Source text.

        More of it."""

    def method() -> None:
        pass

    def bare() -> None:
        pass

    assert documented_by(source)(method) is method
    assert method.__doc__ == source.__doc__
    with pytest.raises(TypeError, match="of its own"):
        documented_by(source)(source)
    with pytest.raises(TypeError, match="no docstring"):
        documented_by(bare)


def test_the_declared_parts_are_the_ones_the_accelerator_holds() -> None:
    accelerator = Accelerator(cpu=True)
    for base in BASES:
        for attribute, part in _parts(base).items():
            assert isinstance(getattr(accelerator, attribute), part), (base, attribute)


def test_calls_go_straight_to_the_part() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(TypeError) as caught:
        accelerator.log([1])  # type: ignore[arg-type]
    frames = [entry.name for entry in caught.traceback]
    assert frames[-2:] == ["log", "log"]  # the facade's method, then the part's
    assert caught.traceback[-2].path == TRAINING / "facade_tracking.py"
    with accelerator.split_between_processes([1, 2]) as share:
        assert share == [1, 2]
    assert isinstance(accelerator.accumulate(), contextlib.AbstractContextManager)


# A module written in the facade's style, with mistakes mypy must find: ``# expect: CODE`` ends
# each line where mypy must report an error with that code (and nowhere else).
MISMATCHES = """
from __future__ import annotations

from typing import Any

from nbaccel.training.facade_checkpointing import CheckpointingMethods
from nbaccel.training.facade_tracking import TrackingMethods
from nbaccel.training.steps import TrainingSteps


class Facade(CheckpointingMethods, TrackingMethods):
    _steps: TrainingSteps

    def __init__(self, steps: TrainingSteps) -> None:
        self._steps = steps
        self._checkpointer = steps  # expect: assignment

    def save_steps(self, output_dir: Any = None) -> str:
        return self._steps.save_state(output_dir)  # expect: attr-defined

    def backward(self, loss: Any) -> None:
        self._checkpointer.backward(loss)  # expect: attr-defined

    def log_elsewhere(self, values: dict[str, Any]) -> None:
        self._tracking.save(values)  # expect: attr-defined

    def save_once(self, obj: Any) -> None:
        self._checkpointer.save(obj)  # expect: call-arg

    @property
    def iteration(self) -> str:
        return self._checkpointer.save_iteration  # expect: return-value

    def tracker(self, name: str, unwrap: bool = False) -> Any:
        return self._tracking.get_tracker(name, unwrap)
"""
_ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", re.M)


def test_mypy_rejects_a_wrong_part_and_passes_the_facade(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    module = tmp_path / "facade_mismatches.py"
    module.write_text(MISMATCHES)
    expected = {
        (number, line.rsplit("# expect: ", 1)[1])
        for number, line in enumerate(MISMATCHES.splitlines(), start=1)
        if "# expect: " in line
    }
    facade = [
        "nbaccel/training/accelerator.py",
        *sorted(str(path.relative_to(ROOT)) for path in TRAINING.glob("facade_*.py")),
    ]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", *facade, str(module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    errors = [match.groupdict() for match in _ERROR.finditer(result.stdout)]
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(errors) == result.stdout.count(": error: "), result.stdout
    elsewhere = [e for e in errors if Path(e["path"]).name != module.name]
    assert not elsewhere, result.stdout  # the real facade type-checks
    found = {(int(e["line"]), e["code"]) for e in errors}
    assert found == expected, result.stdout
