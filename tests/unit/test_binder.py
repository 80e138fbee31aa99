"""binder/ builds a working JupyterLab: the right packages and versions, the CPU build of torch."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def _binder_requirements() -> dict[str, Requirement]:
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    found = [Requirement(line) for line in lines if line.strip() and line[0] not in "#-"]
    return {canonicalize_name(r.name): r for r in found}


def _project_needs() -> list[Requirement]:
    """nbaccel's dependencies and its notebook and examples extras, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [
        Requirement(r) for r in [*project["dependencies"], *extras["notebook"], *extras["examples"]]
    ]


def test_binder_names_every_package_nbaccel_and_its_notebooks_need() -> None:
    binder = _binder_requirements()
    for need in _project_needs():
        name = canonicalize_name(need.name)
        assert name in binder, f"binder/requirements.txt lacks {need}"
        if name != "torch":
            assert binder[name].specifier == need.specifier, f"{binder[name]} is not {need}"


def test_binder_installs_the_cpu_build_of_torch_the_project_supports() -> None:
    text = (BINDER / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text.splitlines()
    torch = _binder_requirements()["torch"]
    assert str(torch.specifier) == "==2.13.0+cpu"
    supported = next(r for r in _project_needs() if r.name == "torch").specifier
    assert supported.contains("2.13.0+cpu"), f"pyproject allows torch {supported}"


def test_binder_post_build_installs_nbaccel_and_runtime_is_a_supported_python() -> None:
    post_build = BINDER / "postBuild"
    assert os.access(post_build, os.X_OK), "binder/postBuild must be executable"
    assert "pip install --no-deps -e ." in post_build.read_text()
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime.startswith("python-3.")
    assert int(runtime.split(".")[1]) >= 10, "nbaccel needs Python 3.10+"


def test_binder_files_install_into_a_fresh_venv_offline_and_nbaccel_imports(
    tmp_path: Path, venv_seeing_these_packages: Callable[[Path], Path]
) -> None:
    """requirements.txt, then postBuild, in a new venv: pip may use only what this machine has
    (no index; the venv sees this interpreter's packages, in a venv or not), and nbaccel lands
    in the venv."""
    venv = tmp_path / "venv"
    python = str(venv_seeing_these_packages(venv))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBACCEL_")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",  # pip reads this "no-" switch inverted: 0 turns isolation off
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    run = {"cwd": ROOT, "env": env, "capture_output": True, "text": True, "timeout": 240}
    steps = [
        [python, "-m", "pip", "install", "-r", str(BINDER / "requirements.txt")],
        ["bash", str(BINDER / "postBuild")],
        [
            python,
            "-c",
            "import importlib.metadata as m, nbaccel, sklearn, torch, ipykernel, ipywidgets; "
            "print(torch.__version__, m.distribution('nbaccel').locate_file(''))",
        ],
    ]
    for step in steps:
        # the import runs outside the checkout, so that its nbaccel.egg-info is not found
        where = {"cwd": tmp_path} if step[0] == python and step[1] == "-c" else {}
        result = subprocess.run(step, **{**run, **where})
        assert result.returncode == 0, f"{step}:\n{result.stdout}\n{result.stderr}"
    version, location = result.stdout.split()
    assert version.endswith("+cpu"), version
    assert Path(location).resolve().is_relative_to(venv.resolve()), location
