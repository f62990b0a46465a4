"""``mlenv launch``: pod-0 through exec, streamed; ``--torchrun`` runs in every pod at once."""

from __future__ import annotations

import json

from _fakeenv import fake_state, run

from mlenv.testing.fakecluster import FakeCluster

RUN_TORCHRUN = "python -m mlenv.pod run-torchrun"


def deployed(tmp_path, monkeypatch):
    state = fake_state(tmp_path)
    assert run(["deploy", "barcelona", "--timeout", "60"], state, monkeypatch).exit_code == 0
    return state, FakeCluster.load(str(state))


def test_launch_streams_and_passes_exit_code(tmp_path, monkeypatch) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.exec_responses["python -m mlenv.pod launch"] = {
        "rc": 1,
        "stdout": "rank 0 ok\nverdict FAIL\n",
    }
    fake.save(str(state))
    r = run(["launch", "barcelona", "train.py", "--", "--epochs", "1"], state, monkeypatch)
    assert r.exit_code == 1 and "verdict FAIL" in r.output
    calls = FakeCluster.load(str(state)).calls
    assert [
        "exec",
        "ml-dev-env-0",
        "python",
        "-m",
        "mlenv.pod",
        "launch",
        "train.py",
        "--epochs",
        "1",
    ] in calls


def test_acceptance_options_reach_the_suite_behind_a_double_dash(tmp_path, monkeypatch) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.exec_responses["python -m mlenv.pod launch"] = {"rc": 0}
    fake.save(str(state))
    r = run(["launch", "barcelona", "--", "--checks", "compute"], state, monkeypatch)
    assert r.exit_code == 0, r.output
    assert [
        "exec",
        "ml-dev-env-0",
        *"python -m mlenv.pod launch -- --checks compute".split(),
    ] in FakeCluster.load(str(state)).calls


def test_torchrun_starts_every_pod_with_one_run_id_and_returns_pod0s_code(
    tmp_path, monkeypatch
) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.pod_exec_responses = {
        "ml-dev-env-0": {RUN_TORCHRUN: {"rc": 1, "stdout": "torchrun node 0/2\nverdict FAIL\n"}},
        "ml-dev-env-1": {RUN_TORCHRUN: {"rc": 0, "stdout": "torchrun node 1/2\n"}},
    }
    fake.save(str(state))
    r = run(
        ["launch", "barcelona", "--torchrun", "train.py", "--", "--epochs", "1"], state, monkeypatch
    )
    assert r.exit_code == 1, r.output
    assert "verdict FAIL" in r.stdout and "torchrun node 1/2" not in r.stdout  # pod-0 streamed
    runs = [
        c
        for c in FakeCluster.load(str(state)).calls
        if c[:6] == ["exec", c[1], "python", "-m", "mlenv.pod", "run-torchrun"]
    ]
    assert sorted(c[1] for c in runs) == ["ml-dev-env-0", "ml-dev-env-1"]
    argv0, argv1 = (c[2:] for c in sorted(runs))
    assert argv0 == argv1  # the same run id in every pod: one static rendezvous
    # started detached: a short exec each, then pod 0 followed and pod 1 asked how it ended
    assert argv0[4] == "--detach" and argv0[5] == "--run-id"
    assert argv0[7:] == ["train.py", "--epochs", "1"]
    rid = argv0[6]
    after = [c[1:] for c in FakeCluster.load(str(state)).calls if c[0] == "exec" and c not in runs]
    assert after == [
        [
            "ml-dev-env-0",
            "python",
            "-m",
            "mlenv.pod",
            "run-follow",
            "--run-id",
            rid,
            "--offset",
            "0",
        ],
        ["ml-dev-env-1", "python", "-m", "mlenv.pod", "run-state", "--run-id", rid],
    ]


def test_torchrun_maps_codes_and_names_a_failing_pod(tmp_path, monkeypatch) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.pod_exec_responses = {
        "ml-dev-env-0": {RUN_TORCHRUN: {"rc": 0}},
        "ml-dev-env-1": {RUN_TORCHRUN: {"rc": 3, "stderr": "rank 1 crashed\n"}},
    }
    fake.save(str(state))
    r = run(["launch", "barcelona", "--torchrun"], state, monkeypatch)
    assert r.exit_code == 0 and "warning: ml-dev-env-1 exited 3: rank 1 crashed" in r.stderr
    fake.pod_exec_responses["ml-dev-env-0"] = {RUN_TORCHRUN: {"rc": 137}}
    fake.save(str(state))
    r = run(["launch", "barcelona", "--torchrun"], state, monkeypatch)
    assert r.exit_code == 3 and "exited with status 137" in r.stderr


def test_torchrun_timeout_is_exit_3_with_one_line(tmp_path, monkeypatch) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.exec_responses[RUN_TORCHRUN] = {"hang": True}
    fake.save(str(state))
    r = run(["launch", "barcelona", "--torchrun", "--timeout", "5"], state, monkeypatch)
    assert r.exit_code == 3
    assert r.stderr.strip().splitlines() == [
        "error: exec of python -m mlenv.pod in pod ml-dev-env-0 did not finish within 5 s and "
        "was stopped (raise the limit with --timeout or MLENV_EXEC_TIMEOUT)"
    ]


def test_torchrun_needs_every_pod_running(tmp_path, monkeypatch) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.delete("Pod", "ml-dev-env-1", "ml-dev-env")  # the controller recreates it on its next tick
    fake.save(str(state))
    r = run(["launch", "barcelona", "--torchrun"], state, monkeypatch)
    assert r.exit_code == 3 and "1/2 pods Running" in r.output and "Traceback" not in r.output
    assert not [c for c in FakeCluster.load(str(state)).calls if "run-torchrun" in c]


def test_launch_before_deploy_is_exit_3_never_a_fail(tmp_path, monkeypatch) -> None:
    """kubectl exec of a missing pod exits 1, which launch would have passed on as an
    acceptance FAIL: pod-0 is checked first."""
    state = fake_state(tmp_path)
    r = run(["launch", "barcelona"], state, monkeypatch)
    assert r.exit_code == 3, r.output
    assert r.stderr.strip() == (
        "error: pod ml-dev-env-0 in ml-dev-env is not there: nothing "
        "was started (mlenv status barcelona; mlenv deploy barcelona)"
    )
    assert not [c for c in FakeCluster.load(str(state)).calls if c[0] == "exec"]


def test_peer_deadline_reaches_pod_0s_launcher_and_bad_values_exit_2(tmp_path, monkeypatch) -> None:
    """pod 0's launcher waits --deadline (120 s) for its peers; the control host
    can now set it (the kube tier's launch test needs seconds, a slow cluster more)."""
    state, fake = deployed(tmp_path, monkeypatch)
    fake.exec_responses["python -m mlenv.pod launch"] = {
        "rc": 3,
        "stderr": "error: preflight: 1 of 2 peer(s) missing",
    }
    fake.save(str(state))
    r = run(
        ["launch", "barcelona", "--peer-deadline", "7.5", "--", "--checks", "compute"],
        state,
        monkeypatch,
    )
    assert r.exit_code == 3, r.output
    assert [
        "exec",
        "ml-dev-env-0",
        *"python -m mlenv.pod launch --deadline 7.5 -- --checks compute".split(),
    ] in FakeCluster.load(str(state)).calls
    for bad in (
        ["--peer-deadline", "0"],
        ["--peer-deadline", "-1"],
        ["--peer-deadline", "5", "--torchrun"],
    ):
        r = run(["launch", "barcelona", *bad], state, monkeypatch)
        assert r.exit_code == 2 and "--peer-deadline" in r.output, (bad, r.output)


# -- racks from a Node label (nodes.topology_label), read at launch --

ZONE = "topology.kubernetes.io/zone"


def _labelled(tmp_path, monkeypatch, labels):
    """barcelona with nodes.topology_label, deployed on a fake whose Nodes carry ``labels``."""
    from _fakeenv import ROOT

    cfg = tmp_path / "barcelona.yaml"
    cfg.write_text(
        (ROOT / "clusters" / "barcelona.yaml")
        .read_text()
        .replace("nodes:\n", f"nodes:\n  topology_label: {ZONE}\n", 1)
    )
    state = fake_state(tmp_path)
    fake = FakeCluster.load(str(state))
    for node, value in labels.items():
        fake.label_node(node, {ZONE: value})
    fake.save(str(state))
    assert run(["deploy", str(cfg), "--timeout", "60"], state, monkeypatch).exit_code == 0
    fake = FakeCluster.load(str(state))
    pods = {
        n: (fake.get("Pod", n, "ml-dev-env") or {})["spec"]["nodeName"]
        for n in ("ml-dev-env-0", "ml-dev-env-1")
    }
    return cfg, state, fake, pods


def _topology_arg(calls, verb):
    argv = next(c[2:] for c in calls if c[:2] == ["exec", "ml-dev-env-0"] and verb in c)
    return json.loads(argv[argv.index("--topology") + 1]) if "--topology" in argv else None


def test_launch_hands_pod0_the_racks_of_the_pods_nodes(tmp_path, monkeypatch) -> None:
    labels = {
        f"gpu-node-0{i}.barcelona.example.com": v
        for i, v in ((1, "Rack_A"), (2, "Rack_A"), (3, "r2"), (4, "r2"))
    }
    cfg, state, fake, pods = _labelled(tmp_path, monkeypatch, labels)
    fake.exec_responses["python -m mlenv.pod"] = {"rc": 0}
    fake.save(str(state))
    want: dict[str, list[str]] = {}
    for node in pods.values():
        want.setdefault({"Rack_A": "rack-a"}.get(labels[node], labels[node]), []).append(node)
    for extra in ([], ["--torchrun"]):
        r = run(["launch", str(cfg), *extra], state, monkeypatch)
        assert r.exit_code == 0, r.output
        got = _topology_arg(
            FakeCluster.load(str(state)).calls, "run-torchrun" if extra else "launch"
        )
        assert got == want
        assert (
            f"topology: 2 of 2 node(s) in {len(want)} rack(s) from the Node label {ZONE}"
            in r.output
        )


def test_a_user_who_may_not_read_nodes_gets_one_warning_and_a_run(tmp_path, monkeypatch) -> None:
    cfg, state, fake, _ = _labelled(
        tmp_path, monkeypatch, {"gpu-node-01.barcelona.example.com": "a"}
    )
    fake.denied = ["get nodes"]
    fake.exec_responses["python -m mlenv.pod launch"] = {"rc": 0}
    fake.save(str(state))
    r = run(["launch", str(cfg)], state, monkeypatch)
    assert r.exit_code == 0, r.output
    warned = [ln for ln in r.stderr.splitlines() if "topology" in ln]
    assert len(warned) == 1 and "may not read Nodes (get nodes is cluster-scoped)" in warned[0]
    assert _topology_arg(FakeCluster.load(str(state)).calls, "launch") is None


def test_without_topology_label_no_node_is_read(tmp_path, monkeypatch) -> None:
    state, fake = deployed(tmp_path, monkeypatch)
    fake.denied = ["get nodes"]  # would warn if launch looked
    fake.exec_responses["python -m mlenv.pod launch"] = {"rc": 0}
    fake.save(str(state))
    r = run(["launch", "barcelona"], state, monkeypatch)
    assert r.exit_code == 0 and "topology" not in r.output
    assert _topology_arg(FakeCluster.load(str(state)).calls, "launch") is None


def test_sigterm_during_a_torchrun_launch_stops_every_rank_and_exits_143(
    tmp_path, monkeypatch
) -> None:
    """The ranks run detached, so nothing stops them unless launch does: a SIGTERM (CI
    cancelling the job) while pod 0 is followed stops the rank in every pod, pod 0 is
    followed to its end, and the exit is 143 with one line."""
    import os
    import signal

    state, fake = deployed(tmp_path, monkeypatch)
    fake.exec_responses[RUN_TORCHRUN] = {"hang": True}
    fake.save(str(state))
    inner = FakeCluster.exec_stream
    follows: list[int] = []

    def signalled(self, pod, ns, argv, out, **kw):
        follows.append(1)
        if len(follows) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return inner(self, pod, ns, argv, out, **kw)

    def unhandled(signum, frame):  # what would end mlenv (and this test run) without launch's
        raise RuntimeError("SIGTERM not handled by launch")

    monkeypatch.setattr(FakeCluster, "exec_stream", signalled)
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        r = run(["launch", "barcelona", "--torchrun"], state, monkeypatch)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert r.exit_code == 143, r.output
    assert r.stderr.strip().splitlines()[-1] == "interrupted"
    calls = FakeCluster.load(str(state)).calls
    stopped = sorted(c[1] for c in calls if c[0] == "exec" and "run-stop" in c)
    assert stopped == ["ml-dev-env-0", "ml-dev-env-1"]
    assert len(follows) == 2 and "interrupted" in r.stdout  # pod 0's last words
