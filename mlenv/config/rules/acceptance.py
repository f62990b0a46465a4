"""``acceptance:``: the scheduled re-check's cron schedule, PriorityClass, runner image and
metrics push URL; the cron grammar that ``mlenv render`` expands with too."""

from __future__ import annotations

from mlenv.config.rules.common import _IMAGE_REF, Checker, _get, _short
from mlenv.contract import push_url
from mlenv.errors import InputError


def check(c: Checker) -> None:
    """``acceptance:``: each cron field within its range (the schema checked the
    characters); the PriorityClass a name; the runner image a reference. The two
    Kubernetes-only keys are warnings elsewhere."""
    sec = _get(c.data, "acceptance")
    if not isinstance(sec, dict):
        return
    sched = sec.get("schedule")
    if isinstance(sched, str) and sched and not sched.startswith("@"):
        why = cron_problem(sched)
        if why:
            c.err(
                ("acceptance", "schedule"),
                f"{_short(sched)}: {why}",
                "minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of week 0-7 (0 and 7 are Sunday)",
            )
    pc = sec.get("priority_class")
    if isinstance(pc, str) and pc:
        c.subdomain(("acceptance", "priority_class"), pc, "PriorityClass name")
    img = sec.get("runner_image")
    if isinstance(img, str) and img and not _IMAGE_REF.fullmatch(img):
        c.err(
            ("acceptance", "runner_image"),
            f"{_short(img)} is not an image reference "
            "(registry/name[:tag][@sha256:digest], no spaces or control characters)",
        )
    push = _get(c.data, "acceptance", "metrics", "push")
    if isinstance(push, str) and push:
        try:
            push_url(push, "")
        except InputError as e:
            c.err(("acceptance", "metrics", "push"), str(e).strip())
    if c.off_k8s:
        if sec.get("node_events"):
            c.warn(
                ("acceptance", "node_events"),
                f"acceptance.node_events tells Kubernetes Nodes; platform {c.plat} ignores it",
                key=True,
            )
        for key in ("priority_class", "runner_image"):
            if sec.get(key):
                c.warn(
                    ("acceptance", key),
                    f"acceptance.{key} is for the Kubernetes CronJob; platform {c.plat} ignores it",
                    key=True,
                )


CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)


def cron_problem(schedule: str) -> str:
    """Why a five-field numeric cron ``schedule`` is out of range ("" when it is fine).

    The schema admits only digits, ``*``, ``,``, ``-`` and ``/`` in five fields; this
    checks what a pattern cannot: each number in its field's range, ``a-b`` with a <= b,
    a step of at least 1. Kubernetes, scrontab and cron would each refuse or misread
    what fails here, and later than ``validate`` does (at apply, at scrontab, never).
    """
    fields = schedule.split(" ")
    if len(fields) != 5:
        return (
            f"expected five fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    for text, (what, lo, hi) in zip(fields, CRON_FIELDS, strict=True):
        try:
            cron_field(text, what, lo, hi)
        except ValueError as e:
            return str(e)
    return ""


def cron_field(text: str, what: str, lo: int, hi: int) -> tuple[int, ...]:
    """The numbers one cron field names, ascending; ValueError saying why when it is not a
    field of ``what`` (``lo``-``hi``). The one reading of the grammar: ``validate`` checks
    with it (:func:`cron_problem`) and ``mlenv render`` expands with it
    (:mod:`mlenv.render.cron`), so the two cannot disagree."""
    out: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if step and (not step.isdigit() or int(step) < 1):
            raise ValueError(f"{what} {item!r}: the step after '/' must be a number of at least 1")
        if base == "*":
            first, last = lo, hi
        else:
            a, dash, b = base.partition("-")
            if not a.isdigit() or (dash and not b.isdigit()):
                raise ValueError(f"{what} {item!r}: expected '*', a number or a range a-b")
            first, last = int(a), int(b) if dash else int(a)
            if not (lo <= first <= hi and lo <= last <= hi):
                raise ValueError(f"{what} {item!r} is outside {lo}-{hi}")
            if first > last:
                raise ValueError(f"{what} {item!r}: the range runs backwards")
            if step and not dash:
                last = hi  # "a/s" runs from a to the field's end (vixie cron and Kubernetes alike)
        out.update(range(first, last + 1, int(step) if step else 1))
    return tuple(sorted(out))
