"""GPUs named by UUID across runs: a GPU moved to another index or node is the same GPU.

The checks that read a GPU's identity (gpu.health from nvidia-smi, memory.h2d from torch)
put its UUID in ``details.gpu_uuid``; every other rank-scope result of that rank (compute,
training) is about the same GPU. History lines (``gpus``), ``mlenv compare`` and the
Prometheus series key per-GPU figures by it.
"""

from __future__ import annotations

from mlenv.acceptance.core.result import CheckResult, Status


def uuid_map(results: list[CheckResult]) -> dict[tuple[str, int], str]:
    """(node, rank) → GPU UUID, from every rank-scope result that named its GPU."""
    out: dict[tuple[str, int], str] = {}
    for r in results:
        u = r.details.get("gpu_uuid") if isinstance(r.details, dict) else None
        if r.scope == "rank" and r.rank is not None and isinstance(u, str) and u:
            out[(r.node or "", r.rank)] = u
    return out


def uuid_of(r: CheckResult, known: dict[tuple[str, int], str]) -> str | None:
    """The UUID of the GPU a rank-scope result is about, when the run named it."""
    if r.scope != "rank" or r.rank is None:
        return None
    own = r.details.get("gpu_uuid") if isinstance(r.details, dict) else None
    if isinstance(own, str) and own:
        return own
    return known.get((r.node or "", r.rank))


def per_gpu(results: list[CheckResult]) -> dict[str, dict[str, object]]:
    """``{uuid: {node, rank, metrics: {check: {metric: value}}}}`` of the measured results
    (PASS/WARN/FAIL): a history line's ``gpus``, one figure per GPU per run."""
    known = uuid_map(results)
    out: dict[str, dict[str, object]] = {}
    for r in results:
        u = uuid_of(r, known)
        if u is None or r.status in (Status.ERROR, Status.SKIP) or not r.metrics:
            continue
        entry = out.setdefault(u, {"node": r.node, "rank": r.rank, "metrics": {}})
        figures = entry["metrics"]
        assert isinstance(figures, dict)
        figures.setdefault(r.name, {}).update(
            {m: round(float(v), 6) for m, v in sorted(r.metrics.items())}
        )
    return dict(sorted(out.items()))
