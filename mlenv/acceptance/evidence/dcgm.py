"""Reading ``dcgmi diag -r <level> -j``: per-GPU results of NVIDIA's DCGM
diagnostics, for the ``gpu.dcgm`` check and the node verdicts.

Two JSON layouts exist. DCGM 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category",
"tests": [{"name", "results": [{"gpu_id", "status", "info"?, "warnings"?: [{"warning",
"error_id"}]}]}]}]}}``. DCGM 4.x renamed the top key ``"DCGM Diagnostic"`` and gives each
test a ``test_summary`` beside its per-entity ``results`` (``entity_id`` rather than
``gpu_id`` in some releases). Both are read; statuses are compared case-insensitively
(``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run``). Pure, stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TOP_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")


class DcgmParseError(ValueError):
    """The text is not ``dcgmi diag -j`` output."""


@dataclass
class TestResult:
    """One diagnostic test on one GPU."""

    category: str
    test: str
    status: str  # PASS | FAIL | WARN | SKIP
    messages: list[str] = field(default_factory=list)


@dataclass
class GpuDiag:
    """Every test DCGM ran on one GPU."""

    gpu: int
    tests: list[TestResult] = field(default_factory=list)

    @property
    def status(self) -> str:
        """FAIL if any test failed, else WARN if any warned, else PASS (SKIP if nothing ran)."""
        sts = {t.status for t in self.tests}
        for s in ("FAIL", "WARN", "PASS"):
            if s in sts:
                return s
        return "SKIP"

    def failed(self) -> list[TestResult]:
        """The FAIL and WARN tests, FAIL first."""
        return sorted(
            (t for t in self.tests if t.status in ("FAIL", "WARN")),
            key=lambda t: t.status != "FAIL",
        )


def _status(raw: Any) -> str:
    s = str(raw or "").strip().lower()
    if s.startswith("fail"):
        return "FAIL"
    if s.startswith("warn"):
        return "WARN"
    if s.startswith("pass"):
        return "PASS"
    return "SKIP"  # Skip, Not Run, and anything DCGM adds later: not a verdict either way


def _messages(entry: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("warnings", "errors"):
        for w in entry.get(key) or []:
            if isinstance(w, dict):
                text = str(w.get("warning") or w.get("error") or w.get("message") or "").strip()
                code = w.get("error_id", w.get("error_code"))
                if text:
                    out.append(f"{text} (DCGM error {code})" if code is not None else text)
            elif str(w).strip():
                out.append(str(w).strip())
    info = entry.get("info")
    for x in info if isinstance(info, list) else [info] if info else []:
        if str(x).strip():
            out.append(str(x).strip())
    return out


def _gpu_of(entry: dict[str, Any]) -> int | None:
    for key in ("gpu_id", "entity_id", "gpu"):
        v = entry.get(key)
        if v is not None:
            try:
                return int(str(v))
            except ValueError:
                return None
    return None


def parse(text: str) -> list[GpuDiag]:
    """Per-GPU results of ``dcgmi diag -j`` output, by GPU id; DcgmParseError when unreadable."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise DcgmParseError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise DcgmParseError("not a JSON object")
    body = next((doc[k] for k in TOP_KEYS if isinstance(doc.get(k), dict)), None)
    if body is None:
        raise DcgmParseError(f"no {' or '.join(repr(k) for k in TOP_KEYS)} object")
    cats = body.get("test_categories")
    if not isinstance(cats, list):
        raise DcgmParseError("no test_categories list")
    gpus: dict[int, GpuDiag] = {}
    for cat in cats:
        if not isinstance(cat, dict):
            continue
        cname = str(cat.get("category") or "")
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue
            tname = str(test.get("name") or "")
            for entry in test.get("results") or []:
                if not isinstance(entry, dict):
                    continue
                gpu = _gpu_of(entry)
                if gpu is None:
                    continue
                gpus.setdefault(gpu, GpuDiag(gpu)).tests.append(
                    TestResult(cname, tname, _status(entry.get("status")), _messages(entry))
                )
    return [gpus[g] for g in sorted(gpus)]


def argv_for(level: int) -> list[str]:
    """``dcgmi diag -r LEVEL -j`` (the level is an int 1..4, checked by the check's options)."""
    return ["dcgmi", "diag", "-r", str(int(level)), "-j"]
