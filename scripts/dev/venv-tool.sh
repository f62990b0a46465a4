#!/bin/sh
# The pre-commit hooks' entry: run this checkout's .venv/bin/TOOL. In a clone without the
# venv every hook failed with "Executable .venv/bin/ruff not found" and no hint; now each
# says what to run.
tool=".venv/bin/$1"
if [ ! -x "$tool" ]; then
  echo "pre-commit: $tool is missing: run \`make venv\` (the hooks use the venv's ruff and mypy)" >&2
  exit 1
fi
shift
exec "$tool" "$@"
