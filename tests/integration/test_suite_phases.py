"""The two phases of make test (tests/conftest.py): the start order, and serial tests that
skip, saying why, on an xdist worker but run in the serial phase."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
CONFTEST = ROOT / "tests" / "conftest.py"


def _conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite_conftest", CONFTEST)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_long_first_module_exists() -> None:
    # a renamed module would silently lose its head start
    missing = [p for p in _conftest().LONG_FIRST if not (ROOT / p).is_file()]
    assert missing == []


def test_integration_starts_first_and_its_long_modules_before_the_rest() -> None:
    conf = _conftest()
    ids = [
        "tests/unit/test_contract.py::t",
        "tests/cli/test_verbs.py::t",
        "tests/integration/test_acceptance_local.py::t",
        "tests/integration/test_pod_launch.py::t",
        "tests/gpu/test_checks_gpu.py::t",
    ]
    order = sorted(ids, key=conf._start_rank)
    assert order == [
        "tests/integration/test_pod_launch.py::t",
        "tests/integration/test_acceptance_local.py::t",
        "tests/cli/test_verbs.py::t",
        "tests/unit/test_contract.py::t",
        "tests/gpu/test_checks_gpu.py::t",
    ]


def test_every_test_carries_its_tiers_marker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is not None
    assert request.node.get_closest_marker("unit") is None


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    serial: alone\n")
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.serial
        def test_judges_ranks():
            pass

        def test_plain():
            pass
    """
    )


def test_a_serial_test_skips_with_its_reason_on_an_xdist_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    res = pytester.runpytest_inprocess("-rs")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["*serial: judged against wall time or other ranks*pytest -m serial*"])


def test_the_serial_phase_runs_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.runpytest_inprocess("-m", "serial").assert_outcomes(passed=1, deselected=1)


def test_an_xdist_group_runs_on_one_worker_and_builds_its_module_fixture_once(
    pytester: pytest.Pytester,
) -> None:
    """pytest 9.2 ignores the node-id suffix xdist 3.8 sets for ``--dist loadgroup``, so a
    group was spread over the workers and its module fixture built on each (CI: the bench
    fixture's 117 s, twice). The dev extra pins pytest below 9.2, where the group is one
    worker's again."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    serial: alone\n")
    made = pytester.path / "made.log"
    pytester.makepyfile(
        test_grouped=f"""
        import os
        import pytest

        pytestmark = pytest.mark.xdist_group("g")

        @pytest.fixture(scope="module")
        def built():
            with open({str(made)!r}, "a") as f:
                f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

        @pytest.mark.parametrize("i", range(6))
        def test_uses_it(built, i):
            pass
    """
    )
    res = pytester.runpytest_subprocess(
        "-p", "xdist", "-n", "3", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"
    )
    res.assert_outcomes(passed=6)
    assert len(made.read_text().split()) == 1, made.read_text()  # one worker built it, once
    res.stdout.fnmatch_lines(["*test_uses_it[[]0[]]@g*"])


def test_the_kube_tier_runs_each_plane_on_one_worker_and_starts_each_plane_once(
    pytester: pytest.Pytester,
) -> None:
    """make test runs tests/kube on three workers: tests/kube/conftest.py groups its tests by
    the plane they use (one per flavour, and a second plain one for the modules it names),
    so each worker starts one plane, and a plane is never started by two workers at once
    (they would share its folder). The planes are stand-ins here that record who started
    them; the hook is the tier's own conftest."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    serial: alone\n    kube: tier\n")
    started = pytester.path / "started.log"
    kube = pytester.path / "tests" / "kube"
    kube.mkdir(parents=True)
    (kube / "_kubeenv.py").write_text(f"""
import os


class Plane:
    pass


class Planes:
    def __init__(self):
        self.seen = {{}}

    def get(self, flavor, slot=""):
        key = flavor + ("-" + slot if slot else "")
        if key not in self.seen:
            with open({str(started)!r}, "a") as f:
                f.write(os.environ["PYTEST_XDIST_WORKER"] + " " + key + "\\n")
            self.seen[key] = flavor
        return flavor

    def stop(self):
        pass
""")
    (kube / "conftest.py").write_text((ROOT / "tests" / "kube" / "conftest.py").read_text())
    (kube / "test_planes.py").write_text("""
import pytest


@pytest.mark.parametrize("flavor", ["openshift", "plain"])
def test_by_parameter(flavor, request):
    assert request.getfixturevalue(flavor) == flavor


@pytest.mark.parametrize("i", range(4))
def test_openshift(openshift, i):
    assert openshift == "openshift"


@pytest.mark.parametrize("i", range(4))
def test_plain(plain, i):
    assert plain == "plain"
""")
    (kube / "test_time_admission.py").write_text("""
import pytest


@pytest.mark.parametrize("i", range(4))
def test_on_the_second_plain_plane(plain, i):
    assert plain == "plain"
""")
    res = pytester.runpytest_subprocess(
        "-p",
        "xdist",
        "-n",
        "3",
        "--dist",
        "loadgroup",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(pytester.path),
        "tests/kube",
    )
    res.assert_outcomes(passed=14)
    lines = started.read_text().split("\n")[:-1]
    # each plane once, the second plain one for its module only
    assert sorted(x.split()[1] for x in lines) == ["openshift", "plain", "plain-2"], lines
    workers = {plane: w for w, plane in (x.split() for x in lines)}
    assert len(set(workers.values())) == 3, lines  # on three workers


def test_a_unit_test_over_the_budget_is_reported_with_where_its_time_went(
    pytester: pytest.Pytester,
) -> None:
    """The unit tier's report (tests/conftest.py), on xdist workers as make unit runs it:
    a test that sleeps past a second is listed as waiting, one that computes past it as
    CPU, a module fixture's slow setup as that test's setup; a quick test and a slow test
    outside the unit tier are not. It reports, it does not fail."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(
        "[pytest]\nmarkers =\n    serial: alone\n    unit: tier\n    integration: tier\n"
    )
    unit = pytester.path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_budget.py").write_text(
        "import time\n"
        "import pytest\n\n"
        "@pytest.fixture(scope='module')\n"
        "def slow_fixture():\n"
        "    time.sleep(1.1)\n\n"
        "def test_sleeps():\n"
        "    time.sleep(1.1)\n\n"
        "def test_computes():\n"
        "    end = time.process_time() + 1.1\n"
        "    while time.process_time() < end:\n"
        "        pass\n\n"
        "def test_quick():\n"
        "    pass\n\n"
        "def test_uses_the_fixture(slow_fixture):\n"
        "    pass\n"
    )
    other = pytester.path / "tests" / "integration"
    other.mkdir(parents=True)
    (other / "test_long.py").write_text("import time\n\ndef test_waits():\n    time.sleep(1.1)\n")
    res = pytester.runpytest_subprocess("-p", "xdist", "-n", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=5)
    res.stdout.fnmatch_lines(
        [
            "unit tier: 3 test(s) took 1 s or more*",
            "*s wall,*s CPU,*s queued (*)  tests/unit/test_budget.py::*",
        ]
    )
    out = res.stdout.str()
    assert "(waiting)  tests/unit/test_budget.py::test_sleeps (call)" in out, out
    assert "(CPU)  tests/unit/test_budget.py::test_computes (call)" in out, out
    assert "tests/unit/test_budget.py::test_uses_the_fixture (setup)" in out, out
    assert "test_quick" not in out and "test_long.py" not in out, out
