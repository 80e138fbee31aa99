#!/usr/bin/env bash
# The project's test command: lint, type-check, then each test tier under its own time budget.
# README.md gives it; .ci/run calls it. Any failure, any tier that runs no test, or any tier
# past its budget fails the whole run.
set -euo pipefail
cd "$(dirname "$0")/.."

export PYTHONUNBUFFERED=1
unset OPENBLAS_CORETYPE_OVERRIDE 2>/dev/null || true

echo "== ruff"
python -m ruff check nbaccel tests
python -m ruff format --check nbaccel tests
echo "== mypy"
python -m mypy

tier() {  # tier NAME BUDGET_SECONDS PATH...
  local name=$1 budget=$2
  shift 2
  echo "== tier ${name} (budget ${budget}s)"
  local start=$SECONDS rc=0
  timeout --signal=TERM --kill-after=30 "${budget}" \
    python -m pytest "$@" -q -p no:cacheprovider --durations=5 || rc=$?
  echo "== tier ${name}: exit ${rc} after $((SECONDS - start))s"
  if [ "${rc}" -eq 124 ]; then
    echo "tier ${name} ran past its budget of ${budget}s" >&2
  elif [ "${rc}" -eq 5 ]; then
    echo "tier ${name} ran no test" >&2
  fi
  return "${rc}"
}

tier unit 300 tests/unit
tier multiprocess 600 tests/multiprocess
tier notebook 600 tests/notebook
tier faults 300 tests/faults
tier multinode 300 tests/multinode
tier browser 240 tests/browser
if python -c "import sys; from nbaccel.environment import cuda_device_count as n; sys.exit(n() == 0)"; then
  tier gpu 900 tests/gpu
else  # no CUDA GPU here: the tier is only collected (each test would be skipped)
  echo "== tier gpu: not run (no CUDA GPU); collected:"
  python -m pytest tests/gpu -q -p no:cacheprovider --collect-only | tail -n 1
fi
echo "all tiers passed"
