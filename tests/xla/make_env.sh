#!/usr/bin/env bash
# Builds the xla test tier's own virtual environment: torch 2.9.0 with the real torch-xla 2.9.0
# (the newest pair on the package index; torch 2.9.0 comes as its CUDA build, with ~3 GB of
# nvidia-* wheels to download and ~7 GB installed), nbaccel's base dependencies, the test
# runner and a Jupyter kernel. uv, installed into the venv first, installs the rest: it
# downloads the wheels in parallel and unpacks them by hard links from its cache, which halves
# a cold build against pip's one-by-one download and copy; where uv cannot be installed, pip
# does it all. The venv is kept apart from the main environment (whose torch is another
# release) in a fixed path outside the repository, so that later runs on the same machine
# reuse it. A venv left half-built, or built for another Python or torch pair, is built again;
# a change to the light packages only installs those.
# nbaccel itself is not installed there: the tier puts the checkout on PYTHONPATH.
# Prints the venv's python on stdout (everything else goes to stderr).
set -euo pipefail

VENV="${NBACCEL_XLA_VENV:-${HOME}/.cache/nbaccel/xla-venv}"
HEAVY=("torch==2.9.0" "torch-xla==2.9.0")
LIGHT=(
  "cloudpickle>=2.0" "safetensors>=0.4" "PyYAML>=6.0" "tqdm>=4.60" "psutil>=5.9" "numpy>=1.23"
  "pytest>=7.4" "pytest-timeout>=2.2" "ipykernel>=6.20" "jupyter_client>=8.0"
)
UV="uv>=0.4,<1"  # the installer (into the venv itself); not a package the tests use
HEAVY_STAMP="${VENV}/.nbaccel-complete"
LIGHT_STAMP="${VENV}/.nbaccel-light"
WANT_HEAVY="$(python -c 'import sys; print(sys.version.split()[0])') ${HEAVY[*]}"
WANT_LIGHT="${LIGHT[*]}"

quiet_pip() {  # pip's notes about this machine's local package folders are left out of the log
  "${VENV}/bin/python" -m pip "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
}

install() {
  if [ -x "${VENV}/bin/uv" ]; then
    "${VENV}/bin/uv" pip install --quiet --python "${VENV}/bin/python" "$@" >&2
  else
    quiet_pip install --quiet --no-input "$@"
  fi
}

mkdir -p "$(dirname "${VENV}")"
exec 9>"${VENV}.lock"  # two runs on one machine: the second waits for the first's build
flock -w 1800 9

start=${SECONDS}
if [ -f "${HEAVY_STAMP}" ] && [ "$(cat "${HEAVY_STAMP}")" = "${WANT_HEAVY}" ] \
  && "${VENV}/bin/python" -c ""; then
  echo "xla venv: reusing ${VENV}" >&2
else
  echo "xla venv: building ${VENV} (torch 2.9.0 + torch-xla 2.9.0, several minutes)" >&2
  rm -rf "${VENV}"
  python -m venv "${VENV}"
  quiet_pip install --quiet --no-input "${UV}" \
    || echo "xla venv: uv could not be installed; pip installs (slower)" >&2
  install "${HEAVY[@]}" "${LIGHT[@]}"
  printf '%s' "${WANT_LIGHT}" > "${LIGHT_STAMP}"
  printf '%s' "${WANT_HEAVY}" > "${HEAVY_STAMP}"  # last: a half-built venv is never reused
fi
if [ ! -f "${LIGHT_STAMP}" ] || [ "$(cat "${LIGHT_STAMP}")" != "${WANT_LIGHT}" ]; then
  echo "xla venv: installing ${LIGHT[*]}" >&2
  install "${LIGHT[@]}"
  printf '%s' "${WANT_LIGHT}" > "${LIGHT_STAMP}"
fi
echo "xla venv: ready after $((SECONDS - start))s" >&2
echo "${VENV}/bin/python"
