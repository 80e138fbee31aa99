#!/usr/bin/env bash
# The project's test command: lint, type-check, then each test tier under its own time budget.
# README.md gives it; .ci/run calls it. Any failure, any tier that runs no test (none collected,
# or every test skipped: tests/tier_guard.py), or any tier past its budget fails the whole run;
# only a tier declared optional on this machine, with its reason, may pass having run none.
set -euo pipefail
cd "$(dirname "$0")/.."

export PYTHONUNBUFFERED=1
unset NBACCEL_TIER_OPTIONAL  # a tier is optional only where this script says so, below
unset OPENBLAS_CORETYPE_OVERRIDE 2>/dev/null || true

echo "== ruff"
python -m ruff check nbaccel tests benchmarks
python -m ruff format --check nbaccel tests benchmarks
echo "== mypy"
python -m mypy
echo "== import contracts (pyproject.toml's [tool.importlinter])"
python -c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"

# tier NAME BUDGET_SECONDS PATH...; `NBACCEL_TIER_OPTIONAL=<reason> tier ...` declares the tier
# optional on this machine: it passes even when every test is skipped (tests/tier_guard.py)
tier() {
  local name=$1 budget=$2
  shift 2
  echo "== tier ${name} (budget ${budget}s)"
  if [ -n "${NBACCEL_TIER_OPTIONAL:-}" ]; then
    echo "${name} tier: optional here: ${NBACCEL_TIER_OPTIONAL}"
  fi
  local start=$SECONDS rc=0
  timeout --signal=TERM --kill-after=30 "${budget}" "${TIER_PYTHON:-python}" -m pytest \
    -p tests.tier_guard -p tests.tier_term "$@" -q -p no:cacheprovider --durations=5 || rc=$?
  echo "== tier ${name}: exit ${rc} after $((SECONDS - start))s"
  if [ "${rc}" -eq 124 ]; then
    echo "tier ${name} ran past its budget of ${budget}s" >&2
  elif [ "${rc}" -eq 5 ]; then
    echo "tier ${name} ran no test (none collected, or every test skipped)" >&2
  fi
  return "${rc}"
}

# What the "colab" tier runs: the launcher, the guard, the dashboard's Stop, fork safety, the
# notebooks of the launcher and of the widgets (ipywidgets 7 there), and the worker pool with
# its magics (IPython 7 there).
COLAB_TESTS=(
  tests/notebook/test_kernel_helpers.py
  tests/notebook/test_fork_warnings_kernel.py
  tests/notebook/test_dashboard_stop_kernel.py
  tests/notebook/test_guard_kernel.py
  tests/notebook/test_launcher_kernel_guard.py
  tests/notebook/test_launcher_kernel.py
  "tests/notebook/test_notebooks.py::test_01_quickstart"
  "tests/notebook/test_notebooks.py::test_07_config_panel"
  tests/pool/test_pool_kernel.py
  tests/pool/test_magics_kernel.py
)

# DeepSpeed compiles its CPU ops (communication, CPU Adam and Adagrad) on first use, into
# ~/.cache/torch_extensions: here, once per machine, so that no test pays for it (later runs
# find them built and load them in a second).
echo "== DeepSpeed's CPU ops"
timeout 900 python -c "from nbaccel.deepspeed import prebuild_ops; print(*prebuild_ops())"
tier unit 300 tests/unit
tier multiprocess 900 tests/multiprocess
tier notebook 900 tests/notebook
# the persistent worker pool (WorkerPool, the %nbaccel magics): real processes and kernels
tier pool 300 tests/pool
# The notebook tests again, against the kernel of a Colab-like virtual environment (Colab's
# Jupyter pins: docs/colab_kaggle.md), built once per machine by tests/colab/make_env.sh
# (outside the repository; reused while its pins hold); the checkout is on its PYTHONPATH.
colab_venv=$(timeout 900 bash tests/colab/make_env.sh)
(
  export JUPYTER_PATH="${colab_venv}/share/jupyter" NBACCEL_TEST_KERNEL=nbaccel-colab
  export PYTHONPATH="${PWD}"
  tier colab 480 "${COLAB_TESTS[@]}"
)
tier faults 300 tests/faults
tier multinode 300 tests/multinode
# one notebook, many machines: a login node and two compute nodes (network namespaces) running
# a real sshd and a real SLURM; tests/hosts/install.sh installs the daemons once per machine
timeout 600 bash tests/hosts/install.sh
# The browser and xla tiers share nothing with the hosts bed and need little of the machine
# while the bed's tests mostly wait on their hosts: they run beside it, each into a log of its
# own that is shown once it ended; any of the three failing fails the run.
# The xla tier: the real torch_xla 2.9 on its CPU device, with torch 2.9, in a venv of its own
# built once per machine by tests/xla/make_env.sh (outside the repository; reused afterwards).
xla_python=$(timeout 900 bash tests/xla/make_env.sh)
beside=$(mktemp -d)
tier browser 240 tests/browser > "${beside}/browser.log" 2>&1 &
browser_pid=$!
PJRT_DEVICE=CPU PYTHONPATH="${PWD}" TIER_PYTHON="${xla_python}" tier xla 300 tests/xla \
  > "${beside}/xla.log" 2>&1 &
xla_pid=$!
hosts_rc=0
tier hosts 420 tests/hosts -m hosts || hosts_rc=$?
browser_rc=0
wait "${browser_pid}" || browser_rc=$?
cat "${beside}/browser.log"
xla_rc=0
wait "${xla_pid}" || xla_rc=$?
cat "${beside}/xla.log"
rm -rf "${beside}"
if [ "${hosts_rc}" -ne 0 ] || [ "${browser_rc}" -ne 0 ] || [ "${xla_rc}" -ne 0 ]; then
  echo "tiers failed: hosts ${hosts_rc}, browser ${browser_rc}, xla ${xla_rc}" >&2
  exit 1
fi
# one notebook driving a Ray cluster: a head and two nodes (real `ray start` daemons, each in a
# network namespace of its own), the kernel a driver on the head (tests/ray/README.md)
tier ray 420 tests/ray -m ray
if python -c "import sys; from nbaccel.environment import cuda_device_count as n; sys.exit(n() == 0)"; then
  tier gpu 900 tests/gpu
else  # no CUDA GPU here: every test of the tier is skipped, which may pass here only
  NBACCEL_TIER_OPTIONAL="no CUDA device" tier gpu 900 tests/gpu
fi
echo "all tiers passed"
