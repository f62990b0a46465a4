"""Run one command in every worker pod at once (the ssh-less torchrun launch).

Pod 0's output is streamed (it is the rank that reports); the others are captured and
returned, so the caller can name a pod that failed. Every pod must be Running: a static
rendezvous waits for all ``MLENV_NNODES`` nodes, so a missing pod would hang the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mlenv.cluster.api import NO_TIMEOUT, ClusterClient, ExecResult, Output
from mlenv.cluster.deploy import worker_pods
from mlenv.config.model import Cluster as ClusterConfig
from mlenv.errors import InfraError, MlenvError
from mlenv.render.names import workload


@dataclass(frozen=True)
class PodOutcome:
    """How the command ended in one pod other than pod 0."""

    pod: str
    returncode: int  # -1 when the exec itself failed (timeout, pod gone)
    detail: str  # last output line, or the error


@dataclass
class FanOutReport:
    """Pod 0's exit code and what happened everywhere else."""

    pods: list[str]
    returncode: int
    others: list[PodOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[PodOutcome]:
        """The other pods that did not exit 0."""
        return [o for o in self.others if o.returncode != 0]


def _tail(res: ExecResult) -> str:
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[-1] if lines else ""


def run_everywhere(
    cfg: ClusterConfig,
    client: ClusterClient,
    argv: Sequence[str],
    out: Output,
    *,
    timeout: float | None = None,
) -> FanOutReport:
    """Start ``argv`` in every worker pod in parallel through exec; stream pod 0 to ``out``.

    ``timeout`` bounds each pod's run (None: no limit, a training run takes what it takes).
    Raises InfraError when not every pod of the workload is Running, and ExecTimeout
    when pod 0 outlives ``timeout``.
    """
    ns = cfg.namespace
    pods = worker_pods(cfg, client)
    wl = workload(cfg)
    sts = client.get(wl.kind, wl.name, ns)
    want = wl.desired(sts)
    down = [f"{p.name} ({p.phase})" for p in pods if p.phase != "Running"]
    if sts is None or not pods:
        raise InfraError(f"no pods of {cfg.name} in {ns}: deploy first")
    if down or len(pods) < want:
        raise InfraError(
            f"{len(pods) - len(down)}/{want} pods Running"
            + (f" (not running: {', '.join(down)})" if down else "")
            + ": the torchrun rendezvous needs every pod; see `mlenv status`"
        )
    limit = NO_TIMEOUT if timeout is None else timeout
    names = [p.name for p in pods]

    def run(pod: str) -> PodOutcome:
        try:
            res = client.exec(pod, ns, argv, check=False, timeout=limit)
        except MlenvError as e:
            return PodOutcome(pod, -1, str(e))
        return PodOutcome(pod, res.returncode, _tail(res))

    with ThreadPoolExecutor(max_workers=max(1, len(names) - 1)) as pool:
        futures = [pool.submit(run, name) for name in names[1:]]
        rc = client.exec_stream(names[0], ns, argv, out, timeout=limit)
        others = [f.result() for f in futures]
    return FanOutReport(names, rc, others)
