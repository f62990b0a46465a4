#!/usr/bin/env bash
# `make bench-gpu-bundle`: wheels in dist/ that `make bench-gpu` installs on a GPU machine
# with no DeepSpeed and no network (benchmarks/bench_gpu.sh): mlenv, DeepSpeed (built here,
# the version of this venv) and the packages DeepSpeed imports that such a machine may lack,
# each for Python 3.10-3.13 where it is not pure Python. torch, numpy and the NVIDIA
# packages are left out: the GPU machine's own are the ones measured.
# dist/bench-requirements.txt names what to install, pinned.
set -eu
py=${1:?usage: bench_gpu_bundle.sh PYTHON}
cd "$(dirname "$0")/.."
mkdir -p dist
"$py" -m pip wheel -q --no-deps --no-build-isolation -w dist .
ds=$("$py" -c 'import deepspeed; print(deepspeed.__version__)')
"$py" -m pip wheel -q --no-deps --no-build-isolation -w dist "deepspeed==$ds"
# DeepSpeed's requirements, pinned to what this venv has, minus what the GPU machine brings.
"$py" - >dist/bench-requirements.txt <<'PY'
import re
from importlib import metadata

skip = re.compile(r"^(torch|numpy|nvidia-.*|triton)$", re.I)
print(f"deepspeed=={metadata.version('deepspeed')}")
seen = set()
todo = [r for r in metadata.requires("deepspeed") or [] if "extra ==" not in r]
while todo:
    name = re.split(r"[ ;<>=!~\[(]", todo.pop(), maxsplit=1)[0]
    if not name or skip.match(name) or name.lower() in seen:
        continue
    seen.add(name.lower())
    try:
        print(f"{name}=={metadata.version(name)}")
        todo += [r for r in metadata.requires(name) or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        pass
PY
grep -v '^deepspeed==' dist/bench-requirements.txt | while read -r req; do
  "$py" -m pip download -q --no-deps --only-binary=:all: -d dist "$req"
  for v in 3.10 3.11 3.12 3.13; do  # binary packages (pydantic-core…) for the GPU machine's python
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$v" -d dist "$req" 2>/dev/null || true
  done
done
ls dist
