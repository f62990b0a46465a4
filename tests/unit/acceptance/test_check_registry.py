"""The check registry: one module; each check declares its family's place in the run order;
names that would read as config keys are refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from mlenv.acceptance.core import metrics, registry
from mlenv.acceptance.core.base import Check, RunContext
from mlenv.acceptance.core.result import CheckResult
from mlenv.config.schema import schema
from mlenv.errors import EXIT_INPUT

# Importing the shipped checks is a one-off cost of the process, paid at collection rather
# than by whichever test happens to run first.
registry.load_shipped()


def _check(name: str, order: int | None = None) -> type[Check]:
    class _Probe(Check):
        run_order: ClassVar[int | None] = order

        def run(self, ctx: RunContext) -> list[CheckResult]:
            return []

    _Probe.name = name
    return _Probe


@pytest.fixture
def scratch() -> Iterator[list[str]]:
    """Names registered by a test, removed after it."""
    registry.load_shipped()
    names: list[str] = []
    yield names
    for n in names:
        registry.unregister(n)


def test_the_shipped_families_run_in_their_declared_order() -> None:
    registry.load_shipped()
    families = list(dict.fromkeys(registry.family(c.name) for c in registry.select_checks("")))
    assert families == [
        "environment",
        "gpu",
        "compute",
        "memory",
        "collectives",
        "fabric",
        "training",
    ]


def test_a_new_family_takes_its_declared_place(scratch: list[str]) -> None:
    registry.register(_check("burnin.soak", order=65))
    registry.register(_check("zzz.extra"))  # declares nothing: after every declared family
    registry.register(_check("compute.extra"))  # declares nothing: its family's place
    scratch += ["burnin.soak", "zzz.extra", "compute.extra"]
    names = [c.name for c in registry.select_checks("")]
    assert names.index("fabric.transport") < names.index("burnin.soak")
    assert names.index("burnin.soak") < names.index("training.deepspeed")
    assert names[-1] == "zzz.extra"
    assert registry.order_key("compute.extra") == registry.order_key("compute.matmul")[:1] + (
        "compute.extra",
    )


@pytest.mark.parametrize("section", ["storage", "network", "acceptance"])
def test_a_family_named_like_a_config_section_is_refused(section: str) -> None:
    with pytest.raises(registry.RegistryError, match=f"family '{section}' is a section") as e:
        registry.register(_check(f"{section}.speed"))
    assert e.value.exit_code == EXIT_INPUT
    assert f"{section}.speed" not in registry.registry()


def test_the_refused_names_are_the_schema_sections() -> None:
    assert registry.config_sections() == set(schema()["properties"])
    assert {"storage", "network", "nccl"} <= registry.config_sections()
    # the shipped families are not sections (so the refusal is not vacuous the other way)
    registry.load_shipped()
    assert not {registry.family(n) for n in registry.registry()} & registry.config_sections()


def test_two_places_for_one_family_are_refused(scratch: list[str]) -> None:
    with pytest.raises(registry.RegistryError, match="run_order 5 for family 'compute'"):
        registry.register(_check("compute.other", order=5))
    registry.register(_check("compute.same", order=30))  # agreeing is fine
    scratch.append("compute.same")


def test_a_duplicate_name_and_metrics_outside_the_family_are_refused(
    scratch: list[str],
) -> None:
    with pytest.raises(registry.RegistryError, match="duplicate check name 'memory.copy'"):
        registry.register(_check("memory.copy"))
    stray = _check("burnin.stray")
    stray.more_results = {"compute.matmul": {"x": metrics.info("s")}}
    with pytest.raises(registry.RegistryError, match="outside its family 'burnin'"):
        registry.register(stray)
    odd = _check("burnin.odd")
    odd.metrics = {"x": "higher"}  # type: ignore[dict-item]
    with pytest.raises(registry.RegistryError, match=r"metrics \['x'\] are not declared"):
        registry.register(odd)
