"""How much of Accelerate's own test code passes against nbaccel with only the imports changed.

A developer measurement, not a speed benchmark and not part of CI. It copies the test files of
an Accelerate source tree into a temporary directory, runs them with pytest on CPU against
Accelerate itself (the baseline), then rewrites the imports (``from accelerate...`` and
``import accelerate...`` lines become ``nbaccel``; nothing else is touched) and runs them
again against nbaccel. ``accelerate.test_utils`` (Accelerate's testing helpers:
``RegressionModel``, the ``require_*`` decorators, ``AccelerateTestCase``...) is either
rewritten to ``nbaccel.test_utils`` as well or left pointing at Accelerate's helpers;
``--test-utils both`` measures both ways.

Comparable tests are the ones that Accelerate runs here (passed or failed, not skipped); the
score is how many of them pass against nbaccel. Needs ``accelerate``, ``pytest``,
``pytest-timeout`` and ``parameterized`` (the tests import it) in the interpreter.

    git -C ACCELERATE_CHECKOUT archive HEAD tests | tar -x -C /tmp/acc
    python -m benchmarks.accelerate_compat --tests /tmp/acc/tests
    python -m benchmarks.accelerate_compat --repo /path/to/accelerate.git --rev v1.15.0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from nbaccel.environment import deepspeed_ops_folder

__all__ = ["FILES", "LEFT_OUT", "rewrite_imports", "run_suite"]

ROOT = Path(__file__).resolve().parent.parent

# Accelerate's test files that exercise the public API on CPU.
FILES = (
    "test_accelerator.py",
    "test_compile.py",
    "test_cpu.py",
    "test_data_loader.py",
    "test_dataclasses.py",
    "test_grad_sync.py",
    "test_kwargs_handlers.py",
    "test_logging.py",
    "test_memory_utils.py",
    "test_metrics.py",
    "test_multidevice.py",
    "test_optimizer.py",
    "test_scheduler.py",
    "test_state_checkpointing.py",
    "test_tracking.py",
    "test_utils.py",
)

# The rest of Accelerate's tests, and why they are not measured.
# Accelerate's DeepSpeed tests (``--files deepspeed``): every test there needs a GPU (its
# classes are marked require_non_cpu / require_multi_device), so here they count what each
# library runs and skips rather than a score.
DEEPSPEED_FILES = (
    "deepspeed/test_deepspeed.py",
    "deepspeed/test_deepspeed_gradient_accumulation.py",
    "deepspeed/test_deepspeed_multiple_model.py",
)

LEFT_OUT = {
    "deepspeed/": "GPU-only (measured apart: --files deepspeed)",
    "fsdp/": "GPU-only (every FSDP test there needs CUDA devices)",
    "tp/": "tensor parallelism on GPUs",
    "test_big_modeling.py": "big-model inference (device maps, offload)",
    "test_hooks.py": "big-model inference hooks",
    "test_modeling_utils.py": "big-model inference utilities",
    "test_offload.py": "big-model inference offload",
    "test_quantization.py": "bitsandbytes quantisation on GPUs",
    "test_load_checkpoint_and_dispatch_with_broadcast.py": "big-model inference",
    "test_fp8.py": "fp8 on GPUs",
    "test_tpu.py": "TPU only",
    "test_sagemaker.py": "SageMaker launcher internals",
    "test_cli.py": "Accelerate's own command line (nbaccel's CLI is tested on its own)",
    "test_launch.py": "Accelerate's launcher internals",
    "test_examples.py": "Accelerate's example scripts",
    "test_imports.py": "Accelerate's import-time internals",
}

_IMPORT = re.compile(r"^(\s*)(from|import)(\s+)accelerate(?=[\s.,]|$)")
_TEST_UTILS = re.compile(r"^(\s*)(from|import)(\s+)accelerate\.test_utils")


def rewrite_imports(source: str, keep_test_utils: bool) -> str:
    """``source`` with every ``accelerate`` import line importing ``nbaccel`` instead.

    With ``keep_test_utils``, imports of ``accelerate.test_utils`` are left as they are.
    """
    lines = []
    for line in source.splitlines(keepends=True):
        if not (keep_test_utils and _TEST_UTILS.match(line)):
            line = _IMPORT.sub(r"\1\2\3nbaccel", line)
        lines.append(line)
    return "".join(lines)


def _copy_tests(source: Path, target: Path, rewrite: str | None) -> None:
    """Copy the test tree; rewrite imports unless ``rewrite`` is None ("nbaccel"/"accelerate"
    says where ``accelerate.test_utils`` goes)."""
    shutil.copytree(source, target / "tests")
    if rewrite is None:
        return
    for path in (target / "tests").rglob("*.py"):
        text = path.read_text()
        path.write_text(rewrite_imports(text, keep_test_utils=rewrite == "accelerate"))


def _outcomes(report: Path) -> dict[str, str]:
    """Test id -> passed / failed / skipped, from a JUnit XML report."""
    results: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = (case.get("classname") or case.get("name") or "").split(".")
        files = [i for i, part in enumerate(parts) if part.startswith("test_")]
        if not files:
            continue
        where = files[0]
        test_id = "::".join([parts[where] + ".py", *parts[where + 1 :], case.get("name") or ""])
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                results[test_id + "#message"] = (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                outcome = "skipped"
        if results.get(test_id) != "failed":
            results[test_id] = outcome
    return results


def run_suite(
    tests: Path,
    subject: str,
    timeout: int,
    pythonpath: str | None,
    files: tuple[str, ...] = FILES,
) -> dict[str, str]:
    """Run FILES of ``tests`` (a copy of Accelerate's tests/) against ``subject``.

    ``subject`` is "accelerate" (as written), "nbaccel" (imports rewritten, test_utils too) or
    "nbaccel+accelerate.test_utils" (imports rewritten, Accelerate's helpers kept); with
    " per test" after it, a name nbaccel lacks fails only the tests that use it
    (:mod:`benchmarks.compat_placeholders`) instead of every test of its file.
    """
    base, _, per_test = subject.partition(" ")
    rewrite = {"accelerate": None, "nbaccel": "nbaccel"}.get(base, "accelerate")
    with tempfile.TemporaryDirectory(prefix="accelerate-compat-") as tmp:
        work = Path(tmp)
        _copy_tests(tests, work, rewrite)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["HOME"] = str(work)  # no user config file reaches the tests
        # ... but DeepSpeed's compiled ops stay where they were built (else: minutes of gcc)
        env.setdefault("TORCH_EXTENSIONS_DIR", deepspeed_ops_folder())
        present = [f"tests/{name}" for name in files if (work / "tests" / name).exists()]
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            *(["-p", "benchmarks.compat_placeholders"] if per_test else []),
            "--continue-on-collection-errors", f"--timeout={timeout}",
            f"--junitxml={work / 'report.xml'}", *present,
        ]  # fmt: skip
        log = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        report = work / "report.xml"
        if not report.exists():
            raise RuntimeError(f"pytest wrote no report for {subject}:\n{log.stdout[-3000:]}")
        return _outcomes(report)


def _counts(outcomes: dict[str, str]) -> str:
    """``N passed, N failed, N skipped`` of one subject's outcomes."""
    seen = Counter(o for t, o in outcomes.items() if "#" not in t)
    return f"{seen['passed']} passed, {seen['failed']} failed, {seen['skipped']} skipped"


def _table(
    results: dict[str, dict[str, str]], files: tuple[str, ...] = FILES
) -> tuple[list[str], dict[str, int]]:
    """Per-file lines and totals; comparable = tests Accelerate runs (not skipped)."""
    base = results["accelerate"]
    comparable = [t for t, o in base.items() if "#" not in t and o != "skipped"]
    subjects = list(results)
    lines = ["file".ljust(30) + "".join(s.rjust(44) for s in subjects)]
    totals: Counter[str] = Counter()
    for name in files:
        ids = [t for t in comparable if t.startswith(name.rpartition("/")[2] + "::")]
        if not ids:
            continue
        cells = []
        for subject in subjects:
            passed = sum(results[subject].get(t) == "passed" for t in ids)
            totals[subject] += passed
            cells.append(f"{passed}/{len(ids)} passed".rjust(44))
        lines.append(name.ljust(30) + "".join(cells))
    totals["comparable"] = len(comparable)
    return lines, dict(totals)


def _failures(results: dict[str, dict[str, str]], subject: str) -> list[str]:
    base, mine = results["accelerate"], results[subject]
    out = []
    for test_id, outcome in sorted(base.items()):
        if "#" in test_id or outcome != "passed" or mine.get(test_id) == "passed":
            continue
        message = mine.get(test_id + "#message", mine.get(test_id, "not run")).splitlines()
        out.append(f"  {test_id}: {message[0] if message else ''}")
    return out


def _source(options: argparse.Namespace, scratch: Path) -> Path:
    if options.tests:
        return Path(options.tests).resolve()
    archive = subprocess.run(
        ["git", "--git-dir", options.repo, "archive", options.rev, "tests"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive.stdout, check=True)
    return scratch / "tests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--tests", help="a copy of Accelerate's tests/ directory")
    where.add_argument("--repo", help="an Accelerate git directory (with --rev)")
    parser.add_argument("--rev", default="HEAD", help="the commit or tag to take tests/ from")
    parser.add_argument("--test-utils", choices=("nbaccel", "accelerate", "both"), default="both")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per test")
    parser.add_argument("--nbaccel-path", default=str(ROOT), help="the nbaccel tree to measure")
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("--baseline", help="take Accelerate's outcomes from an earlier --json")
    parser.add_argument("--failures", action="store_true", help="list what nbaccel fails")
    parser.add_argument(
        "--files",
        default="api",
        help="'api' (Accelerate's CPU test files, the default), 'deepspeed', or test files of "
        "tests/ separated by commas",
    )
    parser.add_argument(
        "--per-test",
        action="store_true",
        help="also run each nbaccel subject with missing names failing only their own tests",
    )
    options = parser.parse_args(argv)
    named = {"api": FILES, "deepspeed": DEEPSPEED_FILES}
    files = named.get(options.files) or tuple(options.files.split(","))
    subjects = ["accelerate"]
    if options.test_utils in ("nbaccel", "both"):
        subjects.append("nbaccel")
    if options.test_utils in ("accelerate", "both"):
        subjects.append("nbaccel+accelerate.test_utils")
    if options.per_test:
        subjects += [f"{s} per test" for s in subjects[1:]]
    with tempfile.TemporaryDirectory(prefix="accelerate-tests-") as scratch:
        tests = _source(options, Path(scratch))
        results = {}
        if options.baseline:
            results["accelerate"] = json.loads(Path(options.baseline).read_text())["accelerate"]
        for subject in subjects:
            if subject in results:
                continue
            path = None if subject == "accelerate" else options.nbaccel_path
            results[subject] = run_suite(tests, subject, options.timeout, path, files)
            print(f"ran {subject}: {_counts(results[subject])}", flush=True)
    lines, totals = _table(results, files)
    print("\n".join(lines))
    for subject in subjects:
        print(f"{subject}: {totals.get(subject, 0)} of {totals['comparable']} comparable passed")
    if options.failures:
        for subject in subjects[1:]:
            print(f"\nPassed by Accelerate, not by {subject}:")
            print("\n".join(_failures(results, subject)))
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
