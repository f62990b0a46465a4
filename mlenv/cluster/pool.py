"""One bounded pool for the fan-outs over pods (sync's listings, copies and checks,
gpu-info's execs): at most ``bound`` calls at once, a total deadline, a progress line.

Each call is a client process and an API connection (an exec stream): a fan-out of one
thread per pod opened 254 at once at 256 pods. The bound is ``MLENV_FANOUT`` (default 16)
unless the caller gives one; the deadline ``MLENV_FANOUT_DEADLINE_S`` (seconds for the
whole fan-out; default none: each call keeps its own timeout).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar, cast

from mlenv.errors import InfraError, InputError

DEFAULT_BOUND = 16
BOUND_ENV = "MLENV_FANOUT"
DEADLINE_ENV = "MLENV_FANOUT_DEADLINE_S"
# A progress line at about every tenth of the items (and the last): a few lines whatever
# the pod count, and none for a fan-out that fits in one round of the bound.
PROGRESS_STEPS = 10

T = TypeVar("T")
R = TypeVar("R")


class FanOutDeadline(InfraError):
    """The fan-out did not finish within its total deadline (exit 3)."""


def fanout_bound(environ: dict[str, str] | None = None) -> int:
    """``MLENV_FANOUT`` as a count of calls at once (default 16); InputError (exit 2) when
    it is set to anything but a positive whole number."""
    raw = (environ if environ is not None else os.environ).get(BOUND_ENV, "").strip()
    if not raw:
        return DEFAULT_BOUND
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"{BOUND_ENV}={raw!r}: expected a positive whole number (calls at once)")
    return int(raw)


def fanout_deadline(environ: dict[str, str] | None = None) -> float | None:
    """``MLENV_FANOUT_DEADLINE_S`` in seconds (None when unset); InputError when not > 0."""
    raw = (environ if environ is not None else os.environ).get(DEADLINE_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise InputError(f"{DEADLINE_ENV}={raw!r}: expected seconds (a number above 0)")
    return seconds


def bounded_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    bound: int | None = None,
    deadline_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    what: str = "done",
) -> list[R]:
    """``[fn(item) for item in items]``, at most ``bound`` (default :func:`fanout_bound`)
    at once, in the items' order. The first call to raise ends the fan-out with its error
    (the calls not started are cancelled). ``deadline_s`` (default
    :func:`fanout_deadline`) bounds the whole fan-out: past it FanOutDeadline says how
    many finished; calls in flight end at their own timeout. ``progress`` hears
    ``"<what> N/M"`` about every tenth of the items when they are more than the bound."""
    todo = list(items)
    limit = bound if bound is not None else fanout_bound()
    deadline = deadline_s if deadline_s is not None else fanout_deadline()
    if not todo:
        return []
    results: list[R | None] = [None] * len(todo)
    end = None if deadline is None else time.monotonic() + deadline
    step = max(1, len(todo) // PROGRESS_STEPS)
    say = progress if progress is not None and len(todo) > limit else None
    pool = ThreadPoolExecutor(max_workers=max(1, min(limit, len(todo))))
    index: dict[Future[R], int] = {pool.submit(fn, item): i for i, item in enumerate(todo)}
    pending = set(index)
    finished = 0
    try:
        while pending:
            left = None if end is None else max(0.0, end - time.monotonic())
            done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            if not done:
                raise FanOutDeadline(
                    f"{what} {finished}/{len(todo)} within the {deadline:g} s deadline "
                    f"({DEADLINE_ENV}); the rest were not waited for"
                )
            for fut in done:
                results[index[fut]] = fut.result()
                finished += 1
                if say is not None and (finished % step == 0 or finished == len(todo)):
                    say(f"{what} {finished}/{len(todo)}")
    finally:
        # on an error or the deadline: nothing more starts, and nothing in flight is waited for
        pool.shutdown(wait=not pending, cancel_futures=True)
    return cast(list[R], results)
