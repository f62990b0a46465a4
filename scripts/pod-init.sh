#!/usr/bin/env bash
# Container entry point of every StatefulSet pod: prepare the pod (rank, hostfile,
# .deepspeed_env, RDMA checks, ssh) and keep sshd in the foreground as the main process.
# All logic lives in `python -m mlenv.pod init`; extra flags are passed through.
set -euo pipefail
# NCCL pins memory in RDMA mode: raise the soft limit to the hard one when we can.
ulimit -l "$(ulimit -H -l)" 2>/dev/null || true
exec "${MLENV_PYTHON:-python3}" -m mlenv.pod init --foreground "$@"
