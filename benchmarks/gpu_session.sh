#!/usr/bin/env bash
# Everything the project measures on a GPU, in one command, so a short lease of a GPU
# machine (or a pod) yields all figures at once: the GPU test tier, bench_gpu (matmul
# vs plain torch.matmul, copy bandwidth), bench_training --gpu (ResNet-50 samples/s)
# and the quick and full acceptance profiles through the DeepSpeed launcher on every local GPU.
#
#   bash benchmarks/gpu_session.sh OUTDIR
#
# Wheels in .whl/ (e.g. deepspeed built here with `pip wheel --no-build-isolation`,
# pydantic, hjson) are installed into a private target first when the machine has no
# DeepSpeed; each step has its own time limit and a failing step does not stop the rest.
set -u
out=${1:?usage: gpu_session.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 2
py=${PYTHON:-python3}

if ! "$py" -c 'import deepspeed' 2>/dev/null && compgen -G '.whl/*.whl' >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/mlenv-site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/mlenv-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/mlenv-torch-ext}
unset DS_ACCELERATOR

# Report trees travel as one archive (a lease returns only a few files).
rep=$(mktemp -d)
ngpu=$("$py" -c 'import torch; print(torch.cuda.device_count())')
step() {  # step NAME LIMIT_S CMD...: run, log to OUTDIR/NAME.log, record rc and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS before
  # Temperature and SM clock before each step: a GPU hot from the previous step runs
  # slower, and the figures are only comparable with that in view.
  before=$(nvidia-smi --query-gpu=temperature.gpu,clocks.sm,power.draw --format=csv,noheader 2>/dev/null)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  printf '%-12s rc=%-3s %4ss  before: %s\n' "$name" "$rc" "$((SECONDS - t0))" "$before" | tee -a "$out/summary.txt"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$py" -c 'import torch, deepspeed; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", torch.cuda.nccl.version(), "deepspeed", deepspeed.__version__)'
} >"$out/summary.txt" 2>&1
cat "$out/summary.txt"

step bench-gpu 150 "$py" benchmarks/bench_gpu.py
step bench-train 90 "$py" benchmarks/bench_training.py --gpu
# quick: what `make demo` runs (the CLI, every local GPU); full: the sign-off profile.
step accept-quick 150 "$py" -m mlenv.cli.app acceptance --local --profile quick --report-dir "$rep/acceptance-quick"
step accept-full 150 "$py" -m deepspeed.launcher.runner --num_gpus "$ngpu" --master_port 29517 \
  --module mlenv.acceptance --profile full --report-dir "$rep/acceptance-full"
step gpu-tests 150 "$py" -m pytest -q -p no:cacheprovider tests/gpu --junitxml="$rep/gpu-tests.xml"
tar -czf "$out/reports.tgz" -C "$rep" .
for f in bench-gpu bench-train accept-quick accept-full gpu-tests; do
  echo "== $f"; tail -n 25 "$out/$f.log"
done
cat "$out/summary.txt"
