"""tests/tier_guard.py, the plugin run.sh loads for every tier: a run in which every test was
skipped fails (exit 5, saying why) unless the tier is declared optional with its reason; a run
that passed tests, or that failed, keeps pytest's own status. Each run is a pytest of its own
on a small folder of tests written here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, pythonpath
from tests.tier_guard import OPTIONAL

SKIPPING = """
import pytest

@pytest.fixture
def machine():
    pytest.skip("this machine lacks it")

def test_in_a_fixture(machine):
    pass

@pytest.mark.skip(reason="no such device")
def test_marked():
    pass
"""
PASSING = "def test_passes():\n    pass\n"
FAILING = "def test_fails():\n    assert False\n"


def _tier(folder: Path, *files: str, optional: str | None = None) -> tuple[int, str]:
    for index, text in enumerate(files):
        (folder / f"test_{index}.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if k != OPTIONAL}
    env["PYTHONPATH"] = pythonpath()  # tests.tier_guard, from the checkout
    if optional is not None:
        env[OPTIONAL] = optional
    guarded = ["-p", "tests.tier_guard", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *guarded, str(folder)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_tier_whose_every_test_skipped_fails_saying_why(tmp_path: Path) -> None:
    code, out = _tier(tmp_path, SKIPPING)
    assert code == 5, out
    assert "none of the 2 collected tests passed (2 skipped)" in out, out
    assert f"{OPTIONAL}=<reason>" in out, out


def test_a_tier_declared_optional_passes_with_its_reason(tmp_path: Path) -> None:
    code, out = _tier(tmp_path, SKIPPING, optional="no CUDA device")
    assert code == 0, out
    assert "this tier is optional here: no CUDA device" in out, out


@pytest.mark.parametrize("optional", [None, "no CUDA device"])
def test_a_tier_that_collects_nothing_fails_optional_or_not(
    tmp_path: Path, optional: str | None
) -> None:
    code, out = _tier(tmp_path, "", optional=optional)
    assert code == 5, out
    assert "collected no test" in out, out


def test_passes_beside_skips_and_failures_keep_pytests_status(tmp_path: Path) -> None:
    code, out = _tier(tmp_path, SKIPPING, PASSING)
    assert code == 0 and "tier guard" not in out, out
    code, out = _tier(tmp_path, SKIPPING, FAILING)
    assert code == 1 and "tier guard" not in out, out
