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
    "${TIER_PYTHON:-python}" -m pytest "$@" -q -p no:cacheprovider --durations=5 || rc=$?
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
tier browser 240 tests/browser
# the xla tier: the real torch_xla 2.9 on its CPU device, with torch 2.9, in a venv of its own
# built once per machine by tests/xla/make_env.sh (outside the repository; reused afterwards)
xla_python=$(timeout 1500 bash tests/xla/make_env.sh)
PJRT_DEVICE=CPU PYTHONPATH="${PWD}" TIER_PYTHON="${xla_python}" tier xla 300 tests/xla
if compgen -G "tests/gpu/test_*.py" > /dev/null; then
  tier gpu 300 tests/gpu
fi
echo "all tiers passed"
