"""Per-SKU floors: the bars fleet health checks hold each GPU model to, as data with sources.

``mlenv/data/floors.yaml`` lists, per GPU model, floors such as host<->device copy
bandwidth per GPU or an InfiniBand port's rate, each with its public source (Azure's node
health-check configurations, NVIDIA's datasheets). :func:`with_floors` adds a model's
floors to the run's baseline for every (check, metric) the baseline has no rule for, so a
new cluster is judged on those figures from day one, and a baseline the operator wrote
still wins where it speaks. Each added rule's ``origin`` names the table and model, so a
result says which source judged each figure (``details.judged_by``).

A model or a figure without a public source has no row: "no floor", never a guess.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from mlenv.acceptance.core.yamlfile import parse_strict
from mlenv.acceptance.judging.baselines import OPS, Baseline, Rule, _Doc, _norm
from mlenv.errors import InputError

FLOORS_FILE = "floors.yaml"


@dataclass(frozen=True)
class SkuFloors:
    """One GPU model's floors."""

    model: str
    match: tuple[str, ...]
    rules: tuple[Rule, ...]


def builtin_path() -> Path:
    """The floors table shipped with the package."""
    return Path(str(resources.files("mlenv") / "data" / FLOORS_FILE))


def load(path: str | Path | None = None) -> list[SkuFloors]:
    """Parse and check a floors table (the shipped one by default).

    Raises InputError naming the file, line and what was expected. Every floor needs a
    ``cited`` https source: a number nobody published is not a floor.
    """
    import yaml

    p = Path(path) if path is not None else builtin_path()
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
            d.keys(f, fn, fw, ("check", "metric", "op", "value", "scope", "source"))
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


def for_devices(names: list[str], table: list[SkuFloors] | None = None) -> SkuFloors | None:
    """The table's model whose ``match`` (or model) occurs in one of the device names; the
    longest match wins (``A100-SXM4-80GB`` before a bare ``A100``). None: no floor."""
    best: tuple[int, SkuFloors] | None = None
    for sku in load() if table is None else table:
        for pat in (sku.model, *sku.match):
            np_ = _norm(pat)
            if np_ and any(np_ in _norm(n) for n in names):
                if best is None or len(np_) > best[0]:
                    best = (len(np_), sku)
    return best[1] if best else None


def _covered(baseline: Baseline, floor: Rule) -> bool:
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
    sku = for_devices(device_names, table) if device_names else None
    if sku is None:
        return baseline
    if baseline is None:
        return Baseline(
            model=f"per-SKU floors: {sku.model}",
            path=str(builtin_path()),
            match=sku.match,
            rules=sku.rules,
        )
    extra = tuple(f for f in sku.rules if not _covered(baseline, f))
    return replace(baseline, rules=baseline.rules + extra) if extra else baseline
