"""Check lifecycle and registry (the SuperBench pattern: fixed setup/run/teardown).

A check runs on every rank. ``run`` returns the results *this rank* contributes:
per-rank checks return their own entry; world/link-scope checks usually return them
from rank 0 only. The runner gathers all ranks' results on rank 0 under a deadline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from mlenv.acceptance.result import CheckResult


@dataclass
class RunContext:
    """What a check knows about where it runs. Built once per process by the runner."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    host: str
    backend: str  # "nccl" | "gloo"
    device: str  # "cuda:<local_rank>" | "cpu"
    profile: str = "quick"  # "quick" | "full"
    options: dict[str, Any] = field(default_factory=dict)  # per-check options, keyed by check name
    deadline_s: float = 120.0  # per-check deadline; collectives use it as their timeout
    report_dir: Path = Path("acceptance-report")

    @property
    def is_cuda(self) -> bool:
        """True when this rank drives a CUDA device."""
        return self.device.startswith("cuda")

    def opt(self, check: str, key: str, default: Any) -> Any:
        """Option ``key`` of check ``check``, or ``default``.

        Looks in ``options[check]`` first, then in the options of the check's family
        (``collectives`` for ``collectives.all_reduce``), which is how profiles are keyed.
        """
        own = self.options.get(check, {})
        if key in own:
            return own[key]
        return self.options.get(check.split(".", 1)[0], {}).get(key, default)


class Check(ABC):
    """Base class of every acceptance check."""

    name: ClassVar[str]
    description: ClassVar[str] = ""

    def setup(self, ctx: RunContext) -> None:  # noqa: B027 - optional hook
        """Prepare (allocate buffers, build models). Default: nothing."""

    @abstractmethod
    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Measure and return this rank's results."""

    def teardown(self, ctx: RunContext) -> None:  # noqa: B027 - optional hook
        """Release what setup took. Default: nothing."""


_REGISTRY: dict[str, type[Check]] = {}
C = TypeVar("C", bound=type[Check])


def register(cls: C) -> C:
    """Class decorator: add a check to the registry under ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"duplicate check name {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def registry() -> dict[str, type[Check]]:
    """All registered checks by name (importing ``mlenv.acceptance.checks`` fills it)."""
    return dict(_REGISTRY)


CheckFactory = Callable[[], Check]
