"""The check registry: which checks exist, in what order they run, and what their metrics mean.

An explicit list (the SuperBench ``registry.py`` pattern): :data:`SHIPPED` names the
modules of the shipped checks and ``MLENV_ACCEPTANCE_PLUGINS`` adds a site's own; each
module registers its checks with :func:`register` when :func:`load` imports it. The
registry reads only what each check class declares (``name``, ``Options``, ``run_order``,
``metrics``): nothing is injected at run time and there is no central order list. This
module imports no check module but in :func:`load`, and not :mod:`.base` (which imports
the profiles, which read the options classes here), so nothing imports in a circle.

Refused at registration (:class:`RegistryError`): a second check under a name, two places
in the run order for one family, and a family named like a section of the cluster config
(``storage``, ``network``, ...): ``storage.x`` in the docs and options files would read as
a config key.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, TypeVar

from mlenv.acceptance.core import metrics
from mlenv.acceptance.core.options import CheckOptions
from mlenv.errors import InputError, did_you_mean

# A check class: a subclass of mlenv.acceptance.core.base.Check. Not named by its type here:
# base re-exports this module's names for plugins, so this module cannot import base, even
# for typing; the callers that run checks hold them as ``type[Check]``.
CheckClass = type[Any]

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

# Where a family that declares no place runs: after every family that does.
LAST = 1000


class RegistryError(InputError, ValueError):
    """A check the registry refuses (a plugin's mistake is named, never a traceback)."""


_REGISTRY: dict[str, CheckClass] = {}
_PLACES: dict[str, tuple[int, str]] = {}  # family -> (place, the check that declared it)
C = TypeVar("C", bound=CheckClass)


def family(name: str) -> str:
    """``compute`` for ``compute.matmul``; a check without a dot is its own family."""
    return name.split(".", 1)[0]


@functools.cache
def config_sections() -> frozenset[str]:
    """The top-level sections of the cluster config schema (``storage``, ``network``, ...)."""
    from mlenv.config.schema import schema

    return frozenset(schema().get("properties", {}))


def _refuse(cls: CheckClass) -> None:
    name, fam = cls.name, family(cls.name)
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise RegistryError(f"duplicate check name {name!r}")
    if fam in config_sections():
        raise RegistryError(
            f"check {name!r} ({cls.__module__}): family {fam!r} is a section of the cluster "
            f"config; name the family otherwise (the docs and options files would read "
            f"{fam}.<option> as a config key)"
        )
    place, by = cls.run_order, _PLACES.get(fam)
    if place is not None and by is not None and by[0] != place and by[1] != name:
        raise RegistryError(
            f"check {name!r} ({cls.__module__}): run_order {place} for family {fam!r}, "
            f"which {by[1]!r} placed at {by[0]}"
        )
    for result, decl in cls.declared_metrics().items():
        if family(result) != fam:
            raise RegistryError(
                f"check {name!r} ({cls.__module__}): declares metrics for {result!r}, "
                f"outside its family {fam!r}"
            )
        bad = [m for m, x in decl.items() if not isinstance(x, metrics.Metric)]
        if bad:
            raise RegistryError(
                f"check {name!r} ({cls.__module__}): metrics {bad} are not declared with "
                "mlenv.acceptance.core.metrics.Metric"
            )


def register(cls: C) -> C:
    """Class decorator: add a check to the registry under ``cls.name`` (see the module doc
    for what is refused)."""
    _refuse(cls)
    cls.Options.specs()  # a malformed options declaration fails at import, not mid-run
    _REGISTRY[cls.name] = cls
    if cls.run_order is not None:
        _PLACES.setdefault(family(cls.name), (cls.run_order, cls.name))
    return cls


def unregister(name: str) -> None:
    """Remove a check (tests that register a throwaway check)."""
    cls = _REGISTRY.pop(name, None)
    fam = family(name)
    if cls is not None and _PLACES.get(fam, (0, ""))[1] == name:
        del _PLACES[fam]


def registry() -> dict[str, CheckClass]:
    """All registered checks by name (:func:`load` fills it)."""
    return dict(_REGISTRY)


def option_classes() -> dict[str, type[CheckOptions]]:
    """Each registered check's options class by check name (for validating an options layer)."""
    return {name: cls.Options for name, cls in _REGISTRY.items()}


def metric_table(names: Any = None) -> dict[str, metrics.Declared]:
    """``{result name: {metric: Metric}}`` declared by the registered checks (those whose
    results are named in ``names``, when given). A check that declares nothing is absent:
    its metrics fall back to the name rule (:func:`mlenv.acceptance.core.metrics.meaning`).
    The shipped checks are loaded first, so what a shipped metric means never depends on
    whether something imported them before."""
    load_shipped()
    out: dict[str, metrics.Declared] = {}
    for cls in _REGISTRY.values():
        out.update(cls.declared_metrics())
    if names is None:
        return out
    wanted = set(names)
    return {k: v for k, v in out.items() if k in wanted}


# -- loading ---------------------------------------------------------------------------


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


# -- selection and order ---------------------------------------------------------------


def order_key(name: str) -> tuple[int, str]:
    """Sort key of a check name: its family's declared place (:data:`LAST` when none of
    the family's checks declares one), then the name."""
    place = _PLACES.get(family(name))
    return (place[0] if place else LAST, name)


def select_checks(spec: str) -> list[CheckClass]:
    """Checks named by ``spec`` (names or family prefixes), in run order. InputError if unknown."""
    reg = registry()
    if not spec.strip():
        return [reg[n] for n in sorted(reg, key=order_key)]
    chosen: list[str] = []
    for want in (s.strip() for s in spec.split(",") if s.strip()):
        hits = [n for n in reg if n == want or n.startswith(want + ".")]
        if not hits:
            names = sorted(reg, key=order_key)
            families = sorted({family(n) for n in names}, key=order_key)
            raise InputError(
                f"--checks: unknown check {want!r}{did_you_mean(want, families + names)} "
                f"(known: {', '.join(names)})"
            )
        chosen += [h for h in hits if h not in chosen]
    return [reg[n] for n in sorted(chosen, key=order_key)]
