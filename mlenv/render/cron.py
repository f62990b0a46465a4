"""A validated cron schedule (``acceptance.schedule``) as explicit sets (pure).

The Slurm re-check queues each next run itself (``sbatch --begin``, :mod:`mlenv.render.platforms`),
so its batch script has to find "the next minute the schedule names" in bash on a compute
node, which may have no python outside the job's container. Parsing cron there would be
fragile; instead ``mlenv render`` expands each field here into the numbers it names and
the script only tests membership. The hosts cron line gets the five fields (an @shorthand
spelled out, which every cron reads the same way).

The schema and :func:`mlenv.config.rules.cron_problem` have already checked the text; the
fields are read by the same :func:`mlenv.config.rules.cron_field`, and day of week 7 is
Sunday (0).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlenv.config.rules import CRON_FIELDS, cron_field

# vixie cron's shorthands, as five fields (cron(8); Kubernetes and cronie read them alike)
SHORTHANDS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


@dataclass(frozen=True)
class Expanded:
    """The numbers each field names, ascending; ``day_or``: cron's rule that a day matches
    when EITHER day of month or day of week does, once both fields are restricted (neither
    starts with ``*``); otherwise both must match."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    day_or: bool


def five_fields(schedule: str) -> str:
    """``schedule`` as five fields (an @shorthand spelled out)."""
    return SHORTHANDS.get(schedule, schedule)


def expand(schedule: str) -> Expanded:
    """The sets of a schedule that :func:`mlenv.config.rules.cron_problem` accepted."""
    fields = five_fields(schedule).split(" ")
    minutes, hours, days, months, weekdays = (
        cron_field(f, what, lo, hi) for f, (what, lo, hi) in zip(fields, CRON_FIELDS, strict=True)
    )
    return Expanded(
        minutes,
        hours,
        days,
        months,
        tuple(sorted({d % 7 for d in weekdays})),
        day_or=not fields[2].startswith("*") and not fields[4].startswith("*"),
    )


def words(values: tuple[int, ...]) -> str:
    """``(0, 15, 30)`` → ``"0 15 30"``: what the script's ``for`` loops and ``case`` tests read."""
    return " ".join(str(v) for v in values)
