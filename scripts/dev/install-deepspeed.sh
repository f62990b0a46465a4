#!/usr/bin/env bash
# Install DeepSpeed into a venv with its CPU op (deepspeed_shm_comm) compiled in, from a
# wheel built once per machine and kept outside the checkout, keyed by what the op links
# against: DeepSpeed's version, torch's, the Python ABI. Building it (setup.py compiling
# the op) was most of `make venv`'s 5 1/2 minutes on a warm pip cache (docs/benchmarks.md);
# pip's own wheel cache cannot hold it: a DeepSpeed wheel pip built earlier without the op
# would be reused, so the build runs with --no-cache-dir.
#
# usage: install-deepspeed.sh PYTHON DEEPSPEED_PIN [--force-reinstall]
# The Makefile checks the result (`python -m mlenv.acceptance.checks.dsops --installed`)
# and rebuilds without the cache when the op is missing, so a bad cached wheel costs one
# rebuild, never a venv without the op.
set -euo pipefail
py=$1 pin=$2
shift 2
export DS_BUILD_OPS=0 DS_BUILD_SHM_COMM=1 DS_ACCELERATOR=cpu
key=$("$py" - "$pin" <<'PY'
import re, sys, sysconfig
import torch
pin = sys.argv[1]
print(re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{pin}-torch{torch.__version__}-{sysconfig.get_config_var('SOABI')}-shm"))
PY
)
cache=${MLENV_WHEEL_CACHE:-$HOME/.cache/mlenv/wheels}/$key
if ! compgen -G "$cache/deepspeed-*.whl" >/dev/null; then
    echo "building $pin with its CPU op into $cache (once per machine)"
    mkdir -p "${cache%/*}"
    tmp=$(mktemp -d "${cache%/*}/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$py" -m pip wheel -q --no-cache-dir --no-build-isolation --no-deps -w "$tmp" "$pin"
    # whole or not at all: a build cut short leaves no wheel behind; a make beside this one
    # that got there first keeps its folder (-T: never moved into it)
    mv -T "$tmp" "$cache" 2>/dev/null || true
fi
"$py" -m pip install -q "$@" "$cache"/deepspeed-*.whl
