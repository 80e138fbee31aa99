#!/usr/bin/env bash
# Builds the colab tier's environment once per machine: a virtual environment with Colab's
# Jupyter pins (docs/colab_kaggle.md) and torch, into which nbaccel is installed the way a user
# installs it on Colab (the "notebook" and "examples" extras); that install must upgrade none
# of the pinned packages, or the build fails. nbaccel itself is then removed again: the tier
# puts the checkout under test on PYTHONPATH, so one environment serves every clone.
# It lies outside the repository (NBACCEL_COLAB_VENV moves it) and is kept while its key is
# unchanged: this script, the Python version, and nbaccel's dependencies and those two extras
# as pyproject.toml declares them. A venv left half-built is built again.
# Installs the kernel spec "nbaccel-colab" inside the environment; the tier drives it with
#   JUPYTER_PATH=<env>/share/jupyter NBACCEL_TEST_KERNEL=nbaccel-colab PYTHONPATH=<checkout>
# Usage: tests/colab/make_env.sh   Prints the environment's folder on stdout (the rest: stderr).
set -euo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "${SCRIPT}")/../.."
VENV="${NBACCEL_COLAB_VENV:-${HOME}/.cache/nbaccel/colab-venv}"
# The Colab runtime's Jupyter packages (Python 3.11 here as there), and the torch of this repo.
PINS=(
  "ipykernel==6.17.1" "ipython==7.34.0" "ipywidgets==7.7.1" "jupyter-client==6.1.12"
  "tornado==6.3.3" "traitlets==5.7.1" "notebook==6.5.5" "pyzmq==24.0.1"
)
TORCH="torch==2.13.0"
STAMP="${VENV}/.nbaccel-colab-stamp"
DECLARED=$(python - <<'PY'
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
print(sorted(project["dependencies"]), sorted(extras["notebook"]), sorted(extras["examples"]))
PY
)
WANT=$(printf '%s\n' "$(cat "${SCRIPT}")" "$(python -V)" "${DECLARED}" | sha256sum)

mkdir -p "$(dirname "${VENV}")"
exec 9>"${VENV}.lock"  # two runs on one machine: the second waits for the first's build
flock -w 1800 9

if [ -f "${STAMP}" ] && [ "$(cat "${STAMP}")" = "${WANT}" ] && "${VENV}/bin/python" -c ""; then
  echo "== colab env: reusing ${VENV}" >&2
  echo "${VENV}"
  exit 0
fi
echo "== colab env: building ${VENV}" >&2
start=${SECONDS}
rm -rf "${VENV}"
python -m venv "${VENV}"
PY="${VENV}/bin/python"
pip_q() { "${PY}" -m pip --disable-pip-version-check "$@" >&2; }
pip_q install -q "${TORCH}" "${PINS[@]}"
"${PY}" -m pip freeze --all > "${VENV}/before.txt"
# What installing nbaccel would change, shown in the log: new packages only.
"${PY}" -m pip install --disable-pip-version-check --dry-run -e ".[notebook,examples]" 2>&1 \
  | grep -E "^(Would install|ERROR)" >&2 || true
# What a user runs on Colab (notebooks/*.ipynb's install cell), from this checkout.
"${PY}" -m pip install --disable-pip-version-check -e ".[notebook,examples]" \
  > "${VENV}/install.log" 2>&1 || { cat "${VENV}/install.log" >&2; exit 1; }
"${PY}" -m pip freeze --all > "${VENV}/after.txt"
# Not one pinned package (nor torch) may have changed.
for pin in "${PINS[@]}" "${TORCH}"; do
  name=${pin%%==*}
  before=$(grep -i "^${name}==" "${VENV}/before.txt" || true)
  after=$(grep -i "^${name}==" "${VENV}/after.txt" || true)
  if [ "${before}" != "${after}" ]; then
    echo "installing nbaccel changed ${before} into ${after}" >&2
    exit 1
  fi
done
pip_q uninstall -q -y nbaccel  # the tier imports the checkout under test (PYTHONPATH)
KERNEL_DIR="${VENV}/share/jupyter/kernels/nbaccel-colab"
mkdir -p "${KERNEL_DIR}"
cat > "${KERNEL_DIR}/kernel.json" <<JSON
{
  "argv": ["${PY}", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
  "display_name": "Python 3 (Colab-like: ipykernel 6.17, IPython 7.34)",
  "language": "python"
}
JSON
"${PY}" -c "import ipykernel, IPython, ipywidgets, jupyter_client; print('== colab env: ipykernel', ipykernel.__version__, 'IPython', IPython.__version__, 'ipywidgets', ipywidgets.__version__, 'jupyter_client', jupyter_client.__version__)" >&2
printf '%s\n' "${WANT}" > "${STAMP}"  # last: a half-built venv is never reused
echo "== colab env: built in $((SECONDS - start))s" >&2
echo "${VENV}"
