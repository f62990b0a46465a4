"""Baselines: expected values and pass rules per GPU model, read from YAML (data, not code).

A baseline file::

    model: H100 80GB
    match: ["H100 80GB", "H100-80GB"]        # substrings of the GPU name / gpus.type
    expected:                               # what a healthy device measures
      - {check: compute.matmul, metric: tflops_bf16, value: 795, source: "…"}
    rules:                                  # the bar; ops from a fixed table, no eval
      - {check: compute.matmul, metric: tflops_bf16, op: ">=", value: 700, source: "…", scope: rank}
      - {check: training.deepspeed, metric: samples_per_s_per_rank, op: ">=", value: 2000,
         when: {model: resnet50, batch_size_per_rank: 256}, source: "…"}  # only for that setup
    outliers: {warn_frac: 0.2, fail_frac: 0.5}   # optional
    tolerances:                             # optional: `mlenv compare` regression bar per metric
      - {check: compute.matmul, metric: tflops_bf16, value: 0.05, source: "…"}  # default 0.10

Every number carries a ``source``: a note, or (what the shipped files use for every
``expected`` figure) a structured one that says whether the figure was measured or
published::

    source: {measured: 2026-11-22, machine: "NVIDIA H100 80GB HBM3, torch 2.11.0+cu130", note: "…"}
    source: {cited: "https://…/conf/nd96isr_h100_v5.conf", note: "Azure's health-check floor …"}

A malformed file raises InputError naming the file, line and what was expected (the CLI
exits 2).
"""

from __future__ import annotations

import fnmatch
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from mlenv.acceptance.core.result import CheckResult
from mlenv.acceptance.core.yamlfile import parse_strict
from mlenv.errors import InputError

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}
SCOPES = ("rank", "node", "world", "link", "intra", "inter", "rack")


Scalar = str | float | bool


def _same(a: object, b: Scalar) -> bool:
    if isinstance(b, bool) or isinstance(a, bool):
        return a is b
    if isinstance(b, float) and isinstance(a, int | float):
        return float(a) == b
    return a == b


class _Applies:
    """Which results a baseline entry is about: check glob, scope, and ``when`` conditions.

    ``when`` compares result details (``{model: resnet50, batch_size_per_rank: 256}``):
    a published throughput figure only means something for the setup it was measured in.
    """

    check: str
    scope: str | None
    when: tuple[tuple[str, Scalar], ...]

    def applies_to(self, r: CheckResult) -> bool:
        """True when ``r`` is a result this entry speaks about."""
        if not fnmatch.fnmatchcase(r.name, self.check) or (
            self.scope is not None and self.scope != r.scope
        ):
            return False
        details = r.details if isinstance(r.details, dict) else {}
        return all(k in details and _same(details[k], v) for k, v in self.when)


@dataclass(frozen=True)
class Provenance:
    """Where a figure comes from: a measurement (date and machine) or a publication (citation)."""

    kind: str  # "measured" | "cited"
    note: str
    date: str = ""  # ISO date of the measurement
    machine: str = ""  # what it was measured on
    citation: str = ""  # a URL (https) of the published figure

    def text(self) -> str:
        """One line for reports: ``measured 2026-11-22 on <machine>: <note>`` or ``<note> (<url>)``."""
        if self.kind == "measured":
            return f"measured {self.date} on {self.machine}: {self.note}"
        return f"{self.note} ({self.citation})"


@dataclass(frozen=True)
class Expected(_Applies):
    """What a healthy device measures for one metric, and where that number comes from."""

    check: str
    metric: str
    value: float
    source: str
    scope: str | None = None
    when: tuple[tuple[str, Scalar], ...] = ()
    provenance: Provenance | None = None


@dataclass(frozen=True)
class Rule(_Applies):
    """``metric op value`` must hold for every result the entry applies to."""

    check: str
    metric: str
    op: str
    value: float
    source: str
    scope: str | None = None
    when: tuple[tuple[str, Scalar], ...] = ()
    provenance: Provenance | None = None
    # Which table the rule comes from ("baseline H100 80GB", "per-SKU floor H200"): what a
    # result's details.judged_by names, so a report says which source judged each figure.
    origin: str = ""

    def holds(self, measured: float) -> bool:
        """Apply the rule's operator from the fixed table."""
        return OPS[self.op](measured, self.value)


@dataclass(frozen=True)
class Tolerance:
    """How much worse than an earlier run ``metric`` may get before ``mlenv compare`` calls it a regression."""

    check: str  # a glob, like rules
    metric: str
    value: float  # a fraction: 0.1 = 10 %
    source: str


@dataclass(frozen=True)
class Baseline:
    """A parsed baseline file."""

    model: str
    path: str
    match: tuple[str, ...] = ()
    expected: tuple[Expected, ...] = ()
    rules: tuple[Rule, ...] = ()
    outliers: dict[str, float] = field(default_factory=dict)
    tolerances: tuple[Tolerance, ...] = ()


def builtin_dir() -> Path:
    """The directory of the baselines shipped with the package."""
    return Path(str(resources.files("mlenv") / "data" / "baselines"))


class _Doc:
    """Walks a composed YAML node tree, raising InputError with file:line on a mismatch."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, node: Any, where: str, expected: str) -> InputError:
        line = node.start_mark.line + 1 if node is not None else 1
        col = node.start_mark.column + 1 if node is not None else 1
        return InputError(f"{self.path}:{line}:{col}: {where}: expected {expected}")

    def mapping(self, node: Any, where: str) -> dict[str, tuple[Any, Any]]:
        import yaml

        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, where, "a mapping")
        return {str(k.value): (k, v) for k, v in node.value}

    def seq(self, node: Any, where: str) -> list[Any]:
        import yaml

        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, where, "a list")
        return list(node.value)

    def string(self, node: Any, where: str) -> str:
        import yaml

        if (
            not isinstance(node, yaml.ScalarNode)
            or node.tag != "tag:yaml.org,2002:str"
            or not str(node.value).strip()
        ):
            raise self.fail(node, where, "a non-empty string")
        return str(node.value)

    def number(self, node: Any, where: str) -> float:
        import yaml

        if isinstance(node, yaml.ScalarNode) and node.tag in (
            "tag:yaml.org,2002:int",
            "tag:yaml.org,2002:float",
        ):
            try:
                return float(yaml.safe_load(node.value))
            except (TypeError, ValueError):
                pass
        raise self.fail(node, where, "a number")

    def scalar(self, node: Any, where: str) -> Scalar:
        import yaml

        if isinstance(node, yaml.ScalarNode):
            if node.tag == "tag:yaml.org,2002:str":
                return str(node.value)
            if node.tag == "tag:yaml.org,2002:bool":
                return bool(yaml.safe_load(node.value))
            if node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
                return self.number(node, where)
        raise self.fail(node, where, "a string, number or boolean")

    def source(self, node: Any, where: str) -> tuple[str, Provenance | None]:
        """A ``source``: a note, or ``{measured: DATE, machine: …, note: …}`` / ``{cited: URL, note: …}``."""
        import datetime

        import yaml

        if not isinstance(node, yaml.MappingNode):
            return self.string(node, where), None
        m = self.mapping(node, where)
        if "measured" in m:
            self.keys(m, node, where, ("measured", "machine", "note"))
            date_node = m["measured"][1]
            raw = str(getattr(date_node, "value", ""))
            try:
                date = datetime.date.fromisoformat(raw)
            except ValueError:
                raise self.fail(
                    date_node,
                    f"{where}.measured",
                    f"the date of the measurement, YYYY-MM-DD (got {raw!r})",
                ) from None
            prov = Provenance(
                "measured",
                note=self.string(m["note"][1], f"{where}.note"),
                date=date.isoformat(),
                machine=self.string(m["machine"][1], f"{where}.machine"),
            )
        elif "cited" in m:
            self.keys(m, node, where, ("cited", "note"))
            url = self.string(m["cited"][1], f"{where}.cited")
            if not url.startswith("https://") or any(c.isspace() for c in url):
                raise self.fail(
                    m["cited"][1],
                    f"{where}.cited",
                    f"the https:// address of the published figure (got {url!r})",
                )
            prov = Provenance(
                "cited", note=self.string(m["note"][1], f"{where}.note"), citation=url
            )
        else:
            raise self.fail(
                node,
                where,
                "a note, or a mapping with 'measured' (date, machine, note) or 'cited' (URL, note)",
            )
        return prov.text(), prov

    def applies(self, m: dict[str, tuple[Any, Any]], where: str) -> dict[str, Any]:
        """The ``check`` / ``scope`` / ``when`` keys of an entry, checked."""
        scope = None
        if "scope" in m:
            scope = self.string(m["scope"][1], f"{where}.scope")
            if scope not in SCOPES:
                raise self.fail(
                    m["scope"][1], f"{where}.scope", f"one of {', '.join(SCOPES)} (got {scope!r})"
                )
        when: list[tuple[str, Scalar]] = []
        if "when" in m:
            for k, (_, v) in self.mapping(m["when"][1], f"{where}.when").items():
                when.append((k, self.scalar(v, f"{where}.when.{k}")))
        return {
            "check": self.string(m["check"][1], f"{where}.check"),
            "scope": scope,
            "when": tuple(when),
        }

    def keys(
        self,
        m: dict[str, tuple[Any, Any]],
        node: Any,
        where: str,
        required: tuple[str, ...],
        optional: tuple[str, ...] = (),
    ) -> None:
        import difflib

        for k, (knode, _) in m.items():  # unknown keys first: a typo also makes a key "missing"
            if k not in required and k not in optional:
                close = difflib.get_close_matches(k, required + optional, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(
                    knode, f"{where}.{k}", f"one of the keys {', '.join(required + optional)}{hint}"
                )
        for k in required:
            if k not in m:
                raise self.fail(node, where, f"key {k!r} (required: {', '.join(required)})")


def load(path: str | Path) -> Baseline:
    """Parse and check a baseline file. Raises InputError (exit 2) on any problem."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read baseline: {e}") from None
    # The strict reader of cluster configs first: a duplicated key (which yaml.compose
    # would keep twice and the walk below would read as the last one), an unreadable value
    # or a second document is a located error, the same as in a cluster config.
    parse_strict(text.encode("utf-8"), str(p), "baseline")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{p}:1:1"
        raise InputError(f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    d = _Doc(str(p))
    if root is None:
        raise InputError(
            f"{p}:1:1: (root): expected a mapping with keys model, expected, rules; the file is empty"
        )
    top = d.mapping(root, "(root)")
    d.keys(top, root, "(root)", ("model", "rules"), ("match", "expected", "outliers", "tolerances"))
    model = d.string(top["model"][1], "model")
    match: list[str] = []
    if "match" in top:
        for i, n in enumerate(d.seq(top["match"][1], "match")):
            match.append(d.string(n, f"match[{i}]"))
    expected: list[Expected] = []
    if "expected" in top:
        for i, n in enumerate(d.seq(top["expected"][1], "expected")):
            w = f"expected[{i}]"
            m = d.mapping(n, w)
            d.keys(m, n, w, ("check", "metric", "value", "source"), ("scope", "when"))
            text, prov = d.source(m["source"][1], f"{w}.source")
            expected.append(
                Expected(
                    **d.applies(m, w),
                    metric=d.string(m["metric"][1], f"{w}.metric"),
                    value=d.number(m["value"][1], f"{w}.value"),
                    source=text,
                    provenance=prov,
                )
            )
    rules: list[Rule] = []
    for i, n in enumerate(d.seq(top["rules"][1], "rules")):
        w = f"rules[{i}]"
        m = d.mapping(n, w)
        d.keys(m, n, w, ("check", "metric", "op", "value", "source"), ("scope", "when"))
        op_node = m["op"][1]
        op = str(getattr(op_node, "value", ""))
        if op not in OPS or getattr(op_node, "tag", "") != "tag:yaml.org,2002:str":
            raise d.fail(op_node, f"{w}.op", f"one of {', '.join(OPS)} (got {op!r})")
        text, prov = d.source(m["source"][1], f"{w}.source")
        rules.append(
            Rule(
                **d.applies(m, w),
                metric=d.string(m["metric"][1], f"{w}.metric"),
                op=op,
                value=d.number(m["value"][1], f"{w}.value"),
                source=text,
                provenance=prov,
                origin=f"baseline {model}",
            )
        )
    outliers: dict[str, float] = {}
    if "outliers" in top:
        om = d.mapping(top["outliers"][1], "outliers")
        d.keys(om, top["outliers"][1], "outliers", (), ("warn_frac", "fail_frac", "min_z"))
        for k, (_, v) in om.items():
            outliers[k] = d.number(v, f"outliers.{k}")
    tolerances: list[Tolerance] = []
    for i, n in enumerate(d.seq(top["tolerances"][1], "tolerances") if "tolerances" in top else []):
        w = f"tolerances[{i}]"
        m = d.mapping(n, w)
        d.keys(m, n, w, ("check", "metric", "value", "source"))
        if d.number(m["value"][1], f"{w}.value") < 0:
            raise d.fail(m["value"][1], f"{w}.value", "a fraction >= 0 (0.1 = 10 %)")
        tolerances.append(
            Tolerance(
                check=d.string(m["check"][1], f"{w}.check"),
                metric=d.string(m["metric"][1], f"{w}.metric"),
                value=d.number(m["value"][1], f"{w}.value"),
                source=d.string(m["source"][1], f"{w}.source"),
            )
        )
    return Baseline(
        model=model,
        path=str(p),
        match=tuple(match),
        expected=tuple(expected),
        rules=tuple(rules),
        outliers=outliers,
        tolerances=tuple(tolerances),
    )


def bar_for(baseline: Baseline | None, r: CheckResult, metric: str) -> Rule | None:
    """The floor ``metric`` of ``r`` is held to: the highest ``>=``/``>`` rule that applies to
    it (check, scope and ``when``, e.g. the busbw bar of the result's ``details.fabric``), or None.

    What a plot draws as "the baseline's bar"; the verdict applies every rule itself.
    """
    if baseline is None:
        return None
    floors = [
        x for x in baseline.rules if x.metric == metric and x.op in (">=", ">") and x.applies_to(r)
    ]
    return max(floors, key=lambda x: x.value, default=None)


def builtin() -> list[Baseline]:
    """Every baseline shipped with the package."""
    return list(_load_folder(builtin_dir()))


@functools.cache
def _load_folder(folder: Path) -> tuple[Baseline, ...]:
    # Package data: read once per process. Each lookup by GPU name read every shipped
    # file again through two YAML passes (about 0.1 s of CPU a lookup), and a run, the
    # compare verb or resolve() may look up several names.
    return tuple(load(p) for p in sorted(folder.glob("*.yaml")))


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def find_for_device(names: list[str]) -> Baseline | None:
    """The shipped baseline whose ``match`` (or model) occurs in one of the device names.

    Names are GPU names (``NVIDIA H100 80GB HBM3``), ``gpus.type`` values, or ``cpu``.
    Comparison ignores case, spaces and punctuation; the longest match wins so
    ``H100 80GB`` is not mistaken for ``H100``.
    """
    best: tuple[int, Baseline] | None = None
    for b in builtin():
        for pat in (b.model, *b.match):
            np_ = _norm(pat)
            if np_ and any(np_ in _norm(n) or _norm(n) == np_ for n in names):
                if best is None or len(np_) > best[0]:
                    best = (len(np_), b)
    return best[1] if best else None


def resolve(spec: str | None, device_names: list[str]) -> Baseline | None:
    """``--baseline FILE|MODEL`` or, without it, the match for the devices (None: no baseline),
    with the devices' per-SKU floors (:mod:`~mlenv.acceptance.judging.floors`) added for
    what it does not judge itself.

    Raises InputError for a named model that no shipped baseline matches.
    """
    return with_floors(_resolve(spec, device_names), device_names)


def _resolve(spec: str | None, device_names: list[str]) -> Baseline | None:
    if spec:
        if Path(spec).exists() or spec.endswith((".yaml", ".yml")):
            return load(spec)
        b = find_for_device([spec])
        if b is None:
            known = ", ".join(x.model for x in builtin())
            raise InputError(
                f"--baseline {spec!r}: neither a file nor a known GPU model (known: {known})"
            )
        return b
    return find_for_device(device_names) if device_names else None


# -- per-SKU floors --------------------------------------------------------------------
# mlenv/data/floors.yaml lists, per GPU model, floors such as host<->device copy bandwidth
# per GPU or an InfiniBand port's rate, each with its public source (Azure's node
# health-check configurations, NVIDIA's datasheets). with_floors adds a model's floors to
# the run's baseline for every (check, metric) the baseline has no rule for, so a new
# cluster is judged on those figures from day one, and a baseline the operator wrote still
# wins where it speaks. Each added rule's ``origin`` names the table and model, so a result
# says which source judged each figure (``details.judged_by``). A model or a figure
# without a public source has no row: "no floor", never a guess.

FLOORS_FILE = "floors.yaml"


@dataclass(frozen=True)
class SkuFloors:
    """One GPU model's floors."""

    model: str
    match: tuple[str, ...]
    rules: tuple[Rule, ...]


def floors_path() -> Path:
    """The floors table shipped with the package."""
    return Path(str(resources.files("mlenv") / "data" / FLOORS_FILE))


def load_floors(path: str | Path | None = None) -> list[SkuFloors]:
    """Parse and check a floors table (the shipped one by default).

    Raises InputError naming the file, line and what was expected. Every floor needs a
    ``cited`` https source: a number nobody published is not a floor.
    """
    import yaml

    p = Path(path) if path is not None else floors_path()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the floors table: {e}") from None
    parse_strict(text.encode("utf-8"), str(p), "floors table")
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    d = _Doc(str(p))
    if root is None:
        raise InputError(f"{p}:1:1: (root): expected a mapping with key models; the file is empty")
    top = d.mapping(root, "(root)")
    d.keys(top, root, "(root)", ("models",))
    out: list[SkuFloors] = []
    for i, mn in enumerate(d.seq(top["models"][1], "models")):
        w = f"models[{i}]"
        m = d.mapping(mn, w)
        d.keys(m, mn, w, ("model", "match", "floors"))
        model = d.string(m["model"][1], f"{w}.model")
        match = tuple(
            d.string(n, f"{w}.match[{j}]") for j, n in enumerate(d.seq(m["match"][1], f"{w}.match"))
        )
        rules: list[Rule] = []
        for j, fn in enumerate(d.seq(m["floors"][1], f"{w}.floors")):
            fw = f"{w}.floors[{j}]"
            f = d.mapping(fn, fw)
            d.keys(f, fn, fw, ("check", "metric", "op", "value", "scope", "source"), ("when",))
            op_node = f["op"][1]
            op = str(getattr(op_node, "value", ""))
            if op not in OPS:
                raise d.fail(op_node, f"{fw}.op", f"one of {', '.join(OPS)} (got {op!r})")
            text_, prov = d.source(f["source"][1], f"{fw}.source")
            if prov is None or prov.kind != "cited":
                raise d.fail(
                    f["source"][1],
                    f"{fw}.source",
                    "{cited: https://…, note: …}: a floor is a published figure",
                )
            rules.append(
                Rule(
                    **d.applies(f, fw),
                    metric=d.string(f["metric"][1], f"{fw}.metric"),
                    op=op,
                    value=d.number(f["value"][1], f"{fw}.value"),
                    source=text_,
                    provenance=prov,
                    origin=f"per-SKU floor {model}",
                )
            )
        out.append(SkuFloors(model=model, match=match, rules=tuple(rules)))
    return out


@functools.cache
def _shipped_floors() -> tuple[SkuFloors, ...]:
    """The shipped table, parsed once per process (every judged run consults it)."""
    return tuple(load_floors())


def floors_for(names: list[str], table: list[SkuFloors] | None = None) -> SkuFloors | None:
    """The table's model whose ``match`` (or model) occurs in one of the device names; the
    longest match wins (``A100-SXM4-80GB`` before a bare ``A100``). None: no floor."""
    best: tuple[int, SkuFloors] | None = None
    for sku in _shipped_floors() if table is None else table:
        for pat in (sku.model, *sku.match):
            np_ = _norm(pat)
            if np_ and any(np_ in _norm(n) for n in names):
                if best is None or len(np_) > best[0]:
                    best = (len(np_), sku)
    return best[1] if best else None


def _floor_covered(baseline: Baseline, floor: Rule) -> bool:
    """True when a baseline rule already judges the floor's metric for the floor's check."""
    return any(
        r.metric == floor.metric
        and (fnmatch.fnmatchcase(floor.check, r.check) or r.check == floor.check)
        for r in baseline.rules
    )


def with_floors(
    baseline: Baseline | None, device_names: list[str], table: list[SkuFloors] | None = None
) -> Baseline | None:
    """``baseline`` plus the devices' per-SKU floors for what it does not judge itself.

    Without a baseline, a model in the table still gets its floors (a baseline made of them
    alone, named after the table); a model not in the table leaves ``baseline`` as it is.
    """
    sku = floors_for(device_names, table) if device_names else None
    if sku is None:
        return baseline
    if baseline is None:
        return Baseline(
            model=f"per-SKU floors: {sku.model}",
            path=str(floors_path()),
            match=sku.match,
            rules=sku.rules,
        )
    extra = tuple(f for f in sku.rules if not _floor_covered(baseline, f))
    return replace(baseline, rules=baseline.rules + extra) if extra else baseline
