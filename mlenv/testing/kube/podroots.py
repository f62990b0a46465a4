"""The tier's pod-root controller: what a kubelet would do before starting a container.

It keeps every pod in view as an informer does: one unpaged list of every pod, then a
watch from that list's resourceVersion (restarted from the last event's, so nothing
between two watches is missed); a new list only when the watch fails (the API server
restarted, or the resourceVersion is too old). After a list, a pod folder on disk whose
pod is not in it is a pod deleted while nobody watched: it goes like any deleted pod.

For every pod kwok is to run (scheduled on a kwok node), it

1. makes the pod's folder ``<tier>/pods/<namespace>/<pod>/`` (the overlay's upper layer
   is its ``upper/``: every write of the pod's processes lands there), its volumes'
   folders (a claim's volume: ``<tier>/volumes/<pv>/``, shared by every pod that mounts
   it and kept while the volume exists; an emptyDir: in the pod's folder; Secrets and
   ConfigMaps: their keys written as files) and its log file;
2. gives the pod its network (podnet.py: a holder process in a network namespace of its
   own, a veth on the plane's bridge, an address of the plane's range), as a CNI plugin
   does before the container starts;
3. writes the pod's kwok ``Exec`` (environment for confine.sh: the pod root, the volume
   mounts, the container's literal and field env) and ``Logs`` (its log file), owned by
   the pod so they go with it;
4. writes the namespace's names file (write_hosts), then annotates the pod ``ROOT_READY``
   and ``POD_IP`` (its address), which the pod-ready stage waits for and reports as
   ``status.podIP``;
5. hands the pod to the kubelet (kubelet.py, a thread of this process), which runs its
   containers' commands, probes and restarts them and reports their state.

Steps 4 are batched: the pods prepared while events keep coming are annotated together,
after one write of their namespace's names file. The image's ``/opt/ml-dev-env`` (the
workers' entry point) is put in each pod's upper layer as links into the checkout.

When a pod is deleted its processes, network and folder go; a volume's folder goes when
its PV is gone.
Runs as ``python -m mlenv.testing.kube podroots TIER KUBECTL KUBECONFIG``.
"""

from __future__ import annotations

import base64
import calendar
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlenv.render.names import POD_INIT
from mlenv.testing.kube import manifests, podnet
from mlenv.testing.kube.identity import Identity, IdentityError, pod_identity, set_volume_ownership
from mlenv.testing.kube.kubelet import Kubelet
from mlenv.testing.kube.manifests import POD_IP, ROOT_READY, is_scale_pod

# scale pods annotated ROOT_READY per kubectl call (it patches each in turn)
SCALE_ANNOTATE_CHUNK = 100

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, pod name)

# The folder of a namespace's names file, beside its pods' folders (a pod's name never
# starts with a dot), and where each pod sees it, read-only: the pod's /etc/hosts is a
# link to the file there, so one write reaches every pod of the namespace.
NAMES_DIR = ".names"
NAMES_MOUNT = "/run/kube-tier"
# How long the watch may stay quiet before the prepared pods are annotated, and how many
# may wait: a burst of new pods is annotated after one names write, not one per pod.
QUIET_S = 0.05
BATCH = 64
# The host's folders a pod does not see (empty in its root, as in an image's): its home
# folders and /tmp; the paths the "image" needs below them come back read-only
# (image_paths). Modes as an image has them.
HIDDEN = (("root", 0o700), ("home", 0o755), ("tmp", 0o1777))
ROOT_RECORD = "rootns"
# How often a pod that could not be prepared yet (its claim not bound) is tried again.
RETRY_S = 1.0
# Each watch request's length: the server ends it, and the next starts from the last event.
WATCH_S = 30
# How long a namespace's annotations (grace cap, back-off, UID ranges) are taken as read: a
# test sets them before it creates the namespace's pods, well over this before any delete.
NOTES_TTL_S = 2.0


# The longest grace period the tier gives a deleted pod (MLENV_KUBE_GRACE_S, seconds):
# a pod's own terminationGracePeriodSeconds (30 by default) when shorter. A real kubelet
# takes the whole period; tests that delete and recreate many times would wait minutes.
GRACE_CAP_S = 3.0
GRACE_CAP_ANNOTATION = "kube-tier.mlenv.dev/grace-cap-s"


def grace_cap() -> float:
    raw = os.environ.get("MLENV_KUBE_GRACE_S", "").strip()
    try:
        return max(0.0, float(raw)) if raw else GRACE_CAP_S
    except ValueError:
        return GRACE_CAP_S


def _deletion_due(pod: Obj, cap: float, now: float) -> float:
    """Seconds from ``now`` until the kubelet would SIGKILL the pod: its deletionTimestamp
    (delete time + grace period), at most ``cap`` after now."""
    stamp = str(pod["metadata"].get("deletionTimestamp", ""))
    try:
        left = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - now
    except ValueError:
        left = 0.0
    return max(0.0, min(left, cap))


def kill_pod_processes(pods: Path, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` (SIGKILL by default) to every process running in a pod root under
    ``pods`` (a pod's folder, or the tier's ``pods/``): what a container runtime does when
    a pod goes (SIGTERM first, at the start of its grace period): the containers the
    kubelet started and whatever a pod's exec left behind (a daemon, an ssh session's
    ranks), which would otherwise outlive its pod, and the tier. A confined process's
    root, read from the host, is its pod's ``merged`` overlay (confine.sh chroots there)."""
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            root = Path(os.readlink(proc / "root"))
        except OSError:
            continue
        if root.name == "merged" and (root == pods / "merged" or pods in root.parents):
            try:
                os.kill(int(proc.name), sig)
                killed.append(int(proc.name))
            except OSError:
                pass
    return killed


@dataclass(frozen=True)
class RootNs:
    """The process holding a pod's mount namespace (podroot.sh, then ``sleep``)."""

    pid: int
    started: str
    inode: int


def read_root(folder: Path) -> RootNs | None:
    try:
        pid, started, inode = (folder / ROOT_RECORD).read_text().split()
        return RootNs(int(pid), started, int(inode))
    except (OSError, ValueError):
        return None


def root_alive(rec: RootNs) -> bool:
    try:
        inode = os.stat(f"/proc/{rec.pid}/ns/mnt").st_ino
    except OSError:
        return False
    return podnet.start_time(rec.pid) == rec.started and inode == rec.inode


def release_root(folder: Path) -> RootNs | None:
    """Kill the pod's root holder (only the recorded process): its mount namespace, and
    the overlay in it, go with the pod's last process. The record, or None."""
    rec = read_root(folder)
    if rec is None:
        return None
    if podnet.start_time(rec.pid) == rec.started:
        try:
            os.kill(rec.pid, signal.SIGKILL)
            os.waitpid(rec.pid, 0)  # ours to reap when this process started it
        except (ProcessLookupError, ChildProcessError):
            pass
    (folder / ROOT_RECORD).unlink(missing_ok=True)
    return rec


def release_all_roots(pods: Path) -> list[RootNs]:
    """Every pod root recorded under ``pods`` (the tier's ``pods/``), released."""
    return [r for f in sorted(pods.glob(f"*/*/{ROOT_RECORD}")) if (r := release_root(f.parent))]


def image_paths() -> list[str]:
    """What a pod's image would hold that lies in a folder the pod does not see (HIDDEN):
    the Python installation and virtual environment the tier runs, and the checkout
    (the package, on the pods' PYTHONPATH)."""
    hidden = [Path("/", d) for d, _ in HIDDEN]
    wanted = {
        Path(sys.base_prefix).resolve(),
        Path(sys.prefix).resolve(),
        Path(sys.executable).resolve().parent.parent,
        Path(__file__).resolve().parents[3],
    }
    return sorted(str(p) for p in wanted if any(h in p.parents for h in hidden))


def image_files(upper: Path) -> None:
    """What the project's image holds under /opt/ml-dev-env (the Dockerfile's COPY lines),
    as links into the checkout (the pods see it, read-only), in a pod's upper layer: the
    workers' container command is /opt/ml-dev-env/scripts/pod-init.sh."""
    repo = Path(__file__).resolve().parents[3]
    home = upper / Path(POD_INIT).parent.parent.relative_to("/")
    home.mkdir(parents=True, exist_ok=True)
    for name, target in (
        ("scripts", "scripts"),
        ("mlenv", "mlenv"),
        ("workspace-template", "workspace"),
    ):
        link = home / name
        if not link.is_symlink():
            link.symlink_to(repo / target)


class RootError(Exception):
    pass


def start_root(
    tier: Path, folder: Path, name: str, mounts: list[str], names: Path | None
) -> RootNs:
    """Start the pod's root holder (podroot.sh): a mount and UTS namespace of the pod's own,
    made from a copy of the host made read-only as kwok's is (kwokns.sh), in which the
    pod's overlay, volumes (``mounts``: "dest=src") and names folder are mounted once
    and held for the pod's life; every process of the pod enters it (confine.sh), so the
    container command, each exec and what they start (sshd's sessions) see the same
    files. Returns once the holder has recorded itself in ``<folder>/rootns``."""
    image = [Path(p) for p in image_paths()]
    for d, mode in HIDDEN:
        # an opaque folder of the upper layer: the host's folder below it is not seen
        path = folder / "upper" / d
        path.mkdir(parents=True, exist_ok=True)
        if any(Path("/", d) in p.parents for p in image):
            # the image's Python lives below it here (in an image it would be in /usr):
            # every UID may pass through to it, none may list it
            mode |= 0o111
        path.chmod(mode)
        os.setxattr(path, "trusted.overlay.opaque", b"y")
    unshare = shutil.which("unshare") or "unshare"
    private = [unshare, "--mount", "--propagation", "private", "--"]
    proc = subprocess.Popen(
        [
            *private,
            str(tier / "bin" / "kwokns.sh"),
            str(tier),
            *private[:1],
            "--mount",
            "--uts",
            *private[2:],
            str(tier / "bin" / "podroot.sh"),
            str(tier),
            str(folder),
            name,
        ],
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "MLENV_KUBE_MOUNTS": "\n".join(mounts),
            "MLENV_KUBE_NAMES": str(names or ""),
            "MLENV_KUBE_IMAGE": "\n".join(image_paths()),
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a signal to the controller's group leaves the pods
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RootError(f"podroot.sh: exit {proc.returncode}: {err.strip()}")
        rec = read_root(folder)
        if rec is not None and rec.pid == proc.pid:
            if proc.stderr is not None:
                proc.stderr.close()
            return rec
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    raise RootError("podroot.sh: no pod root after 20 s")


class Controller:
    def __init__(self, tier: Path, kubectl: str, kubeconfig: str) -> None:
        self.tier = tier
        self.base = [kubectl, f"--kubeconfig={kubeconfig}", "--request-timeout=20s"]
        self.log = sys.stderr
        self.net = podnet.load_plane_net(tier)
        self.cap = grace_cap()
        self.terminating: set[tuple[str, str, str]] = set()  # (ns, name, uid) in their grace
        self.pods: dict[Key, Obj] = {}  # every pod, as the list and the watch last showed it
        self.ips: dict[Key, str] = {}  # the address of each prepared pod
        self.unannotated: dict[Key, str] = {}  # prepared, to be annotated: its address
        self.retry: set[Key] = set()  # not prepared yet: tried again every RETRY_S
        self.dirty: set[str] = set()  # namespaces whose names file is to be written
        self.sweep = False  # a pod went: look for volumes whose PV is gone
        self.last_retry = 0.0
        # the plane's flavour decides the runtime's default capabilities and whether the
        # namespace's OpenShift ranges give the pods their UID (identity.py)
        try:
            state = json.loads((tier / "state.json").read_text())
        except (OSError, ValueError):
            state = {}
        self.flavor = str(state.get("flavor") or "openshift")
        self.refused: set[tuple[str, str, Any]] = set()  # pods whose identity cannot start
        # scale pods whose Exec is to be written, then annotated ROOT_READY (flush)
        self.scale_pending: dict[Key, Obj] = {}
        # each prepared pod's containers' environments (what confine.sh reads), by name
        self.envs: dict[Key, dict[str, dict[str, str]]] = {}
        # namespace -> (when read, its annotations): namespace_annotations
        self.notes: dict[str, tuple[float, dict[str, str]]] = {}
        self.notes_lock = threading.Lock()
        self.kubelet = Kubelet(
            tier, self.kubectl, self.say, self.namespace_cap, self.namespace_annotations
        )

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """One kubectl call; past its minute it is a failed call (exit 124), for the
        caller's retry, never an exception: one slow annotate of hundreds of scale pods on
        a loaded plane ended the watch, and no pod created after it ever started."""
        try:
            return subprocess.run(
                [*self.base, *args],
                input=stdin,
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 124, "", "kubectl: no answer within 60 s")

    def say(self, line: str) -> None:
        self.log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        self.log.flush()

    def pod_dir(self, ns: str, name: str) -> Path:
        return self.tier / "pods" / ns / name

    def _volume_source(self, pod: Obj, vol: Obj, ident: Identity) -> Path | None:
        """The folder of one of the pod's volumes, made as a kubelet would set it up, and
        given to the pod's fsGroup when it has one (set_volume_ownership)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        read_only = False
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            res = self.kubectl("get", "pvc", "-n", ns, claim, "-o", "jsonpath={.spec.volumeName}")
            pv = res.stdout.strip()
            if res.returncode != 0 or not pv:
                return None
            folder: Path = self.tier / "volumes" / pv
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = self.pod_dir(ns, name) / "volumes" / str(vol["name"])
            folder.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in vol:
            folder.chmod(0o777)  # a kubelet makes every emptyDir 0777
        for kind, key in (("secret", "secretName"), ("configMap", "name")):
            if kind in vol:
                read_only = True
                res = self.kubectl(
                    "get", kind.lower(), "-n", ns, vol[kind].get(key, ""), "-o", "json"
                )
                # each key's file has the volume's defaultMode (0644 when unset), as written
                # by the kubelet, owned by root
                mode = int(vol[kind].get("defaultMode", 0o644)) & 0o777
                if res.returncode == 0:
                    obj = json.loads(res.stdout)
                    for k, v in (obj.get("data") or {}).items():
                        data = base64.b64decode(v) if kind == "secret" else str(v).encode()
                        (folder / k).write_bytes(data)
                        (folder / k).chmod(mode)
        if ident.fs_group is not None and (
            "persistentVolumeClaim" in vol or "emptyDir" in vol or read_only
        ):
            set_volume_ownership(folder, ident.fs_group, read_only, ident.fs_group_policy)
        return folder

    def _env(self, pod: Obj, container: Obj, ident: Identity | None = None) -> list[Obj]:
        meta = pod["metadata"]
        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "spec.nodeName": pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        }
        # the downward API's label and annotation paths, as a kubelet resolves them (a key
        # the pod lacks gives ""): the workers' rank comes from a label so
        for field in ("labels", "annotations"):
            for k, v in (meta.get(field) or {}).items():
                fields[f"metadata.{field}['{k}']"] = str(v)
            for e in container.get("env") or []:
                path = str(((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", ""))
                if path.startswith(f"metadata.{field}['"):
                    fields.setdefault(path, "")
        out: dict[str, str] = {}
        for e in container.get("env") or []:
            if "value" in e:
                out[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") in fields:
                out[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        # What confine.sh reads; never taken from the pod's own env.
        for key in list(out):
            if key.startswith("MLENV_KUBE_") or key == "PATH":
                del out[key]
        venv_bin = str(Path(sys.executable).parent)
        out.update(
            {
                "HOSTNAME": meta["name"],
                "HOME": "/root",
                "MLENV_KUBE_PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "MLENV_KUBE_POD_NAME": meta["name"],
                "MLENV_KUBE_WORKDIR": container.get("workingDir") or "/",
            }
        )
        # The package as an image would have it installed (the checkout, read-only below).
        repo = str(Path(__file__).resolve().parents[3])
        out["PYTHONPATH"] = repo + (":" + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
        if ident is not None:
            out.update(ident.env())  # confine.sh drops to it (setpriv); HOME is the UID's
        return [{"name": k, "value": v} for k, v in out.items()]

    def namespace_annotations(self, ns: str) -> dict[str, str] | None:
        """The namespace's annotations (None when they could not be read), read at most
        once per NOTES_TTL_S: a burst of 500 deletions in one namespace read them once per
        pod, one kubectl call each, and held every other pod of the plane for 50 s."""
        now = time.monotonic()
        with self.notes_lock:  # the kubelet's thread asks too
            held = self.notes.get(ns)
            if held is not None and now - held[0] < NOTES_TTL_S:
                return held[1]
        res = self.kubectl("get", "namespace", ns, "--output=jsonpath={.metadata.annotations}")
        if res.returncode != 0:
            return None
        try:
            raw = json.loads(res.stdout or "{}")
        except ValueError:
            return None
        notes = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        with self.notes_lock:
            self.notes[ns] = (now, notes)
        return notes

    def identities(self, pod: Obj) -> dict[str, Identity] | None:
        """Each container's identity (identity.pod_identity), by container name; None when
        the pod cannot start as specified (said once in the controller's log; the pod stays
        unready, as a kubelet's CreateContainerConfigError leaves it) or its namespace
        could not be read."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        notes = self.namespace_annotations(ns)
        if notes is None:
            return None
        try:
            return {
                str(c["name"]): pod_identity(pod, c, notes, self.flavor)
                for c in pod["spec"]["containers"]
            }
        except IdentityError as e:
            if (ns, name, pod["metadata"].get("uid")) not in self.refused:
                self.refused.add((ns, name, pod["metadata"].get("uid")))
                self.say(f"{ns}/{name}: not started (CreateContainerConfigError): {e}")
            return None

    def prepare(self, pod: Obj) -> bool:
        meta, spec = pod["metadata"], pod["spec"]
        ns, name = meta["namespace"], meta["name"]
        folder = self.pod_dir(ns, name)
        (folder / "upper").mkdir(parents=True, exist_ok=True)
        # whose folder this is: a pod of the same name later is not this one
        (folder / "uid").write_text(meta["uid"] + "\n")
        container = spec["containers"][0]
        idents = self.identities(pod)
        if idents is None:
            return False
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        mounts = []
        for vm in container.get("volumeMounts") or []:
            vol = vols.get(vm["name"])
            if vol is None:
                continue
            src = self._volume_source(pod, vol, idents[container["name"]])
            if src is None:
                return False  # its claim is not bound yet: try again on the next event
            if vm.get("subPath"):
                src = src / vm["subPath"]
            src.mkdir(parents=True, exist_ok=True)
            mounts.append(f"{vm['mountPath']}={src}")
        # each container's log (the kubelet's shim writes it in the CRI format kwok's log
        # reader parses) and its last run's (--previous)
        logs = folder / "containers"
        logs.mkdir(exist_ok=True)
        for c in spec["containers"]:
            for f in (logs / f"{c['name']}.log", logs / f"{c['name']}.previous.log"):
                f.touch(exist_ok=True)
        if self.net is None:
            self.say(f"{ns}/{name}: the plane has no pod network ({self.tier / podnet.NET_FILE})")
            return False
        old = podnet.read_record(folder)
        if old is not None and old.uid != meta["uid"]:
            # a pod of the same name before this one, whose deletion the watch missed
            kill_pod_processes(folder)
        try:
            net = podnet.attach(folder, self.net, meta["uid"])
        except podnet.NetError as e:
            self.say(f"{ns}/{name}: no network: {e}")
            return False
        # The pod's /etc/hosts: a link to its namespace's names file (podroot.sh mounts its
        # folder read-only at NAMES_MOUNT). The file is written, with this pod in it, before
        # the pod is annotated ROOT_READY (flush), so no pod starts without its own name.
        # Made before the root is mounted: the upper layer is not to change under the overlay.
        etc = folder / "upper" / "etc"
        etc.mkdir(exist_ok=True)
        hosts = etc / "hosts"
        if not hosts.is_symlink():
            hosts.unlink(missing_ok=True)
            hosts.symlink_to(f"{NAMES_MOUNT}/hosts")
        image_files(folder / "upper")
        if not self.mount_root(folder, ns, name, mounts):
            return False
        # one exec entry per container: each runs as its own identity (the pod's root and
        # mounts are the first container's, as before)
        envs = self.container_envs(pod, idents)
        execs = [
            {
                "containers": [c["name"]],
                "local": {"envs": [{"name": k, "value": v} for k, v in envs[c["name"]].items()]},
            }
            for c in spec["containers"]
        ]
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": meta["uid"]}]
        objs = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Exec",
                    "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
                    "spec": {"execs": execs},
                },
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Logs",
                    "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
                    "spec": {
                        "logs": [
                            {
                                "containers": [c["name"]],
                                "logsFile": str(logs / f"{c['name']}.log"),
                                "previousLogsFile": str(logs / f"{c['name']}.previous.log"),
                                "follow": True,
                            }
                            for c in spec["containers"]
                        ]
                    },
                },
            ],
        }
        res = self.kubectl("apply", "-f", "-", stdin=json.dumps(objs))
        if res.returncode != 0:
            self.say(f"{ns}/{name}: Exec/Logs not written: {res.stderr.strip()}")
            return False
        self.ips[(ns, name)] = net.ip
        self.unannotated[(ns, name)] = net.ip
        self.envs[(ns, name)] = envs
        self.dirty.add(ns)
        self.say(f"{ns}/{name}: root ready ({len(mounts)} mounts), address {net.ip}")
        return True

    def mount_root(self, folder: Path, ns: str, name: str, mounts: list[str]) -> bool:
        """The pod's root, mounted once for the pod's life (start_root); kept when its
        holder still runs (the controller started again)."""
        rec = read_root(folder)
        if rec is not None and root_alive(rec):
            return True
        release_root(folder)
        try:
            start_root(self.tier, folder, name, mounts, self.names_dir(ns))
        except RootError as e:
            self.say(f"{ns}/{name}: pod root not mounted: {e}")
            return False
        return True

    def start_containers(self, ns: str, name: str) -> None:
        """Hand a prepared pod to the kubelet, which runs its containers."""
        pod, envs = self.pods.get((ns, name)), self.envs.get((ns, name))
        ip = self.ips.get((ns, name))
        if pod is None or envs is None or ip is None:
            return
        self.kubelet.start(pod, self.pod_dir(ns, name), ip, envs)

    def names_dir(self, ns: str) -> Path:
        return self.tier / "pods" / ns / NAMES_DIR

    def flush(self) -> None:
        """The batched end of preparing: each changed namespace's names file written once,
        then every prepared pod annotated ``ROOT_READY`` (the pod-ready stage starts it)."""
        for ns in sorted(self.dirty):
            self.write_hosts(ns)
        self.dirty.clear()
        for (ns, name), ip in list(self.unannotated.items()):
            del self.unannotated[(ns, name)]
            res = self.kubectl(
                "annotate",
                "pod",
                "-n",
                ns,
                name,
                f"{ROOT_READY}=true",
                f"{POD_IP}={ip}",
                "--overwrite",
            )
            if res.returncode != 0 and (ns, name) in self.pods:
                self.say(f"{ns}/{name}: not annotated: {res.stderr.strip()}")
                self.retry.add((ns, name))
            elif res.returncode == 0:
                self.start_containers(ns, name)
        if self.scale_pending:
            self.flush_scale()
        if self.sweep:
            self.sweep = False
            self.sweep_volumes()

    def flush_scale(self) -> None:
        """The scale pods seen since the last flush: each its own Exec (manifests.
        scale_pod_exec: the shared root with a ``/workspace`` of its own), all in one apply,
        then annotated ``ROOT_READY`` with one call per namespace (the pod-ready-scale stage
        waits for it). Two calls whatever the count: thousands of them fit here."""
        pending, self.scale_pending = self.scale_pending, {}
        root = self.tier / "pods" / manifests.SCALE_ROOT[0] / manifests.SCALE_ROOT[1]
        env = manifests.scale_env()  # this process runs the tier's Python and checkout too
        execs = []
        for (ns, name), pod in pending.items():
            (root / manifests.SCALE_WORKSPACES / ns / name).mkdir(parents=True, exist_ok=True)
            execs.append(manifests.scale_pod_exec(root, env, pod))
        res = self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": execs}),
        )
        if res.returncode != 0:
            self.say(f"{len(execs)} scale pod Exec(s) not written: {res.stderr.strip()}")
            self.retry.update(pending)
            return
        by_ns: dict[str, list[str]] = {}
        for ns, name in pending:
            by_ns.setdefault(ns, []).append(name)
        for ns, every in sorted(by_ns.items()):
            # kubectl patches each named pod in turn: a call of hundreds outlasted its minute
            ordered = sorted(every)
            for at in range(0, len(ordered), SCALE_ANNOTATE_CHUNK):
                names = ordered[at : at + SCALE_ANNOTATE_CHUNK]
                res = self.kubectl(
                    "annotate", "pod", "-n", ns, *names, f"{ROOT_READY}=true", "--overwrite"
                )
                if res.returncode != 0:
                    self.say(f"{ns}: {len(names)} scale pod(s) not annotated: {res.stderr.strip()}")
                    self.retry.update((ns, n) for n in names if (ns, n) in self.pods)

    def write_hosts(self, ns: str) -> None:
        """The namespace's names file, every pod's ``/etc/hosts`` (a link to it): this
        machine's, then each prepared pod's name at its address (the line the kubelet
        writes into the pod's own file), and a pod with a hostname and subdomain (a
        StatefulSet's pod behind its headless Service) also by the names cluster DNS would
        give it. The tier has no cluster DNS, so this is how pod 0's launcher and
        rendezvous name reach the other pods. One file for the namespace, written once per
        batch: the cost of a new pod does not grow with the pods already there (each pod's
        own file, rewritten for every new pod, made a deploy of N pods write N² files).
        Written only when it changes; gone with the namespace's last pod folder."""
        lines = []
        for (pns, name), pod in sorted(self.pods.items()):
            ip = self.ips.get((pns, name))
            if pns != ns or not ip or pod["metadata"].get("deletionTimestamp"):
                continue
            host, sub = pod["spec"].get("hostname"), pod["spec"].get("subdomain")
            names = [name]
            if host and sub:
                fq = f"{host}.{sub}.{ns}.svc"
                names = [f"{fq}.cluster.local", fq, f"{host}.{sub}", host]
                names += [name] if name != host else []
            lines.append(f"{ip}\t{' '.join(names)}\n")
        folder = self.names_dir(ns)
        pods = (
            [d for d in folder.parent.iterdir() if d.name != NAMES_DIR]
            if folder.parent.is_dir()
            else []
        )
        if not lines and not pods:
            shutil.rmtree(folder.parent, ignore_errors=True)
            return
        base = (
            Path("/etc/hosts").read_text()
            if Path("/etc/hosts").is_file()
            else "127.0.0.1\tlocalhost\n"
        )
        base += "" if base.endswith("\n") else "\n"
        text = base + "# kube tier: the namespace's pods\n" + "".join(lines)
        folder.mkdir(parents=True, exist_ok=True)
        hosts = folder / "hosts"
        try:
            if hosts.read_text() == text:
                return
        except OSError:
            pass
        tmp = folder / ".hosts.tmp"
        tmp.write_text(text)
        tmp.chmod(0o644)
        os.replace(tmp, hosts)

    def forget(self, ns: str, name: str) -> None:
        """A pod that is gone: its processes, network and folder go (and, at the next
        flush, its name and any volume whose PV went with it)."""
        self.kubelet.forget(ns, name)
        self.envs.pop((ns, name), None)
        self.ips.pop((ns, name), None)
        self.unannotated.pop((ns, name), None)
        self.retry.discard((ns, name))
        self.refused = {r for r in self.refused if r[:2] != (ns, name)}
        self.dirty.add(ns)
        self.sweep = True
        folder = self.pod_dir(ns, name)
        if folder.is_dir() and (self.tier / "pods") in folder.parents:
            for pid in kill_pod_processes(folder):
                self.say(f"{ns}/{name}: killed process {pid} left in the pod")
            release_root(folder)
            net = podnet.release(folder)
            if net is not None:
                self.say(f"{ns}/{name}: network released ({net.ip}, {net.veth})")
            shutil.rmtree(folder, ignore_errors=True)

    def sweep_volumes(self) -> None:
        res = self.kubectl("get", "pv", "-o", "jsonpath={.items[*].metadata.name}")
        if res.returncode == 0:
            live = set(res.stdout.split())
            vols = self.tier / "volumes"
            for d in vols.iterdir() if vols.is_dir() else []:
                if d.name not in live:
                    shutil.rmtree(d, ignore_errors=True)

    def terminate(self, pod: Obj) -> None:
        """A deleted pod's grace period, as a kubelet runs it: SIGTERM to its processes
        now, SIGKILL at its deletionTimestamp (at most ``cap`` seconds on), then the pod
        object goes (a delete with no grace left, as the kubelet's final status does).
        kwok's pod-delete stage waits for the deletionTimestamp too: a tier without this
        controller still keeps the grace, uncapped."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"], str(meta.get("uid", "")))
        if key in self.terminating:
            return
        self.terminating.add(key)
        self.kubelet.forget(key[0], key[1])  # nothing of it restarts now
        if (self.pod_dir(key[0], key[1]) / "merged").is_dir():
            kill_pod_processes(self.pod_dir(key[0], key[1]), signal.SIGTERM)
        due = _deletion_due(pod, self.namespace_cap(key[0]), time.time())
        self.say(f"{key[0]}/{key[1]}: Terminating: SIGTERM sent, removed in {due:.1f} s")
        timer = threading.Timer(due, self._finish, key)
        timer.daemon = True
        timer.start()

    def namespace_cap(self, ns: str) -> float:
        """The tier's cap, or the namespace's own (annotation GRACE_CAP_ANNOTATION, for a
        test that needs deletes to take longer than the plane's default)."""
        notes = self.namespace_annotations(ns) or {}
        try:
            return max(0.0, float(notes.get(GRACE_CAP_ANNOTATION, self.cap)))
        except ValueError:
            return self.cap

    def _finish(self, ns: str, name: str, uid: str) -> None:
        if (self.pod_dir(ns, name) / "merged").is_dir():
            kill_pod_processes(self.pod_dir(ns, name))
        # only this pod: a successor of the same name is not ours to delete (a StatefulSet
        # makes one only once this one is gone, so the window is the two calls' time)
        live = self.kubectl(
            "get",
            "pod",
            f"--namespace={ns}",
            name,
            "--ignore-not-found",
            "--output=jsonpath={.metadata.uid}",
        )
        if live.returncode != 0 or live.stdout.strip() != uid:
            return
        res = self.kubectl(
            "delete",
            "pod",
            f"--namespace={ns}",
            name,
            "--grace-period=0",
            "--force",
            "--wait=false",
            "--ignore-not-found",
        )
        if res.returncode != 0:
            self.say(f"{ns}/{name}: delete at the end of its grace failed: {res.stderr.strip()}")

    def folder_uid(self, ns: str, name: str) -> str | None:
        try:
            return (self.pod_dir(ns, name) / "uid").read_text().strip()
        except OSError:
            return None

    def handle(self, kind: str, pod: Obj) -> bool:
        """Act on one watch event; False when the pod must be looked at again."""
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        key, uid = (ns, name), str(meta.get("uid", ""))
        if kind == "DELETED":
            self.pods.pop(key, None)
            self.scale_pending.pop(key, None)
            self.terminating.discard((ns, name, uid))
            self.forget(ns, name)
            return True
        self.pods[key] = pod
        self.kubelet.update(pod)
        if meta.get("deletionTimestamp"):
            self.dirty.add(ns)  # out of the names file from its first Terminating second
            self.terminate(pod)
            return True
        if not pod["spec"].get("nodeName"):
            return True
        if is_scale_pod(pod):  # kwok-only: no root, no network of its own; an Exec of its own
            if not (meta.get("annotations") or {}).get(ROOT_READY):
                self.scale_pending[key] = pod
            return True
        held = self.folder_uid(ns, name)
        if held is not None and held != uid:
            # the folder of a pod of the same name before this one, whose deletion was
            # missed: a new pod starts on a new root
            self.say(f"{ns}/{name}: the folder of an earlier pod {held} goes")
            self.forget(ns, name)
        notes = meta.get("annotations") or {}
        if held == uid and notes.get(ROOT_READY) and (self.pod_dir(ns, name) / "upper").is_dir():
            if notes.get(POD_IP) and self.ips.get(key) != notes[POD_IP]:
                self.ips[key] = notes[POD_IP]  # prepared by an earlier run of the controller
                self.dirty.add(ns)
            if not self.kubelet.managed(ns, name, uid):
                return self.adopt(pod)
            return True
        if key in self.unannotated:
            return True
        return self.prepare(pod)

    def adopt(self, pod: Obj) -> bool:
        """A pod an earlier run of the controller prepared: its containers go back to the
        kubelet (running ones adopted from their records)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        idents = self.identities(pod)
        if idents is None:
            return False
        self.envs[(ns, name)] = self.container_envs(pod, idents)
        self.start_containers(ns, name)
        return True

    def container_envs(self, pod: Obj, idents: dict[str, Identity]) -> dict[str, dict[str, str]]:
        """Each container's environment for confine.sh (its Exec entry's), by name."""
        folder = self.pod_dir(pod["metadata"]["namespace"], pod["metadata"]["name"])
        return {
            str(c["name"]): {
                **{v["name"]: v["value"] for v in self._env(pod, c, idents[c["name"]])},
                "MLENV_KUBE_POD_ROOT": str(folder),
            }
            for c in pod["spec"]["containers"]
        }

    def event(self, kind: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        try:
            ok = self.handle(kind, pod)
        except (OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
            self.say(f"{key[0]}/{key[1]}: {type(e).__name__}: {e}")
            ok = False
        if ok or kind == "DELETED":
            self.retry.discard(key)
        else:
            self.retry.add(key)

    def relist(self) -> str:
        """Every pod in one request (kubectl's own list pages at 500 pods, and its watch
        output then starts with a List, not a pod: the controller took none of them), each
        handled as an event; a pod folder whose pod is not listed is a deletion missed.
        The list's resourceVersion ("" when the list failed)."""
        res = self.kubectl("get", "--raw", "/api/v1/pods")
        if res.returncode != 0:
            self.say(f"pods not listed: {res.stderr.strip()}")
            return ""
        listed = json.loads(res.stdout)
        pods = listed.get("items") or []
        live = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
        for key in set(self.pods) - live:
            self.pods.pop(key, None)
        root = self.tier / "pods"
        for ns_dir in sorted(root.iterdir()) if root.is_dir() else []:
            if ns_dir.name.startswith("_"):
                # the tier's own roots (the scale nodes' shared one, plane.SCALE_ROOT): no
                # namespace name starts with "_", so no pod ever owned them
                continue
            for folder in sorted(ns_dir.iterdir()) if ns_dir.is_dir() else []:
                if folder.name != NAMES_DIR and (ns_dir.name, folder.name) not in live:
                    self.say(f"{ns_dir.name}/{folder.name}: deleted while not watched")
                    self.forget(ns_dir.name, folder.name)
        for p in pods:
            self.event("ADDED", p)
        self.flush()
        return str(listed.get("metadata", {}).get("resourceVersion", ""))

    def watch(self, rv: str) -> str:
        """Follow the pods from ``rv`` until the server ends the request; the last event's
        resourceVersion to go on from ("" when a new list is needed)."""
        proc = subprocess.Popen(
            [
                *self.base[:-1],
                f"--request-timeout={WATCH_S + 30}s",
                "get",
                "--raw",
                f"/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                f"&timeoutSeconds={WATCH_S}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        fd, buf = proc.stdout.fileno(), b""
        try:
            while True:
                busy = bool(self.unannotated or self.dirty or self.sweep)
                ready, _, _ = select.select([fd], [], [], QUIET_S if busy else RETRY_S)
                if not ready:
                    self.flush()
                    self.retry_due()
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    proc.wait()
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError:
                        self.say(f"watch: not an event: {line[:200]!r}")
                        return ""
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":  # 410 Gone: the resourceVersion is too old
                        self.say(f"watch ended: {obj.get('message', obj)}")
                        return ""
                    rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
                    if event.get("type") != "BOOKMARK":
                        self.event(str(event.get("type", "")), obj)
                if len(self.unannotated) >= BATCH:
                    self.flush()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.flush()
        return rv if proc.returncode == 0 else ""

    def retry_due(self) -> None:
        now = time.monotonic()
        if not self.retry or now - self.last_retry < RETRY_S:
            return
        self.last_retry = now
        for key in sorted(self.retry):
            pod = self.pods.get(key)
            if pod is None:
                self.retry.discard(key)
            else:
                self.event("MODIFIED", pod)

    def run(self) -> None:
        threading.Thread(target=self.kubelet.run, name="kubelet", daemon=True).start()
        rv = ""
        while True:
            if not rv:
                rv = self.relist()
                if not rv:
                    time.sleep(0.5)  # the API server is away: try again
                    continue
            rv = self.watch(rv)


def main(argv: list[str]) -> int:
    tier, kubectl, kubeconfig = argv
    os.umask(0o022)
    Controller(Path(tier), kubectl, kubeconfig).run()
    return 0
