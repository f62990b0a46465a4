"""The fleet settings of a scheduled re-check on the real control plane:
``acceptance.metrics.push`` (the CronJob's own command, run as its ServiceAccount as
tests/kube/test_recheck.py runs it, pushes the run's series from pod-0 to a gateway) and
``acceptance.node_events`` (``mlenv history --fetch`` records the run's Event on the Node
pod-0 ran on).

The gateway is a small HTTP server on this machine answering the Pushgateway's documented
push API (``PUT /metrics/job/<job>{/<label>/<value>}``): the Pushgateway's Go module is not
served to this project's build. It listens on the plane's bridge address, which is what a
pod reaches through its default route (mlenv/testing/kube/podnet.py).
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from _kubeenv import Plane, checkout, mlenv
from prometheus_client.parser import text_string_to_metric_families
from test_recheck import PULLABLE, SA, SCHEDULE, _ok, _token_kubeconfig

pytestmark = [pytest.mark.kube]  # grouped per flavour by conftest.py
# environment alone judges no node (UNKNOWN); compute.matmul on the CPU rank passes it
CHECKS = "environment,compute.matmul"


class _Gateway(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        type(self).seen.append({"path": self.path, "body": body})
        self.send_response(200 if self.path.startswith("/metrics/job/") else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@contextmanager
def _gateway(host: str) -> Iterator[str]:
    _Gateway.seen = []
    srv = http.server.ThreadingHTTPServer((host, 0), _Gateway)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://{host}:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_recheck_pushes_from_pod_0_and_the_fetch_tells_the_node(
    openshift: Plane, tmp_path: Path
) -> None:
    p = openshift
    bridge = json.loads((p.tier.folder / "network.json").read_text())["gateway"]
    ns = p.namespace("push", user_role=None)
    name = f"push-{ns.rsplit('-', 1)[1]}"
    root = checkout(tmp_path, name, "local", ns, "tcp", p.flavor)
    cfg = root / "clusters" / f"{name}.yaml"
    with _gateway(bridge) as url:
        data = yaml.safe_load(cfg.read_text())
        data["gpus"]["default_nodes"] = 1
        data["acceptance"] = {
            "schedule": SCHEDULE,
            "profile": "quick",
            "metrics": {"push": url},
            "node_events": True,
        }
        data.setdefault("image", {})["ref"] = PULLABLE
        cfg.write_text(yaml.safe_dump(data, sort_keys=False))
        _ok(mlenv(root, p, "deploy", name, "--mode", "tcp"), "deploy")
        try:
            cj = p.json("get", "cronjob", SA, "-n", ns)
            (ctr,) = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
            assert ctr["command"][-3:] == ["--", "--push-metrics", url]
            kubeconfig = _token_kubeconfig(p, ns, tmp_path / "sa.kubeconfig")
            # the CronJob's own command (its --push-metrics last), the checks narrowed after it
            argv = [
                p.kubectl,
                f"--kubeconfig={kubeconfig}",
                *ctr["command"][1:],
                "--checks",
                CHECKS,
            ]
            res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
            said = res.stdout + res.stderr
            # a line past 100 columns goes on under the prefix: read it back as one
            joined = re.sub(r"\n\[acceptance\] +", " ", said)
            assert res.returncode == 0 and f"metrics pushed to {url}" in joined, said[-4000:]
            (req,) = _Gateway.seen
            assert req["path"] == f"/metrics/job/mlenv_acceptance/cluster/{name}"
            verdict = {
                s.labels["run_id"]: s.labels["verdict"]
                for f in text_string_to_metric_families(req["body"])
                for s in f.samples
                if s.name == "mlenv_acceptance_run_verdict" and s.value == 1.0
            }
            (results,) = (p.volume_dir(ns, "workspace-ml-dev-env-0") / "results").glob(
                "*/results.json"
            )
            doc = json.loads(results.read_text())
            assert verdict == {doc["run_id"]: "PASS"}

            # the fetch brings the run home and tells the Node pod-0 ran on
            node = p.json("get", "pod", "ml-dev-env-0", "-n", ns)["spec"]["nodeName"]
            judged = {
                n["node"]: (n["node_from"], n["status"]) for n in doc["node_verdicts"]["nodes"]
            }
            assert judged == {node: ("kubernetes", "PASS")}, judged
            fetched = _ok(mlenv(root, p, "history", name, "--fetch"), "history --fetch")
            assert f"told 1 Node(s) run {doc['run_id']}'s verdict" in fetched, fetched
            events = p.json(
                "get",
                "events",
                "-n",
                "default",
                f"--field-selector=involvedObject.kind=Node,involvedObject.name={node}",
            )["items"]
            ours = [e for e in events if doc["run_id"] in e.get("message", "")]
            assert [(e["type"], e["reason"]) for e in ours] == [("Normal", "MlenvAcceptancePassed")]
            assert ours[0]["message"].startswith(f"mlenv run {doc['run_id']}: PASS, action none:")
        finally:
            mlenv(root, p, "teardown", name)
