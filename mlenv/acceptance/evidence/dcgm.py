"""Reading ``dcgmi diag -r <level> -i <ids> -j``: NVIDIA's DCGM diagnostics per
entity, for the ``gpu.dcgm`` check and the node verdicts.

The layout is DCGM's published schema (``testing/python3/dcgm_diag_schema.json`` in
NVIDIA/DCGM): ``{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
"test_summary": {"status"}, "results": [{"entity_group", "entity_group_id", "entity_id",
"status", "warnings": [{"warning", "error_id", "error_category", "error_severity"}]}]}]}],
"runtime_error"?}, "entity_groups"?, "metadata"?}``. DCGM 3.x wrote the top key ``"DCGM
GPU Diagnostic"`` and ``gpu_id`` per result, without groups or severities; both are read.

Each result belongs to an entity of a group: a GPU, an NvSwitch, a CPU (or CPU core), or
the system itself (group ``None``, or a result with no entity). A failure is judged by
what DCGM itself says about it (``error_severity``, :data:`SEVERITIES`): CONFIG is a
setting to change (persistence mode off), MONITOR something to watch, RESET a GPU to
reset, ISOLATE an entity to take out of service. ``runtime_error`` (the diagnostic could
not run) is kept as DCGM wrote it. Statuses are compared case-insensitively (``Pass``,
``Fail``, ``Warn``, ``Skip``, ``Not Run``). Pure, stdlib only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOP_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")

# dcgm_field_entity_group_t (dcgm_fields.h): the groups a diagnostic result can name.
GPU, SWITCH, CPU, CPU_CORE, SYSTEM = "GPU", "NvSwitch", "CPU", "CPU core", "system"
_GROUP_IDS = {0: SYSTEM, 1: GPU, 3: SWITCH, 7: CPU, 8: CPU_CORE}
_GROUP_NAMES = {
    "none": SYSTEM,
    "gpu": GPU,
    "switch": SWITCH,
    "nvswitch": SWITCH,
    "cpu": CPU,
    "cpu_core": CPU_CORE,
    "cpucore": CPU_CORE,
}

# dcgmErrorSeverity_t (dcgm_errors.h), by value.
SEVERITIES = {
    0: "NONE",
    1: "MONITOR",  # can run work, but watch it
    2: "ISOLATE",  # cannot run work: isolate the entity
    3: "UNKNOWN",
    4: "TRIAGE",
    5: "CONFIG",  # a configuration to change
    6: "RESET",  # drain and reset the GPU
}
# dcgmErrorCategory_t (dcgm_errors.h), by value: shown beside the message.
CATEGORIES = {
    0: "none",
    1: "performance threshold",
    2: "performance violation",
    3: "software configuration",
    4: "software library",
    5: "software XID",
    6: "software CUDA",
    7: "software EUD",
    8: "software other",
    9: "hardware thermal",
    10: "hardware memory",
    11: "hardware NVLink",
    12: "hardware NvSwitch",
    13: "hardware PCIe",
    14: "hardware power",
    15: "hardware other",
    16: "internal",
}


class DcgmParseError(ValueError):
    """The text is not ``dcgmi diag -j`` output."""


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        return int(str(v))
    except ValueError:
        return None


@dataclass(frozen=True)
class Message:
    """One warning or error DCGM attached to a result, with its own grading."""

    text: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None

    @property
    def severity_name(self) -> str | None:
        return None if self.severity is None else SEVERITIES.get(self.severity, str(self.severity))

    def __str__(self) -> str:
        tags = []
        if self.error_id is not None:
            tags.append(f"DCGM error {self.error_id}")
        if self.severity is not None:
            tags.append(f"severity {self.severity_name}")
        if self.category is not None:
            tags.append(CATEGORIES.get(self.category, f"category {self.category}"))
        return f"{self.text} ({', '.join(tags)})" if tags else self.text


@dataclass
class TestResult:
    """One diagnostic test on one entity."""

    category: str
    test: str
    status: str  # PASS | FAIL | WARN | SKIP
    messages: list[Message] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return [str(m) for m in self.messages]


@dataclass
class EntityDiag:
    """Every test DCGM ran on one entity (a GPU, NvSwitch, CPU, or the system: ``entity`` None)."""

    group: str
    entity: int | None
    tests: list[TestResult] = field(default_factory=list)

    @property
    def gpu(self) -> int | None:
        """DCGM's GPU id (the host engine's), for a GPU."""
        return self.entity if self.group == GPU else None

    @property
    def name(self) -> str:
        return self.group if self.entity is None else f"{self.group} {self.entity}"

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

    def severities(self) -> set[str]:
        """DCGM's severities of what failed or warned ("" for a message without one)."""
        graded = {m.severity_name for t in self.failed() for m in t.messages}
        return {s for s in graded if s is not None} or {""}


# Back-compatible name: one GPU's tests.
GpuDiag = EntityDiag


@dataclass
class Diag:
    """One ``dcgmi diag -j`` document."""

    entities: list[EntityDiag] = field(default_factory=list)
    runtime_error: str | None = None
    version: str | None = None

    @property
    def gpus(self) -> list[EntityDiag]:
        return [e for e in self.entities if e.group == GPU]

    @property
    def others(self) -> list[EntityDiag]:
        """Every entity that is not a GPU (NvSwitch, CPU, the system)."""
        return [e for e in self.entities if e.group != GPU]


def _status(raw: Any) -> str:
    s = str(raw or "").strip().lower()
    if s.startswith("fail"):
        return "FAIL"
    if s.startswith("warn"):
        return "WARN"
    if s.startswith("pass"):
        return "PASS"
    return "SKIP"  # Skip, Not Run, and anything DCGM adds later: not a verdict either way


def _messages(entry: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    for key in ("warnings", "errors"):
        for w in entry.get(key) or []:
            if isinstance(w, dict):
                text = str(w.get("warning") or w.get("error") or w.get("message") or "").strip()
                if text:
                    out.append(
                        Message(
                            text,
                            _int(w.get("error_id", w.get("error_code"))),
                            _int(w.get("error_category")),
                            _int(w.get("error_severity")),
                        )
                    )
            elif str(w).strip():
                out.append(Message(str(w).strip()))
    info = entry.get("info")
    for x in info if isinstance(info, list) else [info] if info else []:
        if str(x).strip():
            out.append(Message(str(x).strip()))
    return out


def _entity_of(entry: dict[str, Any]) -> tuple[str, int | None]:
    """(group, id) of a result; the system (None) when it names no entity."""
    gid = _int(entry.get("entity_group_id"))
    raw = str(entry.get("entity_group") or "").strip()
    group = _GROUP_IDS.get(gid) if gid is not None else None
    if group is None and raw:
        group = _GROUP_NAMES.get(raw.lower().replace(" ", "_"), raw)
    if "gpu_id" in entry:  # 3.x
        return GPU, _int(entry.get("gpu_id"))
    if group is None:
        group = GPU if "entity_id" in entry else SYSTEM
    if group == SYSTEM:
        return SYSTEM, None
    ent = _int(entry.get("entity_id"))
    return (group, ent) if ent is not None else (SYSTEM, None)


def parse(text: str) -> Diag:
    """Every entity's results of ``dcgmi diag -j`` output; DcgmParseError when unreadable."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise DcgmParseError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise DcgmParseError("not a JSON object")
    body = next((doc[k] for k in TOP_KEYS if isinstance(doc.get(k), dict)), None)
    if body is None:
        raise DcgmParseError(f"no {' or '.join(repr(k) for k in TOP_KEYS)} object")
    err = body.get("runtime_error")
    runtime_error = str(err).strip() if err else None
    cats = body.get("test_categories")
    if not isinstance(cats, list):
        if runtime_error:  # DCGM could not run the diagnostic: no tests, the reason
            return Diag(runtime_error=runtime_error, version=_version(doc, body))
        raise DcgmParseError("no test_categories list")
    found: dict[tuple[str, int | None], EntityDiag] = {}
    for cat in cats:
        if not isinstance(cat, dict):
            continue
        cname = str(cat.get("category") or "")
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue
            tname = str(test.get("name") or "")
            results = [e for e in test.get("results") or [] if isinstance(e, dict)]
            for entry in results:
                key = _entity_of(entry)
                found.setdefault(key, EntityDiag(*key)).tests.append(
                    TestResult(cname, tname, _status(entry.get("status")), _messages(entry))
                )
            summary = test.get("test_summary")
            sstat = _status(summary.get("status")) if isinstance(summary, dict) else "SKIP"
            if sstat in ("FAIL", "WARN") and not any(
                _status(e.get("status")) == sstat for e in results
            ):
                # The test failed as a whole with no entity failing: the system's failure.
                msgs = _messages(summary) if isinstance(summary, dict) else []
                found.setdefault((SYSTEM, None), EntityDiag(SYSTEM, None)).tests.append(
                    TestResult(cname, tname, sstat, msgs)
                )
    order = {GPU: 0, SWITCH: 1, CPU: 2, CPU_CORE: 3, SYSTEM: 5}
    ents = sorted(found.values(), key=lambda e: (order.get(e.group, 4), e.group, e.entity or 0))
    return Diag(ents, runtime_error, _version(doc, body))


def _version(doc: dict[str, Any], body: dict[str, Any]) -> str | None:
    meta = doc.get("metadata")
    v = meta.get("version") if isinstance(meta, dict) else body.get("version")
    return str(v) if v else None


def judge(e: EntityDiag) -> tuple[str, str | None]:
    """(status, action id or None) of one entity, by what DCGM says of its failure.

    None leaves the action to the node verdicts (a GPU failing with no severity: reset it
    when it is one of several, drain the node when every GPU fails). The action ids are
    the node verdicts' catalogue.
    """
    status = e.status
    if status not in ("FAIL", "WARN"):
        return status, None
    sev = e.severities()
    named = {GPU: None, SWITCH: "check-nvswitch", CPU: "check-cpu", CPU_CORE: "check-cpu"}
    out_of_service = named.get(e.group, "drain")
    if "ISOLATE" in sev:
        return "FAIL", out_of_service or "drain"
    if "RESET" in sev:
        return "FAIL", "reset-gpu" if e.group == GPU else out_of_service
    if sev <= {"CONFIG"}:
        return "WARN", "configure-gpu"  # a setting, not the hardware
    if sev <= {"MONITOR", "CONFIG", "NONE"}:
        return "WARN", "watch"
    if status == "WARN":
        return "WARN", None
    return "FAIL", out_of_service


def argv_for(level: int, gpu_ids: list[int] | None = None) -> list[str]:
    """``dcgmi diag -r LEVEL [-i IDS] -j`` (the level an int 1..4, checked by the check's
    options; the ids DCGM's own GPU ids, ints)."""
    words = ["dcgmi", "diag", "-r", str(int(level))]
    if gpu_ids:
        words += ["-i", ",".join(str(int(g)) for g in gpu_ids)]
    return [*words, "-j"]


DISCOVERY_ARGV = ["dcgmi", "discovery", "-l"]
GPUS_ARGV = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
_UUID = re.compile(r"\b(GPU-[0-9A-Fa-f-]{8,})\b")


def discovered(text: str) -> dict[str, int]:
    """UUID → DCGM GPU id from ``dcgmi discovery -l`` (its table: a row opening with the id,
    then ``Device UUID: GPU-...``)."""
    out: dict[str, int] = {}
    current: int | None = None
    for line in text.splitlines():
        m = re.match(r"^\|\s*(\d+)\s*\|", line)
        if m:
            current = int(m.group(1))
        u = _UUID.search(line) if "UUID" in line else None
        if u and current is not None:
            out.setdefault(u.group(1), current)
    return out


def visible_gpus(text: str) -> list[tuple[int, str]]:
    """(index as this process sees it, UUID) from ``nvidia-smi --query-gpu=index,uuid``."""
    out = []
    for line in text.splitlines():
        idx, _, rest = line.partition(",")
        u = _UUID.search(rest)
        if idx.strip().isdigit() and u:
            out.append((int(idx), u.group(1)))
    return out
