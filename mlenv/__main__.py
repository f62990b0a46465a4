"""``python -m mlenv`` is the same as the ``mlenv`` console script."""

from mlenv.cli.app import main

main()
