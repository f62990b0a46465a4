#!/usr/bin/env bash
# Run on pod-0 (after `make shell`):
#   ./launch_deepspeed.sh                      # the acceptance suite on every GPU of every pod
#   ./launch_deepspeed.sh train_multi_node.py  # your script, same launcher
#   ./launch_deepspeed.sh train_multi_node.py ds_config.json [HOSTFILE] [ARGS…]
#                                              # upstream ml-dev-env's form: the script gets
#                                              # --deepspeed --deepspeed_config ds_config.json
# Launch options (--deadline, --run-id, --profile …) come first. The positional rule
# (an existing *.json right after the script is the DeepSpeed config; then an existing
# non-.py/.json file that parses as a hostfile is the hostfile) is in docs/pod-launch.md;
# scripts/pod-launch.sh passes every word through untouched.
# Everything else (preflight, hostfile, ssh, exit codes) is `python -m mlenv.pod launch`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec "${MLENV_PYTHON:-python3}" -m mlenv.pod launch --upstream-form "$@"
