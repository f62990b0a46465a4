"""``python -m mlenv`` is the same as the ``mlenv`` console script."""

import sys

try:
    from mlenv.cli.app import main
except ModuleNotFoundError as e:
    if (e.name or "mlenv").partition(".")[0] == "mlenv":
        raise
    # python3 -m mlenv in a checkout, outside any install: one line, not a traceback
    sys.stderr.write(
        f"mlenv: {e.name} is missing from this Python: `make cli` installs mlenv into "
        ".venv-cli/bin, or `pipx install .`\n"
    )
    sys.exit(2)

main()
