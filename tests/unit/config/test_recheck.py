"""``acceptance:``: the scheduled re-check's settings, validated with located errors."""

from __future__ import annotations

import pytest

from mlenv.config.model import Recheck
from mlenv.config.rules import cron_problem

from .conftest import BASE, Check, messages

SLURM = BASE + "platform: slurm\nslurm:\n  partition: gpu\n  shared_dir: /shared/mlenv\n"


def test_unset_section_schedules_nothing(check: Check) -> None:
    c, d = check(BASE)
    assert (
        messages(d) == [] and c is not None and c.recheck == Recheck() and c.recheck.schedule == ""
    )


def test_section_is_read(check: Check) -> None:
    c, d = check(
        BASE
        + "acceptance:\n  schedule: '0 3 * * 0'\n  profile: full\n  priority_class: batch-low\n"
        "  runner_image: registry.k8s.io/kubectl:v1.34.4\n"
    )
    assert messages(d) == [] and c is not None
    assert c.recheck == Recheck("0 3 * * 0", "full", "batch-low", "registry.k8s.io/kubectl:v1.34.4")


@pytest.mark.parametrize(
    "sched", ["0 3 * * 0", "*/15 * * * *", "0 0-6/2 1,15 * 1-5", "@weekly", "59 23 31 12 7"]
)
def test_good_schedules(check: Check, sched: str) -> None:
    c, d = check(BASE + f"acceptance:\n  schedule: '{sched}'\n")
    assert messages(d) == [] and c is not None and c.recheck.schedule == sched


@pytest.mark.parametrize(
    ("sched", "why"),
    [
        ("60 3 * * 0", "minute '60' is outside 0-59"),
        ("0 24 * * 0", "hour '24' is outside 0-23"),
        ("0 3 0 * *", "day of month '0' is outside 1-31"),
        ("0 3 * 13 *", "month '13' is outside 1-12"),
        ("0 3 * * 8", "day of week '8' is outside 0-7"),
        ("0 6-2 * * *", "hour '6-2': the range runs backwards"),
        ("*/0 * * * *", "minute '*/0': the step after '/' must be a number of at least 1"),
        ("0 3 * * 1-", "day of week '1-': expected '*', a number or a range a-b"),
    ],
)
def test_out_of_range_fields_are_located(check: Check, sched: str, why: str) -> None:
    c, d = check(BASE + f"acceptance:\n  schedule: '{sched}'\n")
    assert c is None
    err = [x for x in d if x.severity == "error"]
    assert [(x.line, x.path) for x in err] == [(5, "acceptance.schedule")] and why in err[0].message
    assert cron_problem(sched) and why in cron_problem(sched)


@pytest.mark.parametrize(
    "sched",
    [
        "0 3 * * 0; rm -rf /",
        "0 3 * * SUN",
        "0 3 * *",
        "@reboot",
        "$(id) * * * *",
        "0 3 * * 0\n* * * * *",
        "-1 3 * * 0 x",
    ],
)
def test_hostile_or_unsupported_schedules_are_refused(check: Check, sched: str) -> None:
    c, d = check(
        BASE
        + "acceptance:\n  schedule: "
        + repr(sched).replace("\\n", "\\n").replace("'", '"')
        + "\n"
    )
    assert c is None and any(m.startswith("acceptance.schedule") for m in messages(d)), messages(d)


def test_priority_class_and_runner_image_are_checked(check: Check) -> None:
    c, d = check(
        BASE
        + "acceptance:\n  schedule: '@daily'\n  priority_class: Bad_Name\n  runner_image: 'x y'\n"
    )
    assert c is None
    got = messages(d)
    assert any(m.startswith("acceptance.priority_class: ") and "Bad_Name" in m for m in got), got
    assert any(
        m.startswith("acceptance.runner_image: ") and "not an image reference" in m for m in got
    ), got


def test_kubernetes_only_keys_warn_off_kubernetes(check: Check) -> None:
    c, d = check(SLURM + "acceptance:\n  schedule: '@daily'\n  priority_class: low\n")
    assert c is not None and messages(d) == []
    assert [x.path for x in d if x.severity == "warning"] == ["acceptance.priority_class"]
