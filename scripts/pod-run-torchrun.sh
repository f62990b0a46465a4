#!/usr/bin/env bash
# ssh-less path: run in EVERY pod with the same --run-id; torchrun joins the static
# rendezvous at MASTER_ADDR:MASTER_PORT (pod-0). Thin wrapper over `python -m mlenv.pod run-torchrun`.
set -euo pipefail
exec "${MLENV_PYTHON:-python3}" -m mlenv.pod run-torchrun "$@"
