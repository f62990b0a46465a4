"""Timing helper: warm-up, samples, best/mean, the slow-fault stretch (real CPU work)."""

from __future__ import annotations

import time

import pytest

from mlenv.acceptance.core.timing import Timing, measure, stretch_factor


def test_warmup_runs_untimed_then_iters_samples_of_inner_calls() -> None:
    calls: list[float] = []
    t = measure(lambda: calls.append(time.perf_counter()), device="cpu", iters=4, warmup=3, inner=5)
    assert len(calls) == 3 + 4 * 5
    assert len(t.samples) == 4 and t.inner == 5 and t.method == "perf_counter"
    assert all(s > 0 for s in t.samples)
    assert t.best_s == min(t.samples) <= t.mean_s


def test_samples_are_per_call_seconds() -> None:
    t = measure(lambda: time.sleep(0.01), device="cpu", iters=2, warmup=0, inner=3)
    # each sample is divided by ``inner``: about 10 ms per call, not 30 ms
    assert 0.009 < t.best_s < 0.025


def test_stretch_makes_samples_really_longer() -> None:
    plain = measure(lambda: time.sleep(0.01), device="cpu", iters=2, warmup=0)
    slow = measure(lambda: time.sleep(0.01), device="cpu", iters=2, warmup=0, stretch=3.0)
    assert slow.best_s > 2.5 * plain.best_s * 0.9


def test_stretch_factor_parses_the_fault() -> None:
    assert stretch_factor(None) == 1.0
    assert stretch_factor({"rank": "1"}) == 4.0  # the documented default
    assert stretch_factor({"factor": "2.5"}) == 2.5
    with pytest.raises(ValueError, match="not a number"):
        stretch_factor({"factor": "fast"})
    with pytest.raises(ValueError, match=">= 1"):
        stretch_factor({"factor": "0.5"})


def test_rejects_empty_measurement() -> None:
    with pytest.raises(ValueError, match="iters=0"):
        measure(lambda: None, device="cpu", iters=0, warmup=0)


def test_describe_is_json_ready() -> None:
    d = Timing((0.2, 0.1, 0.3), 2, "cuda-events").describe()
    assert d == {
        "method": "cuda-events",
        "samples": 3,
        "inner": 2,
        "best_s": 0.1,
        "mean_s": pytest.approx(0.2),
    }


def test_stretch_does_not_feed_a_slow_call_into_a_longer_sleep() -> None:
    """A collective's call right after a long sleep is slower on its own (its partner
    wakes from a long wait). Padding each sample by its own time compounded (here 0.1,
    0.28, 0.6, 1.2 s), and a 200x fault overran localization's deadline at 6,000x. The
    padding is the fastest call's, so every sample stays near the factor."""
    last_end = [time.perf_counter()]

    def call() -> None:
        idle = time.perf_counter() - last_end[0]
        time.sleep(0.01 + 0.2 * idle)  # slower after a longer wait
        last_end[0] = time.perf_counter()

    t = measure(call, device="cpu", iters=4, warmup=1, stretch=10.0)
    assert max(t.samples) < 3 * min(t.samples), t.samples
    assert min(t.samples) > 9 * 0.01  # still really about ten calls long


def test_one_stretch_spans_a_probe_and_the_timed_calls() -> None:
    from mlenv.acceptance.core.timing import Stretch

    pad = Stretch(5.0)
    measure(lambda: time.sleep(0.004), device="cpu", iters=1, warmup=0, stretch=pad)
    assert 0.004 <= pad.fastest_s < 0.02
    assert Stretch(1.0).pad_s(1.0) == 0.0 and not Stretch().active
