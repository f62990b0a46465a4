"""One escaping rule for every output: a crafted report (ESC starting an OSC title write,
a CSI clear-screen, a bidi override, NUL, a lone surrogate) goes through every verb that
prints or writes it, and no control character comes out raw; junit.xml stays valid XML."""

from __future__ import annotations

import contextlib
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_run_folders import A, _killed_run
from typer.testing import CliRunner

from mlenv.cli.app import app

# matplotlib (about 0.6 s of CPU to import) comes in with the module, once per worker, as
# the torch tests import torch: the first test that draws does not carry the import.
# Without it, only the tests that draw fail.
with contextlib.suppress(ImportError):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

EVIL = "\x1b]0;pwned\x07\x1b[2J\u202egnp.exe\x00\x0b\x85\ufffe"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if not (c.isprintable() or c in "\n\t")]


def _crafted(tmp_path: Path) -> Path:
    run = tmp_path / "checkout" / "acceptance-report" / A
    (tmp_path / "checkout" / "clusters").mkdir(parents=True)
    _killed_run(run)
    entry = json.loads((run / "results.jsonl").read_text())
    entry.update(
        status="FAIL",
        node=f"h{EVIL}",
        reasons=[f"tflops below {EVIL}"],
        details={"evidence": [f"NCCL says {EVIL}"]},
    )
    (run / "results.jsonl").write_text(json.dumps(entry) + "\n")
    return run


def _point_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLENV_ROOT", str(tmp_path / "checkout"))
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "h"))
    monkeypatch.delenv("MLENV_CLUSTER", raising=False)


@pytest.fixture(scope="module")
def finalized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """The crafted run, finalised once for the module (its summary.md, junit.xml, plots
    and history line: half a second of CPU), and what finalize printed; the verbs of the
    tests below read it. Yields the run, finalize's stdout and its whole output."""
    tmp_path = tmp_path_factory.mktemp("crafted")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _point_at(tmp_path, monkeypatch)
        run = _crafted(tmp_path)
        r = CliRunner().invoke(app, ["finalize", str(run)])
        assert r.exit_code == 0, r.output
        yield run, r.stdout, r.output


@pytest.fixture()
def crafted(finalized: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    run = finalized[0]
    _point_at(run.parents[2], monkeypatch)
    return run


def test_finalize_escapes_the_crafted_report_in_what_it_prints_and_every_file(
    finalized: tuple[Path, str, str],
) -> None:
    run, stdout, printed = finalized
    assert "rank 0 (h\\x1b]0;pwned\\x07\\x1b[2J\\u202egnp.exe\\x00" in stdout
    summary = (run / "summary.md").read_text(encoding="utf-8")
    assert "\\x1b]0;pwned" in summary
    junit = (run / "junit.xml").read_text(encoding="utf-8")
    ET.fromstring(junit.encode("utf-8"))  # a control character would make this raise
    assert "tflops below \\x1b]0;pwned\\x07" in junit
    for where, text in {"finalize": printed, "summary.md": summary, "junit.xml": junit}.items():
        assert _raw_controls(text) == [], where


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "local", "--wide"],
        ["history", "local", "-o", "json"],
        ["compare", "RUN", "RUN", "--all"],
        ["compare", "RUN", "RUN", "-o", "json"],
    ],
    ids=" ".join,
)
def test_every_verb_escapes_the_crafted_report(crafted: Path, argv: list[str]) -> None:
    r = CliRunner().invoke(app, [str(crafted) if a == "RUN" else a for a in argv])
    assert r.exit_code in (0, 1), (argv, r.output)
    assert _raw_controls(r.output) == [], argv


def test_bundle_and_its_verify_escape_the_crafted_report(crafted: Path, tmp_path: Path) -> None:
    for argv in (
        ["bundle", str(crafted), "--out", str(tmp_path / "b.tar.gz")],
        ["bundle", "verify", str(tmp_path / "b.tar.gz")],
    ):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code in (0, 1), (argv, r.output)
        assert _raw_controls(r.output) == [], argv


def test_junit_of_every_xml_invalid_character_still_parses() -> None:
    from mlenv.acceptance.core.result import CheckResult, Status
    from mlenv.acceptance.reports.junit import to_junit

    bad = "".join(chr(c) for c in range(32)) + "\x7f\x80\x9f\ud800\ufffe\uffff"
    r = CheckResult(f"x{bad}", Status.FAIL, "rank", bad, 0, reasons=[bad])
    xml = to_junit([r], "FAIL", [bad], wall_s=1.0)
    ET.fromstring(xml.encode("utf-8", errors="strict"))
