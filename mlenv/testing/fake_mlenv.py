"""``python -m mlenv.testing.fake_mlenv STATE.json [--] ARGS…``: the real ``mlenv`` CLI
(:func:`mlenv.cli.app.main`) with the fake cluster saved in ``STATE.json`` as its
cluster, for tests that run ``mlenv`` as a process (``make … MLENV="…"``).

Only this test entry point installs the fake; the ``mlenv`` console script has no way
to reach it. Usage errors are one line and exit 2, as the CLI's own.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = "usage: python -m mlenv.testing.fake_mlenv STATE.json [--] MLENV-ARGS..."


def main(args: Sequence[str] | None = None) -> None:
    """Run ``mlenv ARGS`` against the fake in ``STATE.json``; exits with mlenv's code."""
    from mlenv.cli.app import main as mlenv_main
    from mlenv.cluster.connect import use_factory
    from mlenv.testing.fakecluster.session import state_file

    words = list(sys.argv[1:] if args is None else args)
    if not words or words[0].startswith("-"):
        sys.stderr.write(f"{USAGE}\n")
        raise SystemExit(2)
    state, rest = words[0], words[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    sys.argv = ["mlenv", *rest]
    with use_factory(state_file(state)):
        mlenv_main()


if __name__ == "__main__":
    main()
