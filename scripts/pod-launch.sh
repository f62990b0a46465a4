#!/usr/bin/env bash
# On pod-0: preflight every pod, then run SCRIPT [ARGS…] (or the acceptance suite) on
# all of them through the DeepSpeed launcher. Thin wrapper over `python -m mlenv.pod launch`.
set -euo pipefail
exec "${MLENV_PYTHON:-python3}" -m mlenv.pod launch "$@"
