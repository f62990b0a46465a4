"""The one result shape every check produces (see docs/contracts.md).

Stdlib only, so reports and verdicts can be computed without torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

# 2: the verdict may be INTERRUPTED, with "interrupted": {"signal": NAME}. Every
# version-1 document is still a version-2 one (nothing removed or renamed), so readers of
# both need no branch. 3: the verdict may be SKIPPED (no check measured anything); again
# nothing removed or renamed.
SCHEMA_VERSION = 3


class Status(str, Enum):
    """Per-check status. FAIL: below the bar. ERROR: the check itself could not finish."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    ERROR = "ERROR"
    SKIP = "SKIP"


class Verdict(str, Enum):
    """The run's verdict. INTERRUPTED: someone stopped the run (Ctrl-C, SIGTERM/SIGHUP to the
    CLI, a user's ``scancel``); what was measured is kept, nothing is judged broken.
    SKIPPED: every check skipped, so nothing was measured and nothing can be signed off."""

    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"
    INTERRUPTED = "INTERRUPTED"
    SKIPPED = "SKIPPED"


@dataclass
class CheckResult:
    """One check at one scope (a rank, a node, the world or a link between nodes)."""

    name: str
    status: Status
    scope: str = "rank"  # rank | node | world | link
    node: str | None = None
    rank: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def group(self) -> str | None:
        """The collective group a world/intra/inter result measured (``details.group``), if any."""
        g = self.details.get("group") if isinstance(self.details, dict) else None
        return str(g) if g is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the results contract's key order."""
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        """Inverse of :meth:`to_dict`; raises KeyError/ValueError on a malformed entry."""
        return cls(
            name=str(d["name"]),
            status=Status(d["status"]),
            scope=str(d.get("scope", "rank")),
            node=d.get("node"),
            rank=d.get("rank"),
            metrics={str(k): float(v) for k, v in dict(d.get("metrics", {})).items()},
            reasons=[str(r) for r in d.get("reasons", [])],
            details=dict(d.get("details", {})),
            duration_s=float(d.get("duration_s", 0.0)),
        )
