#!/usr/bin/env bash
# Build the Colab-like environment once: a virtual environment with Colab's Jupyter pins
# (docs/colab_kaggle.md), torch, and nbaccel installed from this checkout the way a user
# installs it on Colab (the "notebook" and "examples" extras), which must upgrade none of the
# pinned packages. Installs the kernel spec "nbaccel-colab" inside the environment; the
# notebook tests drive it with
#   JUPYTER_PATH=<env>/share/jupyter NBACCEL_TEST_KERNEL=nbaccel-colab
# Usage: tests/colab/make_env.sh [ENV_DIR]   (default: .venv-colab in the repository root).
# An environment that is already complete (its stamp matches this script) is kept as it is.
set -euo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "${SCRIPT}")/../.."
ENV_DIR=$(realpath -m "${1:-.venv-colab}")
# The Colab runtime's Jupyter packages (Python 3.11 here as there), and the torch of this repo.
PINS=(
  "ipykernel==6.17.1" "ipython==7.34.0" "ipywidgets==7.7.1" "jupyter-client==6.1.12"
  "tornado==6.3.3" "traitlets==5.7.1" "notebook==6.5.5" "pyzmq==24.0.1"
)
TORCH="torch==2.13.0"
STAMP="${ENV_DIR}/.nbaccel-colab-stamp"
# nbaccel is installed editable: only new pins or new dependencies call for a rebuild.
WANT=$(cat "${SCRIPT}" pyproject.toml | sha256sum)

if [ -f "${STAMP}" ] && [ "$(cat "${STAMP}")" = "${WANT}" ]; then
  echo "== colab env: ${ENV_DIR} is up to date"
  exit 0
fi
echo "== colab env: building ${ENV_DIR}"
rm -rf "${ENV_DIR}"
python -m venv "${ENV_DIR}"
PY="${ENV_DIR}/bin/python"
"${PY}" -m pip install -q --disable-pip-version-check "${TORCH}" "${PINS[@]}"
"${PY}" -m pip freeze --all > "${ENV_DIR}/before.txt"
# What installing nbaccel would change, shown in the log: new packages only.
"${PY}" -m pip install --disable-pip-version-check --dry-run -e ".[notebook,examples]" 2>&1 \
  | grep -E "^(Would install|ERROR)" || true
# What a user runs on Colab (notebooks/*.ipynb's install cell), from this checkout.
"${PY}" -m pip install --disable-pip-version-check -e ".[notebook,examples]" \
  > "${ENV_DIR}/install.log" 2>&1 || { cat "${ENV_DIR}/install.log"; exit 1; }
"${PY}" -m pip freeze --all > "${ENV_DIR}/after.txt"
# Not one pinned package (nor torch) may have changed.
for pin in "${PINS[@]}" "${TORCH}"; do
  name=${pin%%==*}
  before=$(grep -i "^${name}==" "${ENV_DIR}/before.txt" || true)
  after=$(grep -i "^${name}==" "${ENV_DIR}/after.txt" || true)
  if [ "${before}" != "${after}" ]; then
    echo "installing nbaccel changed ${before} into ${after}" >&2
    exit 1
  fi
done
KERNEL_DIR="${ENV_DIR}/share/jupyter/kernels/nbaccel-colab"
mkdir -p "${KERNEL_DIR}"
cat > "${KERNEL_DIR}/kernel.json" <<JSON
{
  "argv": ["${PY}", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
  "display_name": "Python 3 (Colab-like: ipykernel 6.17, IPython 7.34)",
  "language": "python"
}
JSON
"${PY}" -c "import ipykernel, IPython, ipywidgets, jupyter_client, nbaccel; print('== colab env: ipykernel', ipykernel.__version__, 'IPython', IPython.__version__, 'ipywidgets', ipywidgets.__version__, 'jupyter_client', jupyter_client.__version__)"
printf '%s\n' "${WANT}" > "${STAMP}"
