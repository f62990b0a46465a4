"""A run's metrics where a fleet looks: scraped through a real node_exporter, pushed over HTTP.

node_exporter is built from its Go module (mlenv/testing/nodeexporter.py, cached in
~/.cache/mlenv); its textfile collector reads the file ``mlenv metrics RUN --textfile DIR``
writes, and what its ``/metrics`` serves is parsed back with prometheus_client's parser,
labels intact. The Pushgateway's Go module is not served here, so ``--push`` is tested
against a small HTTP server that answers the Pushgateway's documented API (``PUT
/metrics/job/<job>{/<label>/<value>}``, text-format body, 200 on success, 400 with a
message on a bad push): the request is checked, not a real gateway's handling of it.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from mlenv.acceptance.records import prom
from mlenv.cli.app import app
from mlenv.testing import nodeexporter

RUN_ID = "20261129-020000-0a1b2c"
UUID0 = "GPU-513536b6-7d19-9063-b049-1e69664bb298"


def _run_folder(tmp_path: Path) -> Path:
    """A recorded run's folder as a GPU run leaves it: results.json and record.json."""
    d = tmp_path / "run"
    d.mkdir()
    doc: dict[str, Any] = {
        "run_id": RUN_ID,
        "finished": "2026-11-29T02:00:00+00:00",
        "verdict": "FAIL",
        "node_verdicts": {
            "nodes": [
                {
                    "node": "gpu-a",
                    "status": "FAIL",
                    "action": {"id": "reset-gpu", "quarantine": True},
                },
                {"node": "gpu-b", "status": "PASS", "action": {"id": "none", "quarantine": False}},
            ]
        },
        "checks": [
            {
                "name": "memory.h2d",
                "status": "FAIL",
                "scope": "rank",
                "node": "gpu-a",
                "rank": 0,
                "metrics": {"h2d_gbps": 12.25, "d2h_gbps": 51.0},
                "reasons": ["h2d_gbps = 12.25, expected >= 52"],
                "details": {
                    "gpu_uuid": UUID0,
                    "judged_by": {
                        "h2d_gbps": [{"op": ">=", "value": 52.0, "by": "per-SKU floor H100 SXM"}]
                    },
                },
            },
            {
                "name": "fabric.ports",
                "status": "PASS",
                "scope": "node",
                "node": "gpu-b",
                "rank": None,
                "metrics": {"rate_gbps": 400.0, "delta_symbol_error": 0.0},
                "reasons": [],
                "details": {"port": "mlx5_ib0:1"},
            },
        ],
    }
    (d / "results.json").write_text(json.dumps(doc))
    (d / "record.json").write_text(json.dumps({"run_id": RUN_ID, "cluster": "prod-h100"}))
    return d


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@pytest.fixture(scope="module")
def node_exporter_binary() -> Path:
    try:
        return nodeexporter.build()
    except nodeexporter.BuildError as e:
        pytest.skip(f"node_exporter cannot be built here: {e}")


def test_node_exporter_serves_the_run_with_its_labels(
    tmp_path: Path, node_exporter_binary: Path
) -> None:
    run = _run_folder(tmp_path)
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    r = CliRunner().invoke(app, ["metrics", str(run), "--textfile", str(textfile)])
    assert r.exit_code == 0, r.output
    assert (textfile / "mlenv_acceptance_prod-h100.prom").is_file()
    with nodeexporter.serving(textfile) as url:
        with urllib.request.urlopen(url, timeout=10) as resp:
            scraped = resp.read().decode()
    got = _samples(scraped)
    # node_exporter read the file without error
    assert got[("node_textfile_scrape_error", frozenset())] == 0.0
    ours = _samples(
        prom.render(json.loads((run / "results.json").read_text()), "prod-h100").decode()
    )
    assert ours and all(got.get(k) == v for k, v in ours.items()), {
        k: (v, got.get(k)) for k, v in ours.items() if got.get(k) != v
    }
    h2d = {
        "cluster": "prod-h100",
        "run_id": RUN_ID,
        "check": "memory.h2d",
        "metric": "h2d_gbps",
        "scope": "rank",
        "node": "gpu-a",
        "rank": "0",
        "gpu_uuid": UUID0,
        "port": "",
    }
    assert got[("mlenv_acceptance_figure", frozenset(h2d.items()))] == 12.25
    bar = {**h2d, "op": ">=", "judged_by": "per-SKU floor H100 SXM"}
    assert got[("mlenv_acceptance_bar", frozenset(bar.items()))] == 52.0


class _Gateway(http.server.BaseHTTPRequestHandler):
    """The Pushgateway's push API as its README documents it, recording each request."""

    seen: list[dict[str, Any]] = []
    refuse: str | None = None

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        type(self).seen.append(
            {"path": self.path, "ctype": self.headers.get("Content-Type", ""), "body": body}
        )
        if not self.path.startswith("/metrics/job/"):
            self.send_response(404)
            self.end_headers()
            return
        refuse = type(self).refuse
        if refuse:
            msg = refuse.encode()
            self.send_response(400)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@contextmanager
def _gateway(refuse: str | None = None) -> Iterator[str]:
    _Gateway.seen = []
    _Gateway.refuse = refuse
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_push_puts_the_run_under_its_cluster_group(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    with _gateway() as url:
        r = CliRunner().invoke(app, ["metrics", str(run), "--push", url])
    assert r.exit_code == 0, r.output
    (req,) = _Gateway.seen
    assert req["path"] == "/metrics/job/mlenv_acceptance/cluster/prod-h100"
    assert req["ctype"].startswith("text/plain; version=0.0.4")
    got = _samples(req["body"])
    assert (
        got[
            (
                "mlenv_acceptance_node_action",
                frozenset(
                    {
                        "cluster": "prod-h100",
                        "run_id": RUN_ID,
                        "node": "gpu-a",
                        "action": "reset-gpu",
                        "quarantine": "true",
                    }.items()
                ),
            )
        ]
        == 1.0
    )


def test_a_refused_or_unreachable_push_is_an_error(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    with _gateway(refuse="pushed metrics are invalid or inconsistent") as url:
        r = CliRunner().invoke(app, ["metrics", str(run), "--push", url])
    assert r.exit_code == 3 and "push to" in r.output, r.output
    port = nodeexporter.free_port()
    r = CliRunner().invoke(app, ["metrics", str(run), "--push", f"http://127.0.0.1:{port}"])
    assert r.exit_code == 3 and "failed" in r.output, r.output


def test_latest_pushes_the_clusters_last_recorded_run(tmp_path: Path, monkeypatch) -> None:
    """What the hosts re-check's cron line runs after each run."""
    run = _run_folder(tmp_path)
    hist = tmp_path / "history"
    (hist / "prod-h100").mkdir(parents=True)
    (hist / "prod-h100" / "history.jsonl").write_text(
        json.dumps({"run_id": "20261128-020000-000000", "report_dir": str(tmp_path / "gone")})
        + "\n"
        + json.dumps({"run_id": RUN_ID, "report_dir": str(run)})
        + "\n"
    )
    monkeypatch.setenv("MLENV_HISTORY_DIR", str(hist))
    with _gateway() as url:
        r = CliRunner().invoke(app, ["metrics", "latest", "--cluster", "prod-h100", "--push", url])
    assert r.exit_code == 0, r.output
    (req,) = _Gateway.seen
    assert req["path"] == "/metrics/job/mlenv_acceptance/cluster/prod-h100"
    assert any(
        s.labels.get("run_id") == RUN_ID
        for f in text_string_to_metric_families(req["body"])
        for s in f.samples
    )
    r = CliRunner().invoke(app, ["metrics", "latest", "--push", "http://127.0.0.1:9"])
    assert r.exit_code == 2 and "give --cluster NAME" in r.output, r.output
    r = CliRunner().invoke(app, ["metrics", "latest", "--cluster", "other"])
    assert r.exit_code == 2 and "no recorded run" in r.output, r.output


def test_a_push_url_with_credentials_is_refused_without_echoing_them(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    r = CliRunner().invoke(app, ["metrics", str(run), "--push", "http://ops:hunter2@gw:9091"])
    assert r.exit_code == 2 and "carries credentials" in r.output, r.output
    assert "hunter2" not in r.output


def test_the_suite_pushes_its_run_when_asked(tmp_path: Path) -> None:
    """``python -m mlenv.acceptance --push-metrics URL``, as the Kubernetes and Slurm
    re-checks run it: rank 0 pushes the recorded run under its cluster's group; a gateway
    that is down is a warning, never the verdict."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "MLENV_CLUSTER": "lab",
        "MLENV_HISTORY_DIR": str(tmp_path / "h"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    cmd = [sys.executable, "-m", "mlenv.acceptance", "--checks", "environment"]
    with _gateway() as url:
        r = subprocess.run(
            [*cmd, "--report-dir", str(tmp_path / "r1"), "--push-metrics", url],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    assert r.returncode == 0, r.stdout + r.stderr
    (req,) = _Gateway.seen
    assert req["path"] == "/metrics/job/mlenv_acceptance/cluster/lab"
    run_id = json.loads((tmp_path / "r1" / "results.json").read_text())["run_id"]
    verdicts = {
        s.labels.get("run_id"): s.labels.get("verdict")
        for f in text_string_to_metric_families(req["body"])
        for s in f.samples
        if s.name == "mlenv_acceptance_run_verdict" and s.value == 1.0
    }
    assert verdicts.get(run_id) == "PASS", verdicts
    # a line past 100 columns goes on under the prefix: read it back as one
    assert f"metrics pushed to {url}" in re.sub(r"\n\[acceptance\] +", " ", r.stdout)
    port = nodeexporter.free_port()
    r = subprocess.run(
        [*cmd, "--report-dir", str(tmp_path / "r2"), "--push-metrics", f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0 and "warning: metrics not pushed" in r.stdout, r.stdout + r.stderr
