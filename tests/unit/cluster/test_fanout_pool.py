"""The one bounded pool of the fan-outs over pods: the bound holds, the deadline ends the
wait, the progress line counts, and sync goes through it."""

from __future__ import annotations

import threading

import pytest

from mlenv.cluster.pool import (
    DEFAULT_BOUND,
    FanOutDeadline,
    bounded_map,
    fanout_bound,
    fanout_deadline,
)
from mlenv.errors import InputError


class Gauge:
    """Counts calls in flight, and the most at once; each call waits until enough others
    have started (or none are left to start), so a pool that could run more at once would."""

    def __init__(self, items: int, bound: int) -> None:
        self.lock = threading.Lock()
        self.now = self.peak = self.started = 0
        self.items, self.bound = items, bound
        self.full = threading.Condition(self.lock)

    def __call__(self, item: int) -> int:
        with self.lock:
            self.now += 1
            self.started += 1
            self.peak = max(self.peak, self.now)
            # hold until the pool is full (or the rest are all started): the bound is tested
            self.full.notify_all()
            self.full.wait_for(
                lambda: self.now >= self.bound or self.started >= self.items, timeout=5
            )
            self.now -= 1
        return item * 2


@pytest.mark.parametrize("bound", [1, 4, DEFAULT_BOUND])
def test_the_bound_holds_and_the_results_keep_their_order(bound: int) -> None:
    """A thread per pod opened 254 exec streams at once at 256 pods (fanout, gpu-info and
    sync had their own pools). Fails on the code before: there was no shared bound."""
    gauge = Gauge(200, bound)
    got = bounded_map(gauge, range(200), bound=bound)
    assert got == [i * 2 for i in range(200)]
    assert gauge.peak == bound


def test_the_bound_comes_from_mlenv_fanout_and_bad_values_are_input_errors() -> None:
    assert fanout_bound({}) == DEFAULT_BOUND == 16
    assert fanout_bound({"MLENV_FANOUT": "4"}) == 4
    for bad in ("0", "-3", "many", "2.5"):
        with pytest.raises(InputError, match="MLENV_FANOUT"):
            fanout_bound({"MLENV_FANOUT": bad})
    assert fanout_deadline({}) is None
    assert fanout_deadline({"MLENV_FANOUT_DEADLINE_S": "90"}) == 90.0
    with pytest.raises(InputError, match="MLENV_FANOUT_DEADLINE_S"):
        fanout_deadline({"MLENV_FANOUT_DEADLINE_S": "0"})


def test_the_total_deadline_ends_the_wait_saying_how_many_finished() -> None:
    release = threading.Event()

    def stuck(item: int) -> int:
        if item >= 2:
            release.wait(5)
        return item

    try:
        # items 0 and 1 return at once (on a loaded machine perhaps not within the deadline)
        with pytest.raises(FanOutDeadline, match=r"synced [0-2]/6 within the 0.1 s deadline") as e:
            bounded_map(stuck, range(6), bound=3, deadline_s=0.1, what="synced")
        assert e.value.exit_code == 3
    finally:
        release.set()


def test_progress_counts_about_every_tenth_and_only_past_the_bound() -> None:
    said: list[str] = []
    bounded_map(lambda i: i, range(40), bound=4, progress=said.append, what="synced")
    assert said[-1] == "synced 40/40"
    assert 4 <= len(said) <= 11 and all(s.startswith("synced ") for s in said)
    quiet: list[str] = []
    bounded_map(lambda i: i, range(4), bound=4, progress=quiet.append)
    assert quiet == []


def test_the_first_error_ends_the_fan_out() -> None:
    def fails_on_three(item: int) -> int:
        if item == 3:
            raise RuntimeError("pod 3 is gone")
        return item

    with pytest.raises(RuntimeError, match="pod 3 is gone"):
        bounded_map(fails_on_three, range(8), bound=2)
    assert bounded_map(fails_on_three, [], bound=2) == []


def test_sync_holds_mlenv_fanout(local_cfg, fake_for, tmp_path, monkeypatch) -> None:
    """sync's listings, copies and checks go through the pool: MLENV_FANOUT=2 holds
    every one of them to two pods at once, and a large sync says its progress."""
    from mlenv.cluster.deploy import DeployOptions, deploy
    from mlenv.cluster.sync import sync

    n = 6
    fake = fake_for(local_cfg, nodes=n)
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60, nodes=n), fake)
    (tmp_path / "a.py").write_text("x = 1\n")
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}
    inner_exec, inner_rsync, inner_stream = fake.exec, fake.rsync, fake.copy_planned

    def counted(fn):
        def call(*args, **kwargs):
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    state["now"] -= 1

        return call

    monkeypatch.setattr(fake, "exec", counted(inner_exec))
    monkeypatch.setattr(fake, "rsync", counted(inner_rsync))
    monkeypatch.setattr(fake, "copy_planned", counted(inner_stream))
    monkeypatch.setenv("MLENV_FANOUT", "2")
    said: list[str] = []
    sync(local_cfg, fake, str(tmp_path), say=said.append)
    assert 1 <= state["peak"] <= 2
    assert f"synced {n}/{n}" in said and f"checked {n}/{n}" in said


def test_status_asks_the_pods_through_the_pool_and_not_at_all_for_a_tcp_deploy(
    barcelona, fake_for, monkeypatch
) -> None:
    """status read each pod's RDMA interfaces with one exec after another (116 s at 512
    pods), also for a TCP deploy of an RDMA config, where pod init checked none. Fails on
    the code before: the TCP deploy's status ran an exec per pod."""
    from mlenv.cluster.deploy import DeployOptions, deploy
    from mlenv.cluster.status import status

    execs: list[str] = []
    for mode in ("tcp", "rdma"):
        fake = fake_for(barcelona)
        deploy(barcelona, DeployOptions(mode=mode, timeout=60), fake)
        inner = fake.exec
        execs.clear()

        def counted(pod, *args, _inner=inner, **kwargs):
            execs.append(pod)
            return _inner(pod, *args, **kwargs)

        monkeypatch.setattr(fake, "exec", counted)
        rep = status(barcelona, fake)
        running = sorted(p.name for p in rep.pods if p.phase == "Running")
        assert len(running) > barcelona.gpus.default_nodes - 1  # the workers (and dev Pod)
        assert sorted(execs) == ([] if mode == "tcp" else running), mode


def test_status_reads_the_workload_its_pods_and_claims_in_one_call(
    barcelona, fake_for, monkeypatch
) -> None:
    """Every read is a client process (each 0.5-3 s on the loaded tier): status read the
    StatefulSet for its counts and again to split the pods, then the pods and the claims
    (four processes; kubectl's floor is one ``get pods,pvc``). Now one list of the three
    kinds by the instance's labels, nothing read alone."""
    from mlenv.cluster.deploy import DeployOptions, deploy
    from mlenv.cluster.status import status

    fake = fake_for(barcelona)
    deploy(barcelona, DeployOptions(mode="tcp", timeout=60), fake)
    reads: list[tuple[str, ...]] = []
    inner_get, inner_list, inner_many = fake.get, fake.list, fake.list_many

    inside: list[
        str
    ] = []  # the fake's list_many answers by its own list: not a read of the caller's

    def counted(what, fn):
        def call(*args, **kwargs):
            if not inside:
                reads.append((what, *map(str, args[:1])))
            inside.append(what)
            try:
                return fn(*args, **kwargs)
            finally:
                inside.pop()

        return call

    monkeypatch.setattr(fake, "get", counted("get", inner_get))
    monkeypatch.setattr(fake, "list", counted("list", inner_list))
    monkeypatch.setattr(fake, "list_many", counted("list_many", inner_many))
    rep = status(barcelona, fake)
    assert reads == [("list_many", "['StatefulSet', 'Pod', 'PersistentVolumeClaim']")], reads
    assert [p.name for p in rep.pods] == [
        f"ml-dev-env-{i}" for i in range(barcelona.gpus.default_nodes)
    ] + ["ml-dev-env-dev"]
    assert rep.pvcs and all(phase for _, phase, _ in rep.pvcs), rep.pvcs
    inner = inner_get
    sts = inner("StatefulSet", rep.name, barcelona.namespace)
    assert rep.desired == sts["spec"]["replicas"] > 0
    assert rep.ready == int((sts.get("status") or {}).get("readyReplicas") or 0)


@pytest.mark.parametrize("one_stream", [True, False], ids=["kubectl", "oc"])
def test_a_sync_is_one_call_per_pod_where_the_client_streams(
    local_cfg, fake_for, tmp_path, one_stream
) -> None:
    """kubectl's copy is planned inside one exec per pod: the listing, the tar of what the
    pod lacks, the check of it (two processes per pod were 2.7x kubectl's one copy per
    pod at 32 pods); a second sync with nothing to do sends nothing. oc rsync plans for
    itself, so it is still planned by a listing first; a second sync with nothing to do
    is then one listing per pod."""
    from mlenv.cluster.deploy import DeployOptions, deploy
    from mlenv.cluster.sync import sync

    n = 4
    fake = fake_for(local_cfg, nodes=n)
    fake.one_stream_copy = one_stream
    deploy(local_cfg, DeployOptions(mode="tcp", timeout=60, nodes=n), fake)
    (tmp_path / "a.py").write_text("x = 1\n")
    for round_ in (1, 2):
        fake.calls.clear()
        rep = sync(local_cfg, fake, str(tmp_path))
        per_pod = [c[:2] for c in fake.calls]
        pods = [f"ml-dev-env-{i}" for i in range(n)]
        if one_stream:
            assert sorted(per_pod) == [["copy_planned", p] for p in pods], per_pod
            # what each pod lacked, and nothing more, went into its stream
            sent = {c[1]: c[3] for c in fake.calls}
            assert sent == dict.fromkeys(pods, "1" if round_ == 1 else "0")
        elif round_ == 1:
            assert sorted(per_pod) == sorted(
                [["exec", p] for p in pods] + [["rsync", p] for p in pods]
            ), per_pod
        else:
            assert sorted(per_pod) == [["exec", p] for p in pods], per_pod
        assert rep.verified == pods
        added = 1 if round_ == 1 else 0
        assert [len(pl.add) for pl in rep.plans] == [added] * n
