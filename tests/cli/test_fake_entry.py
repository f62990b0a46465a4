"""The wheel leaves the fake cluster's package (``mlenv.testing``) out.

The fake behind a real ``mlenv`` process (``python -m mlenv.testing.fake_mlenv``, make
targets through it, the console script without a way to it) is
``tests/integration/test_fake_mlenv_process.py``.
"""

from __future__ import annotations

import pytest
from _fakeenv import ROOT


def test_the_wheel_leaves_mlenv_testing_out() -> None:
    """pyproject's package discovery, as setuptools runs it for the wheel (building one
    here would write build/ into the shared checkout): mlenv.testing is not a package of
    the distribution, every product package is."""
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"][
        "find"
    ]
    shipped = set(find_packages(str(ROOT), include=find["include"], exclude=find["exclude"]))
    assert not {p for p in shipped if p == "mlenv.testing" or p.startswith("mlenv.testing.")}
    assert {"mlenv", "mlenv.cli", "mlenv.cluster", "mlenv.pod", "mlenv.acceptance"} <= shipped
    every = set(find_packages(str(ROOT), include=find["include"]))
    assert {"mlenv.testing", "mlenv.testing.fakecluster"} <= every  # the exclusion bites
