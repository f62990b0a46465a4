#!/usr/bin/env bash
# `make bench-gpu` on any machine: this machine's python and torch, no venv, no network.
# When DeepSpeed is not importable and dist/ holds wheels (`make bench-gpu-bundle` on the
# development machine, carried along), they are installed into a private temporary
# target first and put on PYTHONPATH; the checkout itself comes first on it, so the code
# measured is the code here.
#
#   bash benchmarks/bench_gpu.sh [bench_gpu.py arguments...]     (PYTHON=... to pick the python)
set -u
cd "$(dirname "$0")/.." || exit 2
py=${PYTHON:-python3}
site=""
if ! "$py" -c 'import deepspeed' >/dev/null 2>&1 && [ -f dist/bench-requirements.txt ]; then
  site=$(mktemp -d "${TMPDIR:-/tmp}/mlenv-bench-site.XXXXXX") || exit 3
  trap 'rm -rf -- "$site"' EXIT
  # --no-deps: the machine's own torch (and numpy) stay the ones measured; the names come
  # from dist/bench-requirements.txt, and pip picks each one's wheel for this python.
  "$py" -m pip install -q --no-index --find-links dist --no-deps --no-compile --no-cache-dir --target "$site" \
    -r dist/bench-requirements.txt || exit 3
fi
export PYTHONPATH=$PWD${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# The Makefile exports DS_ACCELERATOR=cpu for the CPU venv; on a GPU DeepSpeed must find CUDA.
case " $* " in *" --cpu "*) export DS_ACCELERATOR=cpu ;; *) unset DS_ACCELERATOR ;; esac
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-${TMPDIR:-/tmp}/mlenv-torch-ext}
"$py" benchmarks/bench_gpu.py "$@"
