#!/usr/bin/env bash
# Builds the xla test tier's own virtual environment: torch 2.9.0 with the real torch-xla 2.9.0
# (the newest pair on the package index; torch 2.9.0 comes as its CUDA build, ~7 GB), nbaccel's
# base dependencies and the test runner. It is kept apart from the main environment (whose
# torch is another release) in a fixed path outside the repository, so that later runs on the
# same machine reuse it; a venv left half-built, or built from another list, is built again.
# nbaccel itself is not installed there: the tier puts the checkout on PYTHONPATH.
# Prints the venv's python on stdout (everything else goes to stderr).
set -euo pipefail

VENV="${NBACCEL_XLA_VENV:-${HOME}/.cache/nbaccel/xla-venv}"
REQUIREMENTS=(
  "torch==2.9.0" "torch-xla==2.9.0"
  "cloudpickle>=2.0" "safetensors>=0.4" "PyYAML>=6.0" "tqdm>=4.60" "psutil>=5.9" "numpy>=1.23"
  "pytest>=7.4" "pytest-timeout>=2.2"
)
STAMP="${VENV}/.nbaccel-complete"
WANT="$(python -c 'import sys; print(sys.version.split()[0])') ${REQUIREMENTS[*]}"

mkdir -p "$(dirname "${VENV}")"
exec 9>"${VENV}.lock"  # two runs on one machine: the second waits for the first's build
flock -w 1800 9

if [ -f "${STAMP}" ] && [ "$(cat "${STAMP}")" = "${WANT}" ] && "${VENV}/bin/python" -c ""; then
  echo "xla venv: reusing ${VENV}" >&2
else
  echo "xla venv: building ${VENV} (torch 2.9.0 + torch-xla 2.9.0, a few minutes)" >&2
  start=${SECONDS}
  rm -rf "${VENV}"
  python -m venv "${VENV}"
  # pip's notes about this machine's local package folders are left out of the log
  "${VENV}/bin/python" -m pip install --quiet --no-input "${REQUIREMENTS[@]}" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
  printf '%s' "${WANT}" > "${STAMP}"  # last: an interrupted build is never taken as complete
  echo "xla venv: built in $((SECONDS - start))s" >&2
fi
echo "${VENV}/bin/python"
