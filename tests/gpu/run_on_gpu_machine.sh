#!/usr/bin/env bash
# The GPU checks, on a machine with one CUDA GPU and no network, from a copy of the checkout.
#
#   bash tests/gpu/run_on_gpu_machine.sh [tests] [bench] [compile]     (all when none is named)
#
# compile: the GPT benchmark with every subject compiled by inductor (issue 40's first point),
# 2 repetitions a subject (the inductor cache makes the later compilations short).
#
# The machine's Python must already hold torch (CUDA), accelerate, cloudpickle, safetensors,
# PyYAML, tqdm, psutil, numpy, nvidia-ml-py, matplotlib, pytest and pytest-timeout. What it lacks
# for a Jupyter kernel (ipykernel, jupyter_client, ipywidgets, nbclient and their needs) travels
# as wheels in .whl/ (tests/README.md says how to download them); nbaccel itself is installed from
# the checkout without dependencies. Everything printed goes to $OUT/gpu.log (OUT defaults to
# /tmp/nbaccel-gpu); the benchmark's JSON, plot and docs section are copied there too.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/nbaccel-gpu}
mkdir -p "${out}"
exec > >(tee -a "${out}/gpu.log") 2>&1
phases=${*:-tests bench compile}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
started=${SECONDS}

echo "== machine ($(date -u +%FT%TZ)); phases: ${phases}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
"${py}" - <<'EOF'
import platform, sys, torch
print(f"python {platform.python_version()} at {sys.executable}; torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
print(f"device {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}, "
      f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB")
EOF
"${py}" -m pip list 2>/dev/null | grep -i -E "^(accelerate|transformers|cloudpickle|safetensors|pyyaml|tqdm|psutil|numpy|nvidia-ml-py|matplotlib|pytest|pytest-timeout) "

echo "== install"
if compgen -G ".whl/*.whl" > /dev/null; then
  "${py}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/nbaccel-site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/nbaccel-site${PYTHONPATH:+:${PYTHONPATH}}
fi
"${py}" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
"${py}" -c "
import importlib.metadata as m
print(', '.join(f'{n} {m.version(n)}' for n in
      ('nbaccel', 'ipykernel', 'jupyter_client', 'ipywidgets', 'nbclient', 'ipython')))" || exit 1

rc=0
if [[ " ${phases} " == *" tests "* ]]; then
  echo "== tests/gpu"
  timeout --signal=TERM --kill-after=20 330 \
    "${py}" -m pytest tests/gpu -v -s -p no:cacheprovider --durations=0 || rc=1
fi

memory=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
batch=()  # the default model and batch fill an 80 GB GPU; a larger one gets twice the batch
if [ "${memory:-0}" -gt 120000 ]; then batch=(--gpt_batch 8); fi

if [[ " ${phases} " == *" bench "* ]]; then
  echo "== the device's bf16 matrix-product ceiling (8192^3, median of 20 after 5 warm-ups)"
  "${py}" - <<'EOF'
import statistics, torch
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
times = []
for i in range(25):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); a @ b; end.record(); torch.cuda.synchronize()
    if i >= 5:
        times.append(start.elapsed_time(end) / 1000)
print(f"bf16 matmul: {2 * 8192**3 / statistics.median(times) / 1e12:.0f} TFLOP/s")
EOF
  echo "== python -m benchmarks gpt_bf16 ${batch[*]}"
  timeout --signal=TERM --kill-after=20 200 "${py}" -m benchmarks gpt_bf16 "${batch[@]}" || rc=1
  cp benchmarks/results/gpt_bf16.json docs/img/gpt_bf16.png "${out}/" 2>/dev/null
  cp docs/benchmarks.md "${out}/benchmarks.md" 2>/dev/null
fi

if [[ " ${phases} " == *" compile "* ]]; then
  echo "== python -m benchmarks gpt_bf16 --gpt_compile --gpt_reps 2 ${batch[*]}"
  timeout --signal=TERM --kill-after=20 420 \
    "${py}" -m benchmarks gpt_bf16 --gpt_compile --gpt_reps 2 "${batch[@]}" || rc=1
  cp benchmarks/results/gpt_bf16_compiled.json docs/img/gpt_bf16_compiled.png "${out}/" 2>/dev/null
  cp docs/benchmarks.md "${out}/benchmarks.md" 2>/dev/null
fi
echo "== done in $((SECONDS - started)) s, exit ${rc}"
exit "${rc}"
