#!/usr/bin/env bash
# Run on pod-0 (after `make shell`):
#   ./launch_deepspeed.sh                      # the acceptance suite on every GPU of every pod
#   ./launch_deepspeed.sh train_multi_node.py  # your script, same launcher
# Everything else (preflight, hostfile, ssh, exit codes) is `python -m mlenv.pod launch`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec "${MLENV_PYTHON:-python3}" -m mlenv.pod launch "$@"
