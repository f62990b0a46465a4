"""What this pod is: its rank, its peers and its settings, read from the environment.

The rendered worker pods set these variables (table in docs/contracts.md); everything
here is pure so it can be unit-tested with a plain dict instead of ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mlenv.contract import HEADLESS_SERVICE
from mlenv.errors import InputError
from mlenv.workload import Workload, workload_for


def _workload(env: Mapping[str, str]) -> Workload:
    """The workload that made this pod, its object named by ``MLENV_STATEFULSET``."""
    wl = workload_for()
    name = env.get("MLENV_STATEFULSET", "").strip()
    return dataclasses.replace(wl, name=name) if name else wl


def node_rank(env: Mapping[str, str], hostname: str | None = None) -> int:
    """This pod's rank: ``MLENV_POD_INDEX``, which the rendered pod sets from the
    workload's rank label by the downward API.

    The pod name is read only when the variable is empty: a pod rendered by an older
    mlenv (or on a cluster too old to label pods with their index) has no rank in its
    environment, and its workload can still tell the rank from the name it gave the pod.
    Raises InputError when neither gives a non-negative integer.
    """
    wl = _workload(env)
    raw = env.get("MLENV_POD_INDEX", "").strip()
    if raw:
        if not raw.isdigit():
            raise InputError(
                f"MLENV_POD_INDEX={raw!r}: expected a non-negative integer "
                f"(the {wl.rank_label} label)"
            )
        return int(raw)
    name = hostname if hostname is not None else env.get("MLENV_POD_NAME") or socket.gethostname()
    rank = wl.rank_of(name)
    if rank is None:
        raise InputError(
            f"cannot tell this pod's rank: MLENV_POD_INDEX is empty and the hostname {name!r} "
            f"has no '-<ordinal>' suffix (expected e.g. {wl.pod_name(0)})"
        )
    return rank


def _int(env: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        if default is None:
            raise InputError(f"{key} is not set: expected an integer >= {minimum}")
        return default
    if not raw.lstrip("-").isdigit() or int(raw) < minimum:
        raise InputError(f"{key}={raw!r}: expected an integer >= {minimum}")
    return int(raw)


@dataclass(frozen=True)
class PodEnv:
    """The settings every ``mlenv.pod`` verb works from."""

    namespace: str
    statefulset: str
    headless: str
    nnodes: int
    rank: int
    gpus_per_node: int  # 0: not given, detect
    network_mode: str  # "tcp" | "rdma"
    rdma_devices: str  # "", "auto" or a comma list
    ssh_port: int
    ssh_dir: str
    master_addr: str
    master_port: int

    @property
    def workload(self) -> Workload:
        """The workload whose pod this is (its object named ``statefulset``)."""
        return _workload({"MLENV_STATEFULSET": self.statefulset})

    def pod_name(self, i: int) -> str:
        """The name of pod ``i``."""
        return self.workload.pod_name(i)

    def pod_dns(self, i: int) -> str:
        """The stable DNS name of pod ``i`` (docs/contracts.md, "Pod DNS")."""
        return self.workload.pod_dns(i, self.headless, self.namespace)

    @property
    def hosts(self) -> list[str]:
        """Every pod's DNS name, in rank order."""
        return [self.pod_dns(i) for i in range(self.nnodes)]


def pod_env(env: Mapping[str, str], hostname: str | None = None) -> PodEnv:
    """Build a :class:`PodEnv` from ``env``; raises InputError naming the bad variable."""
    namespace = env.get("MLENV_NAMESPACE", "").strip()
    if not namespace:
        raise InputError("MLENV_NAMESPACE is not set: expected the pod's namespace (downward API)")
    sts = _workload(env).name
    headless = env.get("MLENV_HEADLESS_SERVICE", "").strip() or HEADLESS_SERVICE
    nnodes = _int(env, "MLENV_NNODES", None, minimum=1)
    rank = node_rank(env, hostname)
    if rank >= nnodes:
        raise InputError(f"node rank {rank} is not below MLENV_NNODES={nnodes}")
    mode = env.get("MLENV_NETWORK_MODE", "").strip() or "tcp"
    if mode not in ("tcp", "rdma"):
        raise InputError(f"MLENV_NETWORK_MODE={mode!r}: expected 'tcp' or 'rdma'")
    ssh_port = _int(env, "MLENV_SSH_PORT", 2222, minimum=1)
    master_port = _int(env, "MASTER_PORT", 29500, minimum=1)
    for key, port in (("MLENV_SSH_PORT", ssh_port), ("MASTER_PORT", master_port)):
        if port > 65535:
            raise InputError(f"{key}={port}: expected a TCP port (1-65535)")
    pe = PodEnv(
        namespace=namespace,
        statefulset=sts,
        headless=headless,
        nnodes=nnodes,
        rank=rank,
        gpus_per_node=_int(env, "MLENV_GPUS_PER_NODE", 0),
        network_mode=mode,
        rdma_devices=env.get("MLENV_RDMA_DEVICES", "").strip(),
        ssh_port=ssh_port,
        ssh_dir=env.get("MLENV_SSH_DIR", "").strip() or "/etc/mlenv/ssh",
        master_addr="",
        master_port=master_port,
    )
    master = env.get("MASTER_ADDR", "").strip() or pe.pod_dns(0)
    return PodEnv(**{**pe.__dict__, "master_addr": master})


def pod_ip(
    env: Mapping[str, str],
    hostname: str | None = None,
    resolve: Callable[[str], str] = socket.gethostbyname,
) -> str | None:
    """This pod's address: ``POD_IP`` (downward API ``status.podIP``), else what the
    hostname resolves to (``hostname -i``; a pod's /etc/hosts maps it to the pod IP),
    else None. Upstream ml-dev-env's scripts read ``POD_IP``."""
    raw = env.get("POD_IP", "").strip()
    if raw:
        return raw
    try:
        return resolve(hostname if hostname is not None else socket.gethostname())
    except (OSError, UnicodeError):
        return None


def upstream_vars(
    env: Mapping[str, str],
    rank: int,
    hostname: str | None = None,
    resolve: Callable[[str], str] = socket.gethostbyname,
) -> dict[str, str]:
    """The per-pod upstream names: ``NODE_RANK`` (the pod index) and ``POD_IP`` when known."""
    out = {"NODE_RANK": str(rank)}
    ip = pod_ip(env, hostname, resolve)
    if ip:
        out["POD_IP"] = ip
    return out
