"""One escaping rule for every output: a crafted report (ESC starting an OSC title write,
a CSI clear-screen, a bidi override, NUL, a lone surrogate) goes through every verb that
prints or writes it, and no control character comes out raw; junit.xml stays valid XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_run_folders import A, _killed_run
from typer.testing import CliRunner

from mlenv.cli.app import app

EVIL = "\x1b]0;pwned\x07\x1b[2J\u202egnp.exe\x00\x0b\x85\ufffe"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if not (c.isprintable() or c in "\n\t")]


@pytest.fixture()
def crafted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "checkout"
    (root / "clusters").mkdir(parents=True)
    run = root / "acceptance-report" / A
    _killed_run(run)
    entry = json.loads((run / "results.jsonl").read_text())
    entry.update(
        status="FAIL",
        node=f"h{EVIL}",
        reasons=[f"tflops below {EVIL}"],
        details={"evidence": [f"NCCL says {EVIL}"]},
    )
    (run / "results.jsonl").write_text(json.dumps(entry) + "\n")
    monkeypatch.setenv("MLENV_ROOT", str(root))
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(tmp_path / "h"))
    monkeypatch.delenv("MLENV_CLUSTER", raising=False)
    return run


def test_a_crafted_report_is_escaped_by_every_verb_and_every_file(
    crafted: Path, tmp_path: Path
) -> None:
    outputs: dict[str, str] = {}
    r = CliRunner().invoke(app, ["finalize", str(crafted)])
    assert r.exit_code == 0, r.output
    assert "rank 0 (h\\x1b]0;pwned\\x07\\x1b[2J\\u202egnp.exe\\x00" in r.stdout
    outputs["finalize"] = r.output
    for argv in (
        ["history", "local", "--wide"],
        ["history", "local", "-o", "json"],
        ["compare", str(crafted), str(crafted), "--all"],
        ["compare", str(crafted), str(crafted), "-o", "json"],
        ["bundle", str(crafted), "--out", str(tmp_path / "b.tar.gz")],
        ["bundle", "verify", str(tmp_path / "b.tar.gz")],
    ):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code in (0, 1), (argv, r.output)
        outputs[" ".join(argv[:3])] = r.output
    summary = (crafted / "summary.md").read_text(encoding="utf-8")
    assert "\\x1b]0;pwned" in summary
    outputs["summary.md"] = summary
    junit = (crafted / "junit.xml").read_text(encoding="utf-8")
    ET.fromstring(junit.encode("utf-8"))  # a control character would make this raise
    assert "tflops below \\x1b]0;pwned\\x07" in junit
    outputs["junit.xml"] = junit
    for where, text in outputs.items():
        assert _raw_controls(text) == [], where


def test_junit_of_every_xml_invalid_character_still_parses() -> None:
    from mlenv.acceptance.core.result import CheckResult, Status
    from mlenv.acceptance.reports.junit import to_junit

    bad = "".join(chr(c) for c in range(32)) + "\x7f\x80\x9f\ud800\ufffe\uffff"
    r = CheckResult(f"x{bad}", Status.FAIL, "rank", bad, 0, reasons=[bad])
    xml = to_junit([r], "FAIL", [bad], wall_s=1.0)
    ET.fromstring(xml.encode("utf-8", errors="strict"))
