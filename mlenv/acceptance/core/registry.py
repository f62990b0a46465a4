"""The check registry: which checks exist, by name, and the modules that define them.

An explicit list (the SuperBench ``registry.py`` pattern): :data:`SHIPPED` names the
modules of the shipped checks and ``MLENV_ACCEPTANCE_PLUGINS`` adds a site's own; each
module registers its checks with ``@register`` (:mod:`mlenv.acceptance.core.base`) when
:func:`load` imports it. Nothing imports the check modules to fill the registry but
:func:`load`, and this module imports none of them, so the framework and the checks do
not import each other in a circle; nor does it import ``base`` (which imports the
profiles, which read the registered options classes through :func:`option_classes`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from mlenv.acceptance.core.options import CheckOptions

# The shipped checks' modules. A new check module is added here (test_layers checks that
# every module of mlenv/acceptance/checks/ that defines a check is listed).
SHIPPED = (
    "mlenv.acceptance.checks.environment",
    "mlenv.acceptance.checks.gpu",
    "mlenv.acceptance.checks.gpuhealth",
    "mlenv.acceptance.checks.compute",
    "mlenv.acceptance.checks.memory",
    "mlenv.acceptance.checks.hostcopy",
    "mlenv.acceptance.checks.collectives",
    "mlenv.acceptance.checks.fabric",
    "mlenv.acceptance.checks.ports",
    "mlenv.acceptance.checks.localize",
    "mlenv.acceptance.checks.training",
)
PLUGINS_ENV = "MLENV_ACCEPTANCE_PLUGINS"

# The store itself is ``base._REGISTRY`` (``base`` defines ``Check`` and imports this
# module); base installs the reader below when it is imported, which every check module does.
_option_classes: Callable[[], dict[str, type[CheckOptions]]] = dict


def use_store(option_classes: Callable[[], dict[str, type[CheckOptions]]]) -> None:
    """Install the reader of the registered checks' options classes (``base`` calls it once)."""
    global _option_classes
    _option_classes = option_classes


def option_classes() -> dict[str, type[CheckOptions]]:
    """Each registered check's options class by check name (for validating an options layer)."""
    return _option_classes()


def plugin_modules() -> list[str]:
    """Module names from ``MLENV_ACCEPTANCE_PLUGINS`` (comma-separated)."""
    return [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]


def load_shipped() -> None:
    """Import the shipped check modules (each registers its checks)."""
    for mod in SHIPPED:
        importlib.import_module(mod)


def load(*, skip_missing_plugins: bool = False) -> None:
    """Import the shipped checks and the plugin modules, filling the registry.

    ``skip_missing_plugins``: a plugin that cannot be imported is skipped instead of
    raising ImportError (for validating options before the entry point reports it).
    """
    load_shipped()
    for mod in plugin_modules():
        try:
            importlib.import_module(mod)
        except ImportError:
            if not skip_missing_plugins:
                raise
