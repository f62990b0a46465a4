"""What deploy costs as the pod count grows: its wait's output says only what changed."""

from __future__ import annotations

from mlenv.cluster.api import Manifest
from mlenv.cluster.deploy import DeployOptions, deploy
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.testing.fakecluster import FakeCluster


class OneReadyPerPoll(FakeCluster):
    """Its kubelet starts one more pod per poll, as a large rollout reaches Ready a few
    pods at a time."""

    polls = 0

    def tick(self) -> None:
        self.polls += 1
        super().tick()

    def _kubelet(self, pod: Manifest) -> None:
        index = pod["metadata"]["name"].rsplit("-", 1)[1]
        if not index.isdigit() or int(index) < self.polls:
            super()._kubelet(pod)


def test_the_readiness_wait_names_a_pod_only_when_its_state_changes(
    local_cfg: ClusterConfig,
) -> None:
    """Every line of the wait named every pod, so its output grew with the square of the
    pod count (2.7 MB at 512 pods). Now a line names only the pods whose state changed:
    each pod a few times (created, Ready), however many pods. Fails on the code before:
    12 pods reaching Ready one poll at a time were named 12 × 12 times."""
    n = 12
    fake = OneReadyPerPoll.typical(local_cfg.namespace, [f"n{i}" for i in range(n)], gpus=0)
    said: list[str] = []
    rep = deploy(local_cfg, DeployOptions(mode="tcp", timeout=3600, nodes=n), fake, say=said.append)
    assert rep.ready == n
    waits = [s for s in said if s.startswith("waiting: ")]
    assert len(waits) >= n // 2  # the fake did reach Ready a few pods at a time
    mentions = sum(s.count("ml-dev-env-") for s in waits)
    assert mentions <= 3 * n, waits[-3:]
    # and each state is still said: the last pod's Ready is on a line
    assert any(f"ml-dev-env-{n - 1}=Ready" in s for s in waits)
    assert waits[-1].startswith(f"waiting: {n}/{n} pods Ready")
