"""Which checks a run executes, and in what order: the check registry's front door.

Checks register themselves (``@register`` in :mod:`mlenv.acceptance.core.base`) when their
module is imported; :func:`load_checks` imports the ones :mod:`.registry` lists and any
``MLENV_ACCEPTANCE_PLUGINS`` modules, :func:`select_checks` turns ``--checks`` into the
ordered list. Used by the entry point on every rank and by the local runner before it
launches anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlenv.acceptance.core import registry as _registry
from mlenv.acceptance.core.base import Check, registry
from mlenv.acceptance.core.registry import PLUGINS_ENV, plugin_modules  # noqa: F401 - their old home
from mlenv.errors import InputError, did_you_mean

# The order checks run in: cheap and informative first, the long training run last.
ORDER = ("environment", "gpu", "compute", "memory", "collectives", "fabric", "training")


def load_checks() -> None:
    """Import the shipped checks and any plugin modules (filling the registry)."""
    _registry.load()


def order_key(name: str) -> tuple[int, str]:
    """Sort key of a check name: its family's place in :data:`ORDER`, then the name."""
    fam = name.split(".", 1)[0]
    return (ORDER.index(fam) if fam in ORDER else len(ORDER), name)


def select_checks(spec: str) -> list[type[Check]]:
    """Checks named by ``spec`` (names or family prefixes), in run order. InputError if unknown."""
    reg = registry()
    if not spec.strip():
        return [reg[n] for n in sorted(reg, key=order_key)]
    chosen: list[str] = []
    for want in (s.strip() for s in spec.split(",") if s.strip()):
        hits = [n for n in reg if n == want or n.startswith(want + ".")]
        if not hits:
            names = sorted(reg, key=order_key)
            families = sorted({n.split(".", 1)[0] for n in names}, key=order_key)
            raise InputError(
                f"--checks: unknown check {want!r}{did_you_mean(want, families + names)} "
                f"(known: {', '.join(names)})"
            )
        chosen += [h for h in hits if h not in chosen]
    return [reg[n] for n in sorted(chosen, key=order_key)]


def check_deadlines(
    checks: list[type[Check]],
    overrides: Mapping[str, Mapping[str, Any]],
    profile: str,
    deadline_s: float,
) -> None:
    """InputError naming the first check that cannot finish within the per-check deadline
    with its options (``Check.deadline_problem``): such a check would be named hung and
    stop the suite, so it is refused before any rank starts."""
    from mlenv.acceptance.core import profiles

    for cls in checks:
        for cuda in (False, True):
            opts = profiles.options_for(
                cls.Options, cls.name, profile=profile, cuda=cuda, overrides=overrides
            )
            why = cls.deadline_problem(opts, deadline_s)
            if why:
                raise InputError(f"{cls.name}: {why}")
