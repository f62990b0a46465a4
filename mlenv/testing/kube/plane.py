"""Start and stop the kube tier's control plane: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok and the pod-root controller, each a process
of ours on loopback ports chosen free at start, recorded by pid under ``<tier>/pids``.

The tier's folder is ``$MLENV_KUBE_DIR`` or ``<checkout>/.mlenv/kube``. ``down`` stops only
the processes ``up`` recorded, after checking each pid is still the process it started
(its start time in /proc), never by name; then the pods' networks and the plane's bridge
that podnet.py recorded (their names, never another link).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlenv.testing.kube import build, manifests, pki, podnet, podroots, scc

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
FLAVORS = ("openshift", "plain")
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "podroots")
# The OpenShift flavour's SCC admission webhook (scc.py): a process of the plane there only.
SCC_ADMISSION = "scc-admission"
GPU_NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3")
CPU_NODES = ("cpu-node-0", "cpu-node-1")
# Where the scale nodes' pods run their execs: one root and network shared by all of them.
SCALE_ROOT = manifests.SCALE_ROOT
Say = Callable[[str], None]


class PlaneError(RuntimeError):
    """The plane could not be started (the message names the component and its log)."""


def tier_dir(folder: Path | None = None) -> Path:
    if folder is not None:
        return folder.resolve()
    env = os.environ.get("MLENV_KUBE_DIR", "").strip()
    return Path(env).resolve() if env else REPO / ".mlenv" / "kube"


@dataclass(frozen=True)
class Tier:
    folder: Path

    @property
    def admin_kubeconfig(self) -> Path:
        return self.folder / "admin.kubeconfig"

    @property
    def user_kubeconfig(self) -> Path:
        return self.folder / "user.kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.folder / "state.json"

    def state(self) -> dict[str, Any]:
        try:
            loaded: dict[str, Any] = json.loads(self.state_file.read_text())
            return loaded
        except (OSError, ValueError):
            return {}

    def pid_file(self, name: str) -> Path:
        return self.folder / "pids" / f"{name}.pid"

    def argv_file(self, name: str) -> Path:
        return self.folder / "pids" / f"{name}.argv.json"

    def log(self, name: str) -> Path:
        return self.folder / "logs" / f"{name}.log"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _alive(tier: Tier, name: str) -> int | None:
    """The pid of ``name`` when it is still the process ``up`` started."""
    try:
        pid_s, started = tier.pid_file(name).read_text().split()
    except (OSError, ValueError):
        return None
    pid = int(pid_s)
    # a zombie keeps its pid and start time until reaped: it is not a live component, and
    # `up` taking it for one reported a dead plane as up
    return pid if podnet.start_time(pid) == started and not _zombie(pid) else None


def _spawn(tier: Tier, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
    log = tier.log(name).open("ab")
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env if env is not None else dict(os.environ),
        cwd=tier.folder,
    )
    log.close()
    # how to start it again (`restart`): the argv only; one started with an environment of
    # its own (kwok, the pod-root controller) is not restarted
    if env is None:
        tier.argv_file(name).write_text(json.dumps(argv) + "\n")
    started = None
    for _ in range(50):
        started = podnet.start_time(proc.pid)
        if started:
            break
        time.sleep(0.01)
    tier.pid_file(name).write_text(f"{proc.pid} {started}\n")


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "kube-tier",
            "clusters": [
                {
                    "name": "kube-tier",
                    "cluster": {"server": server, "certificate-authority": str(ca)},
                }
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [{"name": "kube-tier", "context": {"cluster": "kube-tier", "user": user}}],
        },
        indent=1,
    )


def _ready(url: str, p: pki.Pki, timeout: float = 2.0) -> bool:
    ctx = ssl.create_default_context(cafile=str(p.ca))
    ctx.load_cert_chain(*map(str, p.admin))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            ok: bool = r.status == 200
            return ok
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


def _wait(what: str, check: Callable[[], bool], tier: Tier, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        if _alive(tier, name) is None:
            tail = "\n".join(tier.log(name).read_text(errors="replace").splitlines()[-12:])
            raise PlaneError(f"{name} exited while starting ({tier.log(name)}):\n{tail}")
        time.sleep(0.2)
    raise PlaneError(f"{what} not ready after {seconds:.0f} s (see {tier.log(name)})")


class Kubectl:
    """The tier's own kubectl (built with the plane) as admin."""

    def __init__(self, binary: Path, config: Path) -> None:
        self.argv = [str(binary), f"--kubeconfig={config}"]

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [*self.argv, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check and res.returncode != 0:
            raise PlaneError(f"kubectl {' '.join(args[:3])}: {res.stderr.strip()[-600:]}")
        return res

    def apply(self, objs: list[dict[str, Any]]) -> None:
        self.run(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}),
        )


def _components(flavor: str | None) -> tuple[str, ...]:
    """The plane's processes: ORDER, and the SCC admission webhook on OpenShift."""
    return (*ORDER, SCC_ADMISSION) if flavor == "openshift" else ORDER


def status(tier: Tier | None = None) -> dict[str, Any]:
    tier = tier or Tier(tier_dir())
    st = tier.state()
    procs = {name: _alive(tier, name) for name in _components(st.get("flavor"))}
    up = bool(st) and all(procs.values())
    if not st and _alive(tier, SCC_ADMISSION):
        procs[SCC_ADMISSION] = _alive(tier, SCC_ADMISSION)  # a half-up plane's webhook
    return {"up": up, "processes": procs, **st}


def up(
    flavor: str = "openshift",
    say: Say = lambda _line: None,
    folder: Path | None = None,
    missing_images: tuple[str, ...] = (),
    scale_nodes: int = 0,
) -> Tier:
    """Start the plane in ``folder`` (default: tier_dir()); say so and return when it is up.
    ``scale_nodes`` extra kwok GPU nodes (manifests.scale_node) take a benchmark's pods."""
    if flavor not in FLAVORS:
        raise PlaneError(f"KUBE_FLAVOR={flavor!r}: expected one of {', '.join(FLAVORS)}")
    if scale_nodes < 0:
        raise PlaneError(f"KUBE_SCALE_NODES={scale_nodes}: expected a count of nodes (0 or more)")
    tier = Tier(tier_dir(folder))
    tier.folder.mkdir(parents=True, exist_ok=True)
    # One `up` per folder at a time: two starting the same plane rewrote each other's keys
    # while an apiserver read them (seen in CI); the second now finds the plane up.
    with (tier.folder / "up.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _up_locked(tier, flavor, say, missing_images, scale_nodes)


def _up_locked(
    tier: Tier, flavor: str, say: Say, missing_images: tuple[str, ...], scale_nodes: int
) -> Tier:
    st = status(tier)
    if st["up"]:
        if st.get("flavor") != flavor:
            raise PlaneError(
                f"the tier is up with flavour {st.get('flavor')}, not {flavor}: "
                "`make kube-down` first"
            )
        if int(st.get("scale_nodes") or 0) != scale_nodes:
            raise PlaneError(
                f"the tier is up with {st.get('scale_nodes') or 0} scale nodes, not "
                f"{scale_nodes}: `make kube-down` first"
            )
        say(f"kube tier already up ({st.get('flavor')}, {st.get('server')})")
        return tier
    if any(st["processes"].values()):
        say("kube tier half up: stopping what is left first")
        down(say=say, folder=tier.folder)
    started = time.monotonic()
    bins = build.build(say)
    try:
        return _start(tier, flavor, bins, say, missing_images, started, scale_nodes)
    except BaseException:
        # a plane that failed half way is not left running (nor a Ctrl-C's half)
        down(folder=tier.folder)
        raise


def _fresh_folders(tier: Tier) -> None:
    for sub in ("pids", "logs", "bin", "shims"):
        (tier.folder / sub).mkdir(parents=True, exist_ok=True)
    # A fresh plane each time: etcd's data and the pods' roots from a previous run go (and
    # any pod network a previous run recorded and left: its records are in the pods' folders).
    if (tier.folder / "pods").is_dir():
        podroots.release_all_roots(tier.folder / "pods")
        podnet.release_all(tier.folder / "pods")
    for sub in ("etcd", "pods", "volumes"):
        shutil.rmtree(tier.folder / sub, ignore_errors=True)
    (tier.folder / "pods").mkdir()
    (tier.folder / "volumes").mkdir()


def _start(
    tier: Tier,
    flavor: str,
    bins: build.Binaries,
    say: Say,
    missing_images: tuple[str, ...],
    started: float,
    scale_nodes: int = 0,
) -> Tier:
    _fresh_folders(tier)
    p = pki.ensure(tier.folder / "pki")
    ports = {
        k: _free_port() for k in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")
    }
    server = f"https://127.0.0.1:{ports['apiserver']}"
    tier.admin_kubeconfig.write_text(kubeconfig(server, p.ca, *p.admin, pki.ADMIN_USER))
    tier.user_kubeconfig.write_text(kubeconfig(server, p.ca, *p.user, pki.USER_NAME))
    for f in (tier.admin_kubeconfig, tier.user_kubeconfig):
        f.chmod(0o600)

    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    _spawn(
        tier,
        "etcd",
        [
            str(bins.etcd),
            "--name=node0",
            f"--data-dir={tier.folder / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=node0={peer_url}",
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=2147483648",
            "--unsafe-no-fsync",
            "--listen-metrics-urls=",
            "--log-level=warn",
        ],
    )
    _wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), tier, "etcd", 60)
    say(f"etcd {build.ETCD_VERSION} up on {etcd_url}")

    serving_crt, serving_key = p.serving
    sa_pub, sa_key = p.sa
    _spawn(
        tier,
        "kube-apiserver",
        [
            str(bins.kube("kube-apiserver")),
            f"--etcd-servers={etcd_url}",
            "--etcd-prefix=/registry",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={serving_crt}",
            f"--tls-private-key-file={serving_key}",
            f"--client-ca-file={p.ca}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--v=1",
        ],
    )
    _wait("kube-apiserver", lambda: _ready(f"{server}/readyz", p), tier, "kube-apiserver", 180)
    say(f"kube-apiserver {build.K8S_VERSION} up on {server}")

    kc = Kubectl(bins.kube("kubectl"), tier.admin_kubeconfig)
    common = [
        f"--kubeconfig={tier.admin_kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]
    _spawn(
        tier,
        "kube-controller-manager",
        [
            str(bins.kube("kube-controller-manager")),
            *common,
            f"--secure-port={ports['kcm']}",
            f"--root-ca-file={p.ca}",
            f"--service-account-private-key-file={sa_key}",
            # each controller acts as its own service account (kube-system:statefulset-
            # controller, ...), as kubeadm and OpenShift run them: the StatefulSet's pods are
            # then created by a user that may use no SCC but restricted-v2, and SCC
            # admission turns on the pods' service account, as on OpenShift
            "--use-service-account-credentials",
            "--node-monitor-grace-period=60s",
            "--v=1",
        ],
    )
    _spawn(
        tier,
        "kube-scheduler",
        [str(bins.kube("kube-scheduler")), *common, f"--secure-port={ports['scheduler']}", "--v=1"],
    )

    crds: list[Path | dict[str, Any]] = [*manifests.kwok_crds(bins.kwok_source)]
    if flavor == "openshift":
        crds += manifests.openshift_crds()
    _apply_crds(kc, crds)
    kc.apply(
        [
            *manifests.storage_classes(),
            *manifests.user_cluster_role(),
            manifests.developer_binding(pki.USER_NAME),
            *(manifests.openshift_aggregated_roles() if flavor == "openshift" else []),
        ]
    )
    if flavor == "openshift":
        _start_scc_admission(tier, kc, p, server)

    _start_kwok(tier, bins, p, ports, missing_images)
    # The plain flavour is a GPU-less cluster (kind, a CI cluster): the `local` example must
    # deploy there; the OpenShift flavour has GPU Operator nodes and CPU-only ones.
    gpus = GPU_NODES if flavor == "openshift" else ()
    kc.apply(
        [manifests.gpu_node(n) for n in gpus]
        + [manifests.cpu_node(n) for n in CPU_NODES]
        + [manifests.scale_node(i) for i in range(scale_nodes)]
    )
    count = len(gpus) + len(CPU_NODES) + scale_nodes
    # kwok makes nodes Ready a few hundred a second here: the wait grows with their number
    _wait("nodes Ready", lambda: _nodes_ready(kc, count), tier, "kwok", 120 + scale_nodes / 4)
    _wait(
        "the default ServiceAccount",
        lambda: kc.run("get", "serviceaccount", "default", check=False).returncode == 0,
        tier,
        "kube-controller-manager",
        120,
    )
    for ns in [n for n in os.environ.get("KUBE_USER_NAMESPACES", "").split(",") if n.strip()]:
        kc.apply(manifests.grant(ns.strip(), pki.USER_NAME, "admin"))
    net = podnet.load_plane_net(tier.folder)
    state = {
        "flavor": flavor,
        "server": server,
        "ports": ports,
        "pod_network": {"bridge": net.bridge, "cidr": str(net.cidr)} if net else None,
        "kubernetes": build.K8S_VERSION,
        "etcd": build.ETCD_VERSION,
        "kwok": build.KWOK_VERSION,
        "kubectl": str(bins.kube("kubectl")),
        "started_s": round(time.monotonic() - started, 1),
        "scale_nodes": scale_nodes,
    }
    tier.state_file.write_text(json.dumps(state, indent=1) + "\n")
    say(
        f"kube tier up ({flavor}) in {state['started_s']} s: {len(gpus)} GPU and "
        f"{len(CPU_NODES)} CPU kwok nodes"
        + (f", {scale_nodes} scale nodes (kwok-only pods)" if scale_nodes else "")
    )
    return tier


def _start_scc_admission(tier: Tier, kc: Kubectl, p: pki.Pki, server: str) -> None:
    """OpenShift's SCC admission (scc.py): the webhook process, the SCCs OpenShift ships
    with their RBAC, a UID block for the namespaces already there, then the webhook's
    registration (from then on no pod is admitted without an SCC)."""
    port = _free_port()
    (tier.folder / "scc-admission.json").write_text(json.dumps({"server": server, "port": port}))
    _spawn(
        tier,
        SCC_ADMISSION,
        [sys.executable, "-m", "mlenv.testing.kube", "scc", str(tier.folder), str(port)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    _wait("the SCC admission webhook", lambda: _tls_up(port), tier, SCC_ADMISSION, 60)
    kc.apply(scc.default_sccs())
    taken: list[str] = []
    for ns in kc.run("get", "namespaces", "-o", "name").stdout.split():
        name = ns.split("/", 1)[1]
        if name in scc.SYSTEM_NAMESPACES:
            continue
        block = f"{scc.next_block(taken)}/{scc.UID_BLOCK}"
        taken.append(block)
        kc.run(
            "annotate",
            "--overwrite",
            "namespace",
            name,
            f"{scc.UID_RANGE}={block}",
            f"{scc.SUPPLEMENTAL_GROUPS}={block}",
        )
    kc.apply([scc.webhooks(p.ca.read_text(), port)])


def _tls_up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _start_kwok(
    tier: Tier,
    bins: build.Binaries,
    p: pki.Pki,
    ports: dict[str, int],
    missing_images: tuple[str, ...],
) -> None:
    """kwok (confined: kwokns.sh) and the pod-root controller that prepares each pod's root
    and network (on the plane's bridge, made here first: podnet.py). The pods of scale
    nodes (made at up, or added later by a test) get kwok's fallback exec, in one shared
    root and network (SCALE_ROOT)."""
    serving_crt, serving_key = p.serving
    net = podnet.create_plane_net(tier.folder)
    missing = [
        *missing_images,
        *(m for m in os.environ.get("KUBE_MISSING_IMAGES", "").split(",") if m.strip()),
    ]
    extra = [manifests.scale_exec(_scale_root(tier, net), manifests.scale_env())]
    (tier.folder / "kwok.yaml").write_text(manifests.kwok_config(missing, extra))
    _make_shims(tier)
    kwok_env = {
        "PATH": str(tier.folder / "shims"),
        "HOME": str(tier.folder),
        "MLENV_KUBE_TIER": str(tier.folder),
        "LANG": "C.UTF-8",
    }
    _spawn(
        tier,
        "kwok",
        [
            shutil.which("unshare") or "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            str(tier.folder / "bin" / "kwokns.sh"),
            str(tier.folder),
            str(bins.kwok),
            f"--kubeconfig={tier.admin_kubeconfig}",
            f"--config={tier.folder / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={manifests.KWOK_NODE}=fake",
            "--enable-crds=Exec,Logs",
            "--node-ip=",
            "--node-name=localhost",
            f"--node-port={ports['kwok']}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--tls-cert-file={serving_crt}",
            f"--tls-private-key-file={serving_key}",
            "--node-lease-duration-seconds=40",
            f"--cidr={net.cidr}",
        ],
        env=kwok_env,
    )
    start_podroots(tier, bins.kube("kubectl"))


def start_podroots(tier: Tier, kubectl: Path) -> None:
    """Start the pod-root controller (also what a test does to start it again after
    stopping it: it catches up from one list of every pod)."""
    _spawn(
        tier,
        "podroots",
        [
            sys.executable,
            "-m",
            "mlenv.testing.kube",
            "podroots",
            str(tier.folder),
            str(kubectl),
            str(tier.admin_kubeconfig),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _scale_root(tier: Tier, net: podnet.PlaneNet) -> Path:
    """The scale nodes' shared pod root, with a network holder of its own (confine.sh runs
    nothing without one); released with the pods' networks at ``down``."""
    root = tier.folder / "pods" / SCALE_ROOT[0] / SCALE_ROOT[1]
    (root / "upper").mkdir(parents=True, exist_ok=True)
    (root / "workspace").mkdir(exist_ok=True)
    podnet.attach(root, net, "scale-shared-root")
    return root


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            ok: bool = r.status == 200
            return ok
    except (OSError, urllib.error.URLError):
        return False


def _nodes_ready(kc: Kubectl, count: int) -> bool:
    res = kc.run(
        "get",
        "nodes",
        "-o",
        'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}',
        check=False,
    )
    return res.returncode == 0 and res.stdout.split().count("True") >= count


def _apply_crds(kc: Kubectl, crds: list[Path | dict[str, Any]]) -> None:
    files = [str(c) for c in crds if isinstance(c, Path)]
    objs = [c for c in crds if isinstance(c, dict)]
    args = [a for f in files for a in ("-f", f)]
    if args:
        kc.run("apply", "--server-side", *args)
    if objs:
        kc.apply(objs)
    kc.run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def _make_shims(tier: Tier) -> None:
    """kwok's PATH: one link to confine.sh per command name found on the host, so a bare
    command name always runs confined (kwok resolves names with its own PATH)."""
    for script in ("confine.sh", "kwokns.sh", "podroot.sh"):
        shutil.copyfile(HERE / script, tier.folder / "bin" / script)
        (tier.folder / "bin" / script).chmod(0o755)
    shims = tier.folder / "shims"
    shutil.rmtree(shims, ignore_errors=True)
    shims.mkdir()
    names: set[str] = set()
    for d in (
        Path(sys.executable).parent,
        Path("/usr/local/bin"),
        Path("/usr/bin"),
        Path("/bin"),
        Path("/usr/sbin"),
        Path("/sbin"),
    ):
        if d.is_dir():
            names |= {p.name for p in d.iterdir() if not p.name.startswith(".")}
    for n in sorted(names):
        (shims / n).symlink_to(tier.folder / "bin" / "confine.sh")


def _stop(tier: Tier, name: str) -> bool:
    """SIGTERM the component's process group, SIGKILL after 10 s; False if it was not running."""
    pid = _alive(tier, name)
    if pid is None:
        tier.pid_file(name).unlink(missing_ok=True)
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for _ in range(100):
        if podnet.start_time(pid) is None or _zombie(pid):
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    tier.pid_file(name).unlink(missing_ok=True)
    return True


# The control plane a restart replaces; etcd (the state), kwok and the pod-root controller
# (the nodes) keep running, as on a cluster whose masters are restarted.
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def restart(say: Say = lambda _line: None, folder: Path | None = None) -> None:
    """Stop and start the apiserver, controller-manager and scheduler again with the same
    flags, ports and keys, keeping etcd's data: what the plane's clients, kwok and the
    pod-root controller see when a cluster's API server restarts."""
    tier = Tier(tier_dir(folder))
    st = tier.state()
    if not st or _alive(tier, "etcd") is None:
        raise PlaneError("the kube tier is not up: `make kube-up` first")
    started = time.monotonic()
    for name in CONTROL_PLANE:
        _stop(tier, name)
    p = pki.ensure(tier.folder / "pki")
    for name in CONTROL_PLANE:
        _spawn(tier, name, json.loads(tier.argv_file(name).read_text()))
        if name == "kube-apiserver":
            _wait(
                "kube-apiserver",
                lambda: _ready(f"{st['server']}/readyz", p),
                tier,
                name,
                180,
            )
    say(f"kube tier control plane restarted in {time.monotonic() - started:.1f} s (etcd kept)")


def down(say: Say = lambda _line: None, folder: Path | None = None) -> None:
    tier = Tier(tier_dir(folder))
    stopped = []
    for name in reversed((*ORDER, SCC_ADMISSION)):
        if _stop(tier, name):
            stopped.append(name)
    # pods' processes go with the tier, as with a node's container runtime
    gone = (
        podroots.kill_pod_processes(tier.folder / "pods") if (tier.folder / "pods").is_dir() else []
    )
    if gone:
        stopped.append(f"{len(gone)} pod process(es)")
    # then their roots' and networks' holders (and veths), and the plane's bridge: only
    # what was recorded
    if (tier.folder / "pods").is_dir():
        podroots.release_all_roots(tier.folder / "pods")
    nets = podnet.release_all(tier.folder / "pods") if (tier.folder / "pods").is_dir() else []
    if nets:
        stopped.append(f"{len(nets)} pod network(s)")
    bridge = podnet.delete_plane_net(tier.folder)
    if bridge:
        stopped.append(f"bridge {bridge}")
    tier.state_file.unlink(missing_ok=True)
    say(f"kube tier down (stopped: {', '.join(stopped) or 'nothing was running'})")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def grant(namespace: str, role: str = "admin", folder: Path | None = None) -> None:
    """Give the non-admin user ``role`` (admin/edit) in ``namespace`` (created if missing)."""
    tier = Tier(tier_dir(folder))
    st = tier.state()
    if not st:
        raise PlaneError("the kube tier is not up: `make kube-up` first")
    Kubectl(Path(st["kubectl"]), tier.admin_kubeconfig).apply(
        manifests.grant(namespace, pki.USER_NAME, role)
    )
