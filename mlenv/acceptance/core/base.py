"""Check lifecycle and registry (the SuperBench pattern: fixed setup/run/teardown).

A check runs on every rank. ``run`` returns the results *this rank* contributes:
per-rank checks return their own entry; world/link-scope checks usually return them
from rank 0 only. The runner gathers all ranks' results on rank 0 under a deadline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from mlenv.acceptance.core import faults, profiles
from mlenv.acceptance.core.metrics import Declared
from mlenv.acceptance.core.options import CheckOptions

# The registry's front door, where check modules and site plugins have always imported it.
from mlenv.acceptance.core.registry import option_classes as option_classes
from mlenv.acceptance.core.registry import register as register
from mlenv.acceptance.core.registry import registry as registry
from mlenv.acceptance.core.result import CheckResult

OptT = TypeVar("OptT", bound=CheckOptions)


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
    # Option overrides {check or family: {option: value}} over the profile (the options
    # file, already merged with the profile by the entry point; see options_of).
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    deadline_s: float = 120.0  # per-check deadline; collectives use it as their timeout
    report_dir: Path = Path("acceptance-report")

    @property
    def is_cuda(self) -> bool:
        """True when this rank drives a CUDA device."""
        return self.device.startswith("cuda")

    def options_of(self, cls: type[OptT], check: str) -> OptT:
        """The typed options of ``check`` (declared by ``cls``) for this rank's device and profile.

        Resolved by :func:`mlenv.acceptance.core.profiles.options_for`: the check's CPU or GPU
        defaults, the profile, then ``options`` (keyed by check name or family). Raises
        InputError for an unknown option or a wrong value.
        """
        got = profiles.options_for(
            cls, check, profile=self.profile, cuda=self.is_cuda, overrides=self.options
        )
        assert isinstance(got, cls)
        return got

    def fault(self, kind: str, check: str) -> dict[str, str] | None:
        """The parameters of an injected fault of ``kind`` for ``check`` on this rank, or None.

        The one way checks and the runner ask :mod:`mlenv.acceptance.core.faults` (``MLENV_FAULT``).
        """
        return faults.active(kind, rank=self.rank, node_rank=self.node_rank, check=check)


class Check(ABC):
    """Base class of every acceptance check."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    # The check's options (mlenv.acceptance.core.options): a frozen dataclass of option(...)
    # fields with CPU and GPU defaults; read them with ctx.options_of(TheOptions, self.name).
    Options: ClassVar[type[CheckOptions]] = CheckOptions
    # The family's place in the run order, cheap and informative first (environment 10,
    # gpu 20, compute 30, memory 40, collectives 50, fabric 60, training 70: the long run
    # last). None: the place another check of the family declares, else after them all.
    run_order: ClassVar[int | None] = None
    # What each metric of its results means ({name or fnmatch pattern: Metric}, see
    # mlenv.acceptance.core.metrics): unit, direction, compared with peers, trended.
    # None declares nothing: the old name rule then guesses (a plugin written before).
    metrics: ClassVar[Declared | None] = None
    # The declarations for results it reports under other names of its family.
    more_results: ClassVar[Mapping[str, Declared]] = {}

    def setup(self, ctx: RunContext) -> None:  # noqa: B027 - optional hook
        """Prepare (allocate buffers, build models). Default: nothing."""

    @abstractmethod
    def run(self, ctx: RunContext) -> list[CheckResult]:
        """Measure and return this rank's results."""

    def teardown(self, ctx: RunContext) -> None:  # noqa: B027 - optional hook
        """Release what setup took. Default: nothing."""

    @classmethod
    def declared_metrics(cls) -> dict[str, Declared]:
        """``{result name: declarations}`` for every result name this check reports."""
        out = dict(cls.more_results)
        if cls.metrics is not None:
            out[cls.name] = cls.metrics
        return out

    @classmethod
    def deadline_problem(cls, options: CheckOptions, deadline_s: float) -> str | None:
        """Why this check cannot finish within a per-check deadline of ``deadline_s`` with
        ``options`` (None: it can); asked before the suite starts. Default: it can."""
        return None
