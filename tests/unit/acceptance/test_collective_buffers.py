"""The collectives' test data: expected outputs equal a plain simulation of each op."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from mlenv.acceptance.checks.collectives import _buffers, _pattern  # noqa: E402


def _simulate(op: str, inputs: list[Any], n: int) -> list[Any]:
    """What each rank's output must be, computed the obvious way on the CPU."""
    if op == "all_reduce":
        return [sum(inputs)] * n
    if op == "broadcast":
        return [inputs[0]] * n
    if op == "all_gather":
        return [torch.cat(inputs)] * n
    if op == "reduce_scatter":
        return list(torch.chunk(sum(inputs), n))
    if op == "all_to_all":
        chunks = [torch.chunk(x, n) for x in inputs]
        return [torch.cat([chunks[src][dst] for src in range(n)]) for dst in range(n)]
    raise AssertionError(op)


@pytest.mark.parametrize(
    "op", ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"]
)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_expected_output_matches_a_simulation_of_the_op(op: str, n: int) -> None:
    count = n * 23  # chunks of 23: not a multiple of the 7-element period
    bufs = [_buffers(op, count, g, n, "cpu") for g in range(n)]
    outs = _simulate(op, [b[0].clone() for b in bufs], n)
    for g, (_, _, expected) in enumerate(bufs):
        assert torch.equal(expected, outs[g]), (op, n, g)
    # every rank contributes something different (a swapped rank would be caught)
    if op != "broadcast" and n > 1:
        assert not torch.equal(bufs[0][0], bufs[1][0])


def test_pattern_is_periodic_from_any_offset() -> None:
    p = _pattern(20, "cpu", offset=12)
    assert p.tolist() == [float((12 + j) % 7) for j in range(20)]
    assert p.dtype == torch.float32
