"""README.md's commands and notebook example run as written; the docs name every public name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebook

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The fenced ``bash`` blocks of the README's "Try it" section, in order."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Try it.*?$(.*?)(?=^## )", text, re.M | re.S)
    assert section, "README.md has no '## Try it' section"
    blocks = re.findall(r"^```bash\n(.*?)^```", section.group(1), re.M | re.S)
    return [block.strip() for block in blocks]


def ci_commands() -> list[str]:
    """The command lines of .ci/run, in order (comments and blank lines left out)."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


# import name -> distribution name: what the README's commands install and use
DEPENDENCIES = {
    "torch": "torch",
    "numpy": "numpy",
    "sklearn": "scikit-learn",
    "safetensors": "safetensors",
    "cloudpickle": "cloudpickle",
    "nbaccel": "nbaccel",
}
_LOCATE = """
import importlib, importlib.metadata as metadata, json, sys
names = json.loads(sys.argv[1])
print(json.dumps({
    name: [importlib.import_module(name).__file__, str(metadata.distribution(dist).locate_file(""))]
    for name, dist in names.items()
}))
"""


def _locations(python: str | Path, env: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Where ``python`` imports each of :data:`DEPENDENCIES` from, and where the installed
    distribution's metadata lies (two environments can share a source tree but not that).
    Run outside the repository, whose ``nbaccel.egg-info`` would be found first."""
    out = subprocess.run(
        [str(python), "-c", _LOCATE, json.dumps(DEPENDENCIES)],
        cwd=Path(python).anchor,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def venv(
    tmp_path_factory: pytest.TempPathFactory, venv_seeing_these_packages: Callable[[Path], Path]
) -> dict[str, str]:
    """A fresh virtual environment that sees this interpreter's packages, and its environment
    (``venv_seeing_these_packages`` in tests/conftest.py says how). pip runs offline
    (``PIP_NO_INDEX``) and without build isolation, so the README's install commands resolve
    from what is installed here.
    """
    path = tmp_path_factory.mktemp("readme") / "venv"
    venv_seeing_these_packages(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "PYTEST_"))}
    env.update(
        PATH=f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(path),
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",  # pip reads this "no-" switch inverted: 0 turns isolation off
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def test_the_fresh_venv_uses_the_packages_of_the_interpreter_running_the_tests(
    venv: dict[str, str],
) -> None:
    """The same check with the system's Python and inside a virtual environment: the fresh
    environment imports each dependency from the very files this interpreter does."""
    nested = Path(venv["VIRTUAL_ENV"], "bin", "python")
    assert _locations(nested, venv) == _locations(sys.executable), (sys.prefix, sys.base_prefix)


def _bash(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_readme_has_the_install_and_demo_command_then_the_test_command() -> None:
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert commands[0].startswith("pip install torch==2.13.0 && pip install -e ")
    assert commands[0].endswith("&& nbaccel demo")
    assert commands[1].endswith("&& bash tests/run.sh")


def test_readme_demo_command_runs_as_written(venv: dict[str, str]) -> None:
    command = readme_commands()[0]
    result = _bash(command, venv, timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert re.search(r"^rank 0/2 on cpu: \d+ optimizer steps", result.stdout, re.M), out
    assert re.search(r"^rank 1/2 on cpu: \d+ optimizer steps", result.stdout, re.M), out
    accuracy = re.search(r"^test accuracy: ([0-9.]+) \(gathered from 2 ranks", result.stdout, re.M)
    assert accuracy and float(accuracy.group(1)) >= 0.9, out
    # the `nbaccel` that ran is the one the README's install put into the venv
    assert Path(venv["VIRTUAL_ENV"], "bin", "nbaccel").exists()


def test_readme_test_command_installs_and_is_what_ci_runs(venv: dict[str, str]) -> None:
    """The install part runs as written; `bash tests/run.sh` is this very suite, so it is not
    run again here: the check is that .ci/run runs the README's commands."""
    steps = [step.strip() for step in readme_commands()[1].split("&&")]
    assert steps[-1] == "bash tests/run.sh"
    assert (ROOT / "tests" / "run.sh").is_file()
    # the Python installs run here as written; the system package steps (apt-get, as root) are
    # checked by .ci/run's order below and run by CI itself
    python_steps = [step for step in steps[:-1] if not step.startswith("apt-get")]
    result = _bash(" && ".join(python_steps), venv, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    # .ci/run runs both README commands as written, in order, in a venv it makes new first.
    ci = ci_commands()
    assert ci[-2:-1] == readme_commands()[1:], (
        f".ci/run does not end with the README's test command: {ci}"
    )
    assert readme_commands()[0] in ci[: ci.index(readme_commands()[1])], ci
    fresh = [
        c for c in ci if c.startswith(("rm -rf .venv-ci", "python -m venv .venv-ci", ". .venv-ci"))
    ]
    assert fresh == ["rm -rf .venv-ci", "python -m venv .venv-ci", ". .venv-ci/bin/activate"], ci
    assert ci.index(fresh[-1]) < ci.index(readme_commands()[0]), "the venv comes first"


def test_readme_notebook_example_runs_in_a_kernel() -> None:
    """The README's "In a notebook" example, run as one cell of a real Jupyter kernel."""
    pytest.importorskip("jupyter_client")
    from tests.support.kernel import running_kernel

    text = (ROOT / "README.md").read_text()
    example = re.search(r"^## In a notebook\n+```python\n(.*?)^```", text, re.M | re.S)
    assert example, "README.md has no Python example under '## In a notebook'"
    with running_kernel() as kernel:
        cell = kernel.ok(example.group(1), timeout=120)
    assert cell.lines()[-1] == "[0, 1]", cell.describe()
    for rank in (0, 1):
        assert f"[rank{rank}]: last loss" in cell.stdout, cell.describe()


def test_docs_cover_every_public_name_and_every_launcher_error() -> None:
    import nbaccel
    import nbaccel.utils

    docs = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    names = sorted(set(nbaccel.__all__) | set(nbaccel.utils.__all__))
    undocumented = [name for name in names if not re.search(rf"`{re.escape(name)}[`(]", docs)]
    assert not undocumented, f"docs/*.md never name {undocumented}"
    troubleshooting = (ROOT / "docs" / "troubleshooting.md").read_text()
    errors = ["CudaInitializedError", "PortInUseError", "LaunchTimeoutError", "WorkerError"]
    assert not [e for e in errors if e not in troubleshooting]
